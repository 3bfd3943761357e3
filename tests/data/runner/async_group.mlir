// async.execute bodies added to an async.group, async.await_all, and an !async.value: lowered
// to coroutines over libwavert_runner's mlirAsyncRuntime* (tests/libwavert/test_runner_utilities.py).
func.func private @printMemrefI32(memref<*xi32>)
func.func @main() {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %m = memref.alloc() : memref<4xi32>
  %g = async.create_group %c4 : !async.group
  scf.for %i = %c0 to %c4 step %c1 {
    %t = async.execute {
      %v = arith.index_cast %i : index to i32
      %w = arith.muli %v, %v : i32
      memref.store %w, %m[%i] : memref<4xi32>
      async.yield
    }
    %r = async.add_to_group %t, %g : !async.token
  }
  async.await_all %g
  %t2, %val = async.execute () -> !async.value<i32> {
    %x = memref.load %m[%c1] : memref<4xi32>
    %y = arith.addi %x, %x : i32
    async.yield %y : i32
  }
  async.await %t2 : !async.token
  %y = async.await %val : !async.value<i32>
  memref.store %y, %m[%c0] : memref<4xi32>
  %u = memref.cast %m : memref<4xi32> to memref<*xi32>
  call @printMemrefI32(%u) : (memref<*xi32>) -> ()
  return
}
