// out = [dim(a, 0), dim(a, 1)] written by one thread; a is never read (may be empty).
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @dims(%a: memref<?x?xf32>, %out: memref<2xi64>) kernel {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %d0 = memref.dim %a, %c0 : memref<?x?xf32>
      %d1 = memref.dim %a, %c1 : memref<?x?xf32>
      %w0 = arith.index_cast %d0 : index to i64
      %w1 = arith.index_cast %d1 : index to i64
      memref.store %w0, %out[%c0] : memref<2xi64>
      memref.store %w1, %out[%c1] : memref<2xi64>
      gpu.return
    }
  }
  func.func @main(%a: memref<?x?xf32>, %out: memref<2xi64>) {
    %c1 = arith.constant 1 : index
    gpu.launch_func @kernels::@dims blocks in (%c1, %c1, %c1) threads in (%c1, %c1, %c1)
        args(%a : memref<?x?xf32>, %out : memref<2xi64>)
    return
  }
}
