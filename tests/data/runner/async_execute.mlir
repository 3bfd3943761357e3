// async.execute regions (run in place by pywave) that pass a device buffer as an
// !async.value, depend on each other's tokens, and are awaited.
module attributes {gpu.container_module} {
  func.func private @printMemrefI32(memref<*xi32>)

  func.func @main() {
    %c1 = arith.constant 1 : index
    %c2 = arith.constant 2 : index
    %h = memref.alloc() : memref<2xi32>
    %t0, %v0 = async.execute () -> !async.value<memref<2xi32>> {
      %b = gpu.alloc() : memref<2xi32>
      %five = arith.constant 5 : i32
      gpu.memset %b, %five : memref<2xi32>, i32
      async.yield %b : memref<2xi32>
    }
    %t1 = async.execute [%t0] (%v0 as %b : !async.value<memref<2xi32>>) {
      gpu.launch blocks(%bx, %by, %bz) in (%gx = %c1, %gy = %c1, %gz = %c1)
                 threads(%tx, %ty, %tz) in (%sx = %c2, %sy = %c1, %sz = %c1) {
        %x = memref.load %b[%tx] : memref<2xi32>
        %i = arith.index_cast %tx : index to i32
        %y = arith.addi %x, %i : i32
        memref.store %y, %b[%tx] : memref<2xi32>
        gpu.terminator
      }
      gpu.memcpy %h, %b : memref<2xi32>, memref<2xi32>
      async.yield
    }
    async.await %t1 : !async.token
    %b = async.await %v0 : !async.value<memref<2xi32>>
    gpu.dealloc %b : memref<2xi32>
    %u = memref.cast %h : memref<2xi32> to memref<*xi32>
    call @printMemrefI32(%u) : (memref<*xi32>) -> ()
    return
  }
}
