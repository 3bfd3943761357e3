// a kernel taking an unranked memref; the host casts a ranked memref to it.
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @touch(%a: memref<*xf32>) kernel {
      gpu.return
    }
  }
  func.func @main(%a: memref<?xf32>) {
    %c1 = arith.constant 1 : index
    %u = memref.cast %a : memref<?xf32> to memref<*xf32>
    gpu.launch_func @kernels::@touch blocks in (%c1, %c1, %c1) threads in (%c1, %c1, %c1)
        args(%u : memref<*xf32>)
    return
  }
}
