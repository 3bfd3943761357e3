// gpu.printf "begin\n" directly followed by other ops, then a printf of an f32 and an index.
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @say(%x: f32, %n: index) kernel {
      gpu.printf "begin\n"
      %y = arith.addf %x, %x : f32
      %half = arith.constant 0.5 : f32
      %z = arith.mulf %y, %half : f32
      gpu.printf "x=%f n=%lld\n", %z, %n : f32, index
      gpu.return
    }
  }
  func.func @main(%x: f32, %n: index) {
    %c1 = arith.constant 1 : index
    gpu.launch_func @kernels::@say blocks in (%c1, %c1, %c1) threads in (%c1, %c1, %c1)
        args(%x : f32, %n : index)
    return
  }
}
