// Host code as MLIR's own test programs write it: memref.alloc / alloca / dealloc on the
// host, gpu.host_register, a synchronous launch whose results the host reads at once,
// memref.copy, helpers that return values (one private, one public but called by @main),
// and the runner utilities (printMemref*, printF32, vector.print).
module attributes {gpu.container_module} {
  func.func private @printMemrefF32(memref<*xf32>)
  func.func private @printMemrefI32(memref<*xi32>)
  func.func private @printF32(f32)
  func.func private @printNewline()

  func.func private @half_of(%i: index) -> f32 {
    %n = arith.index_cast %i : index to i32
    %f = arith.sitofp %n : i32 to f32
    %h = arith.constant 0.5 : f32
    %r = arith.mulf %f, %h : f32
    return %r : f32
  }

  func.func @sum2(%a: f32, %b: f32) -> f32 {
    %r = arith.addf %a, %b : f32
    return %r : f32
  }

  func.func @main() {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c2 = arith.constant 2 : index
    %c3 = arith.constant 3 : index
    %m = memref.alloc() : memref<2x3xf32>
    scf.for %i = %c0 to %c2 step %c1 {
      scf.for %j = %c0 to %c3 step %c1 {
        %row = arith.muli %i, %c3 : index
        %k = arith.addi %row, %j : index
        %v = func.call @half_of(%k) : (index) -> f32
        memref.store %v, %m[%i, %j] : memref<2x3xf32>
      }
    }
    %u = memref.cast %m : memref<2x3xf32> to memref<*xf32>
    gpu.host_register %u : memref<*xf32>
    gpu.launch blocks(%bx, %by, %bz) in (%gx = %c1, %gy = %c1, %gz = %c1)
               threads(%tx, %ty, %tz) in (%sx = %c3, %sy = %c2, %sz = %c1) {
      %x = memref.load %m[%ty, %tx] : memref<2x3xf32>
      %y = arith.addf %x, %x : f32
      memref.store %y, %m[%ty, %tx] : memref<2x3xf32>
      gpu.terminator
    }
    call @printMemrefF32(%u) : (memref<*xf32>) -> ()

    %a = arith.constant 1.5 : f32
    %b = arith.constant 2.25 : f32
    %s = call @sum2(%a, %b) : (f32, f32) -> f32
    call @printF32(%s) : (f32) -> ()
    call @printNewline() : () -> ()

    %src = memref.alloca() : memref<3xi32>
    %seven = arith.constant 7 : i32
    scf.for %i = %c0 to %c3 step %c1 {
      %n = arith.index_cast %i : index to i32
      %v = arith.addi %n, %seven : i32
      memref.store %v, %src[%i] : memref<3xi32>
    }
    %dst = memref.alloc() : memref<3xi32>
    memref.copy %src, %dst : memref<3xi32> to memref<3xi32>
    %ud = memref.cast %dst : memref<3xi32> to memref<*xi32>
    call @printMemrefI32(%ud) : (memref<*xi32>) -> ()

    %pad = arith.constant 0.0 : f32
    %row1 = vector.transfer_read %m[%c1, %c0], %pad : memref<2x3xf32>, vector<3xf32>
    vector.print %row1 : vector<3xf32>
    memref.dealloc %dst : memref<3xi32>
    return
  }
}
