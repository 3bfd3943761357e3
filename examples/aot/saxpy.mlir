// y = alpha * x + y on 1-D dynamic memrefs: the ahead-of-time example (see README.md here).
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @saxpy(%alpha: f32, %x: memref<?xf32>, %y: memref<?xf32>, %n: index) kernel {
      %bid = gpu.block_id x
      %bdim = gpu.block_dim x
      %tid = gpu.thread_id x
      %t0 = arith.muli %bid, %bdim : index
      %i = arith.addi %t0, %tid : index
      %in = arith.cmpi ult, %i, %n : index
      scf.if %in {
        %xv = memref.load %x[%i] : memref<?xf32>
        %yv = memref.load %y[%i] : memref<?xf32>
        %ax = arith.mulf %alpha, %xv : f32
        %r = arith.addf %ax, %yv : f32
        memref.store %r, %y[%i] : memref<?xf32>
      }
      gpu.return
    }
  }
  func.func @saxpy(%alpha: f32, %x: memref<?xf32>, %y: memref<?xf32>) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c256 = arith.constant 256 : index
    %n = memref.dim %y, %c0 : memref<?xf32>
    %g = arith.ceildivui %n, %c256 : index
    gpu.launch_func @kernels::@saxpy blocks in (%g, %c1, %c1) threads in (%c256, %c1, %c1)
        args(%alpha : f32, %x : memref<?xf32>, %y : memref<?xf32>, %n : index)
    return
  }
}
