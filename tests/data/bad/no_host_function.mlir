// Kernels only: nothing to call.
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @noop(%a: memref<?xf32>) kernel {
      gpu.return
    }
  }
}
