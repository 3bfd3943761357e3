// A kernel fault: one thread stores through the integer address %addr (0x10 in the tests), an
// illegal address. The launch succeeds; the fault surfaces at the next synchronisation.
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @poke(%addr: i64) kernel {
      %p = llvm.inttoptr %addr : i64 to !llvm.ptr
      %v = arith.constant 1.0 : f32
      llvm.store volatile %v, %p : f32, !llvm.ptr
      gpu.return
    }
  }
  func.func @main(%addr: i64) {
    %c1 = arith.constant 1 : index
    gpu.launch_func @kernels::@poke blocks in (%c1, %c1, %c1) threads in (%c1, %c1, %c1)
        args(%addr : i64)
    return
  }
}
