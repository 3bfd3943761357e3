// Synchronous gpu.alloc / gpu.memcpy / gpu.memset / gpu.dealloc (each done when it returns),
// then the async forms chained on tokens and joined by a blocking gpu.wait.
module attributes {gpu.container_module} {
  func.func private @printMemrefI32(memref<*xi32>)
  func.func private @printMemrefF32(memref<*xf32>)

  func.func @main() {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c4 = arith.constant 4 : index
    %ten = arith.constant 10 : i32
    %h = memref.alloc() : memref<4xi32>
    scf.for %i = %c0 to %c4 step %c1 {
      %n = arith.index_cast %i : index to i32
      %v = arith.muli %n, %ten : i32
      memref.store %v, %h[%i] : memref<4xi32>
    }
    %d = gpu.alloc() : memref<4xi32>
    gpu.memcpy %d, %h : memref<4xi32>, memref<4xi32>
    %e = gpu.alloc() : memref<4xi32>
    %seven = arith.constant 7 : i32
    gpu.memset %e, %seven : memref<4xi32>, i32
    gpu.launch blocks(%bx, %by, %bz) in (%gx = %c1, %gy = %c1, %gz = %c1)
               threads(%tx, %ty, %tz) in (%sx = %c4, %sy = %c1, %sz = %c1) {
      %x = memref.load %d[%tx] : memref<4xi32>
      %y = memref.load %e[%tx] : memref<4xi32>
      %t = arith.index_cast %tx : index to i32
      %s0 = arith.addi %x, %y : i32
      %s = arith.addi %s0, %t : i32
      memref.store %s, %d[%tx] : memref<4xi32>
      gpu.terminator
    }
    gpu.memcpy %h, %d : memref<4xi32>, memref<4xi32>
    gpu.dealloc %d : memref<4xi32>
    gpu.dealloc %e : memref<4xi32>
    %uh = memref.cast %h : memref<4xi32> to memref<*xi32>
    call @printMemrefI32(%uh) : (memref<*xi32>) -> ()

    %hf = memref.alloc() : memref<2xf32>
    %half = arith.constant 1.5 : f32
    %t0 = gpu.wait async
    %f, %t1 = gpu.alloc async [%t0] () : memref<2xf32>
    %t2 = gpu.memset async [%t1] %f, %half : memref<2xf32>, f32
    %t3 = gpu.memcpy async [%t2] %hf, %f : memref<2xf32>, memref<2xf32>
    %t4 = gpu.dealloc async [%t3] %f : memref<2xf32>
    gpu.wait [%t4]
    %uf = memref.cast %hf : memref<2xf32> to memref<*xf32>
    call @printMemrefF32(%uf) : (memref<*xf32>) -> ()
    memref.dealloc %h : memref<4xi32>
    memref.dealloc %hf : memref<2xf32>
    return
  }
}
