// i32, i64, index, f16 and bf16 host scalars written back by one thread:
// ints = [p, q, r] (widened to i64), floats = [h, g] (widened to f32). Static shapes.
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @store(%ints: memref<3xi64>, %floats: memref<2xf32>, %p: i32, %q: i64, %r: index,
                    %h: f16, %g: bf16) kernel {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %c2 = arith.constant 2 : index
      %pw = arith.extsi %p : i32 to i64
      %rw = arith.index_cast %r : index to i64
      memref.store %pw, %ints[%c0] : memref<3xi64>
      memref.store %q, %ints[%c1] : memref<3xi64>
      memref.store %rw, %ints[%c2] : memref<3xi64>
      %hw = arith.extf %h : f16 to f32
      %gw = arith.extf %g : bf16 to f32
      memref.store %hw, %floats[%c0] : memref<2xf32>
      memref.store %gw, %floats[%c1] : memref<2xf32>
      gpu.return
    }
  }
  func.func @main(%ints: memref<3xi64>, %floats: memref<2xf32>, %p: i32, %q: i64, %r: index,
                  %h: f16, %g: bf16) {
    %c1 = arith.constant 1 : index
    gpu.launch_func @kernels::@store blocks in (%c1, %c1, %c1) threads in (%c1, %c1, %c1)
        args(%ints : memref<3xi64>, %floats : memref<2xf32>, %p : i32, %q : i64, %r : index,
             %h : f16, %g : bf16)
    return
  }
}
