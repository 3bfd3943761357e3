// grid x, grid z and block x come from the caller, so one module serves every limit test.
// Block (bx, 0, 0) adds 1 to a[bx * block_x + tid] (blocks with z > 0 do nothing).
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @inc(%a: memref<?xf32>, %n: index) kernel {
      %c0 = arith.constant 0 : index
      %bid = gpu.block_id x
      %bz = gpu.block_id z
      %bdim = gpu.block_dim x
      %tid = gpu.thread_id x
      %t0 = arith.muli %bid, %bdim : index
      %i = arith.addi %t0, %tid : index
      %in = arith.cmpi ult, %i, %n : index
      %z0 = arith.cmpi eq, %bz, %c0 : index
      %ok = arith.andi %in, %z0 : i1
      scf.if %ok {
        %one = arith.constant 1.0 : f32
        %v = memref.load %a[%i] : memref<?xf32>
        %w = arith.addf %v, %one : f32
        memref.store %w, %a[%i] : memref<?xf32>
      }
      gpu.return
    }
  }
  func.func @main(%a: memref<?xf32>, %grid_x: index, %grid_z: index, %block_x: index) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %n = memref.dim %a, %c0 : memref<?xf32>
    gpu.launch_func @kernels::@inc blocks in (%grid_x, %c1, %grid_z)
        threads in (%block_x, %c1, %c1) args(%a : memref<?xf32>, %n : index)
    return
  }
}
