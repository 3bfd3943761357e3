// Kernels only: a valid module with no host function to call.
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @noop(%a: memref<?xf32>) kernel {
      gpu.return
    }
  }
}
