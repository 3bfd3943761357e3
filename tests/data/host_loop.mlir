// A host scf.for launching the same kernel %iters times: a += 1.0 each time.
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @add_one(%a: memref<?xf32>, %n: index) kernel {
      %bid = gpu.block_id x
      %bdim = gpu.block_dim x
      %tid = gpu.thread_id x
      %t0 = arith.muli %bid, %bdim : index
      %i = arith.addi %t0, %tid : index
      %in = arith.cmpi ult, %i, %n : index
      scf.if %in {
        %one = arith.constant 1.0 : f32
        %v = memref.load %a[%i] : memref<?xf32>
        %w = arith.addf %v, %one : f32
        memref.store %w, %a[%i] : memref<?xf32>
      }
      gpu.return
    }
  }
  func.func @main(%a: memref<?xf32>, %iters: index) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c256 = arith.constant 256 : index
    %n = memref.dim %a, %c0 : memref<?xf32>
    %g = arith.ceildivui %n, %c256 : index
    scf.for %k = %c0 to %iters step %c1 {
      gpu.launch_func @kernels::@add_one blocks in (%g, %c1, %c1) threads in (%c256, %c1, %c1)
          args(%a : memref<?xf32>, %n : index)
    }
    return
  }
}
