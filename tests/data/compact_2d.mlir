// out[i, j] = a[i, j] + 10 * i on static 2x3 shapes (one block of 3x2 threads).
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @rows(%a: memref<2x3xf32>, %out: memref<2x3xf32>) kernel {
      %j = gpu.thread_id x
      %i = gpu.thread_id y
      %ten = arith.constant 10.0 : f32
      %ii = arith.index_cast %i : index to i32
      %fi = arith.sitofp %ii : i32 to f32
      %add = arith.mulf %fi, %ten : f32
      %v = memref.load %a[%i, %j] : memref<2x3xf32>
      %w = arith.addf %v, %add : f32
      memref.store %w, %out[%i, %j] : memref<2x3xf32>
      gpu.return
    }
  }
  func.func @main(%a: memref<2x3xf32>, %out: memref<2x3xf32>) {
    %c1 = arith.constant 1 : index
    %c2 = arith.constant 2 : index
    %c3 = arith.constant 3 : index
    gpu.launch_func @kernels::@rows blocks in (%c1, %c1, %c1) threads in (%c3, %c2, %c1)
        args(%a : memref<2x3xf32>, %out : memref<2x3xf32>)
    return
  }
}
