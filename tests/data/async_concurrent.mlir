// Two single-thread kernels on two independent `gpu.wait async` tokens that can only both see
// the other's flag when they run at the same time: each sets its own flag, then spins (at most
// %limit atomic reads, so a serial run ends with a wrong result instead of a hang) until the
// other's flag is set, and writes 1 to seen[me] if it saw it. The tokens are joined by
// `gpu.wait [%l1, %l2]`.
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @spin(%flags: memref<?xi32>, %seen: memref<?xi32>, %me: index, %other: index,
                   %limit: i64) kernel {
      %zero = arith.constant 0 : i32
      %one = arith.constant 1 : i32
      %c0 = arith.constant 0 : i64
      %c1 = arith.constant 1 : i64
      %old = memref.atomic_rmw assign %one, %flags[%me] : (i32, memref<?xi32>) -> i32
      %r:2 = scf.while (%i = %c0, %saw = %zero) : (i64, i32) -> (i64, i32) {
        %more = arith.cmpi ult, %i, %limit : i64
        %none = arith.cmpi eq, %saw, %zero : i32
        %go = arith.andi %more, %none : i1
        scf.condition(%go) %i, %saw : i64, i32
      } do {
      ^bb0(%j: i64, %s: i32):
        %v = memref.atomic_rmw addi %zero, %flags[%other] : (i32, memref<?xi32>) -> i32
        %set = arith.cmpi ne, %v, %zero : i32
        %s2 = arith.extui %set : i1 to i32
        %j2 = arith.addi %j, %c1 : i64
        scf.yield %j2, %s2 : i64, i32
      }
      memref.store %r#1, %seen[%me] : memref<?xi32>
      gpu.return
    }
  }
  func.func @main(%flags: memref<?xi32>, %seen: memref<?xi32>, %limit: i64) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %t1 = gpu.wait async
    %t2 = gpu.wait async
    %l1 = gpu.launch_func async [%t1] @kernels::@spin blocks in (%c1, %c1, %c1)
        threads in (%c1, %c1, %c1)
        args(%flags : memref<?xi32>, %seen : memref<?xi32>, %c0 : index, %c1 : index,
             %limit : i64)
    %l2 = gpu.launch_func async [%t2] @kernels::@spin blocks in (%c1, %c1, %c1)
        threads in (%c1, %c1, %c1)
        args(%flags : memref<?xi32>, %seen : memref<?xi32>, %c1 : index, %c0 : index,
             %limit : i64)
    gpu.wait [%l1, %l2]
    return
  }
}
