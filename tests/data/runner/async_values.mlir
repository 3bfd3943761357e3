// async.execute with dependencies, !async.value operands and results, awaits inside bodies
// (coroutine suspensions: Await{Token,Value,AllInGroup}AndExecute continuations) and a group
// awaited inside an execute. tests/libwavert/test_async_runtime.py runs it with MLIR's async lowering.
//   M = [21, 105, 22, 1, 2, 5, 8, 16]
func.func private @printMemrefI32(memref<*xi32>)

func.func @main() {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  %c5 = arith.constant 5 : index
  %c6 = arith.constant 6 : index
  %c7 = arith.constant 7 : index
  %M = memref.alloc() : memref<8xi32>

  %t0, %v0 = async.execute -> !async.value<i32> {
    %seven = arith.constant 7 : i32
    async.yield %seven : i32
  }
  %t1, %v1 = async.execute [%t0] (%v0 as %x : !async.value<i32>) -> !async.value<i32> {
    %three = arith.constant 3 : i32
    %y = arith.muli %x, %three : i32
    async.yield %y : i32
  }
  %t2 = async.execute [%t1] (%v1 as %y : !async.value<i32>) {
    %one = arith.constant 1 : i32
    %z = arith.addi %y, %one : i32
    memref.store %z, %M[%c2] : memref<8xi32>
    async.yield
  }
  %t3, %v3 = async.execute -> !async.value<i32> {
    %ti, %vi = async.execute -> !async.value<i32> {
      %hundred = arith.constant 100 : i32
      async.yield %hundred : i32
    }
    %w = async.await %vi : !async.value<i32>
    %five = arith.constant 5 : i32
    %r = arith.addi %w, %five : i32
    async.yield %r : i32
  }

  %g = async.create_group %c3 : !async.group
  scf.for %k = %c0 to %c3 step %c1 {
    %tk = async.execute [%t2] {
      %kv = arith.index_cast %k : index to i32
      %sq = arith.muli %kv, %kv : i32
      %one = arith.constant 1 : i32
      %e = arith.addi %sq, %one : i32
      %at = arith.addi %k, %c3 : index
      memref.store %e, %M[%at] : memref<8xi32>
      async.yield
    }
    %rank = async.add_to_group %tk, %g : !async.token
  }
  %t6 = async.execute {
    async.await_all %g
    %a = memref.load %M[%c3] : memref<8xi32>
    %four = arith.constant 4 : index
    %b2 = memref.load %M[%four] : memref<8xi32>
    %c = memref.load %M[%c5] : memref<8xi32>
    %ab = arith.addi %a, %b2 : i32
    %s = arith.addi %ab, %c : i32
    memref.store %s, %M[%c6] : memref<8xi32>
    async.yield
  }
  %t7 = async.execute [%t6] {
    %s = memref.load %M[%c6] : memref<8xi32>
    %d = arith.addi %s, %s : i32
    memref.store %d, %M[%c7] : memref<8xi32>
    async.yield
  }
  async.await %t7 : !async.token
  %a = async.await %v1 : !async.value<i32>
  memref.store %a, %M[%c0] : memref<8xi32>
  %b = async.await %v3 : !async.value<i32>
  memref.store %b, %M[%c1] : memref<8xi32>
  async.await %t2 : !async.token
  %u = memref.cast %M : memref<8xi32> to memref<*xi32>
  call @printMemrefI32(%u) : (memref<*xi32>) -> ()
  memref.dealloc %M : memref<8xi32>
  return
}
