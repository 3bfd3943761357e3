// Reverse every block of 256 elements in place through static workgroup memory + gpu.barrier.
// n must be a multiple of 256.
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @reverse(%a: memref<?xf32>)
        workgroup(%tile : memref<256xf32, #gpu.address_space<workgroup>>) kernel {
      %c255 = arith.constant 255 : index
      %bid = gpu.block_id x
      %bdim = gpu.block_dim x
      %tid = gpu.thread_id x
      %base = arith.muli %bid, %bdim : index
      %i = arith.addi %base, %tid : index
      %v = memref.load %a[%i] : memref<?xf32>
      memref.store %v, %tile[%tid] : memref<256xf32, #gpu.address_space<workgroup>>
      gpu.barrier
      %j = arith.subi %c255, %tid : index
      %w = memref.load %tile[%j] : memref<256xf32, #gpu.address_space<workgroup>>
      memref.store %w, %a[%i] : memref<?xf32>
      gpu.return
    }
  }
  func.func @main(%a: memref<?xf32>) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c256 = arith.constant 256 : index
    %n = memref.dim %a, %c0 : memref<?xf32>
    %g = arith.divui %n, %c256 : index
    gpu.launch_func @kernels::@reverse blocks in (%g, %c1, %c1) threads in (%c256, %c1, %c1)
        args(%a : memref<?xf32>)
    return
  }
}
