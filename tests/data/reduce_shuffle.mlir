// @block_sum: out[block] = sum of the block's 256 elements (gpu.all_reduce add).
// @swap_pairs: out[i] = a[i ^ 1] (gpu.shuffle xor within each warp). n is a multiple of 256.
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @block_sum(%a: memref<?xf32>, %out: memref<?xf32>) kernel {
      %c0 = arith.constant 0 : index
      %bid = gpu.block_id x
      %bdim = gpu.block_dim x
      %tid = gpu.thread_id x
      %t0 = arith.muli %bid, %bdim : index
      %i = arith.addi %t0, %tid : index
      %v = memref.load %a[%i] : memref<?xf32>
      %sum = gpu.all_reduce add %v uniform {} : (f32) -> (f32)
      %first = arith.cmpi eq, %tid, %c0 : index
      scf.if %first {
        memref.store %sum, %out[%bid] : memref<?xf32>
      }
      gpu.return
    }
    gpu.func @swap_pairs(%a: memref<?xf32>, %out: memref<?xf32>) kernel {
      %c1 = arith.constant 1 : i32
      %c32 = arith.constant 32 : i32
      %bid = gpu.block_id x
      %bdim = gpu.block_dim x
      %tid = gpu.thread_id x
      %t0 = arith.muli %bid, %bdim : index
      %i = arith.addi %t0, %tid : index
      %v = memref.load %a[%i] : memref<?xf32>
      %r, %valid = gpu.shuffle xor %v, %c1, %c32 : f32
      memref.store %r, %out[%i] : memref<?xf32>
      gpu.return
    }
  }
  func.func @block_sum(%a: memref<?xf32>, %out: memref<?xf32>) {
    %c1 = arith.constant 1 : index
    %c256 = arith.constant 256 : index
    %c0 = arith.constant 0 : index
    %n = memref.dim %a, %c0 : memref<?xf32>
    %g = arith.divui %n, %c256 : index
    gpu.launch_func @kernels::@block_sum blocks in (%g, %c1, %c1) threads in (%c256, %c1, %c1)
        args(%a : memref<?xf32>, %out : memref<?xf32>)
    return
  }
  func.func @swap_pairs(%a: memref<?xf32>, %out: memref<?xf32>) {
    %c1 = arith.constant 1 : index
    %c256 = arith.constant 256 : index
    %c0 = arith.constant 0 : index
    %n = memref.dim %a, %c0 : memref<?xf32>
    %g = arith.divui %n, %c256 : index
    gpu.launch_func @kernels::@swap_pairs blocks in (%g, %c1, %c1) threads in (%c256, %c1, %c1)
        args(%a : memref<?xf32>, %out : memref<?xf32>)
    return
  }
}
