// `pywave run examples/hello.mlir` (mlir-runner for GPU programs): a kernel writes
// 0, 1, 2, 3 into host memory registered with the GPU, then printMemrefF32 prints it.
// `--compile-only --target sm_90` compiles it as a run would, without a GPU.
module attributes {gpu.container_module} {
  func.func private @printMemrefF32(memref<*xf32>)
  func.func @main() {
    %c1 = arith.constant 1 : index
    %c4 = arith.constant 4 : index
    %m = memref.alloc() : memref<4xf32>
    %u = memref.cast %m : memref<4xf32> to memref<*xf32>
    gpu.host_register %u : memref<*xf32>
    gpu.launch blocks(%bx, %by, %bz) in (%gx = %c1, %gy = %c1, %gz = %c1)
               threads(%tx, %ty, %tz) in (%sx = %c4, %sy = %c1, %sz = %c1) {
      %i = arith.index_cast %tx : index to i32
      %f = arith.sitofp %i : i32 to f32
      memref.store %f, %m[%tx] : memref<4xf32>
      gpu.terminator
    }
    call @printMemrefF32(%u) : (memref<*xf32>) -> ()
    return
  }
}
