// @widen_bf16 widens memref<?xbf16> to f32 with arith.extf; @widen_f16 the same for f16.
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @widen_bf16(%in: memref<?xbf16>, %out: memref<?xf32>, %n: index) kernel {
      %i = gpu.thread_id x
      %ok = arith.cmpi ult, %i, %n : index
      scf.if %ok {
        %v = memref.load %in[%i] : memref<?xbf16>
        %w = arith.extf %v : bf16 to f32
        memref.store %w, %out[%i] : memref<?xf32>
      }
      gpu.return
    }
    gpu.func @widen_f16(%in: memref<?xf16>, %out: memref<?xf32>, %n: index) kernel {
      %i = gpu.thread_id x
      %ok = arith.cmpi ult, %i, %n : index
      scf.if %ok {
        %v = memref.load %in[%i] : memref<?xf16>
        %w = arith.extf %v : f16 to f32
        memref.store %w, %out[%i] : memref<?xf32>
      }
      gpu.return
    }
  }
  // n <= 1024 (one block).
  func.func @widen_bf16(%in: memref<?xbf16>, %out: memref<?xf32>) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %n = memref.dim %in, %c0 : memref<?xbf16>
    gpu.launch_func @kernels::@widen_bf16 blocks in (%c1, %c1, %c1) threads in (%n, %c1, %c1)
        args(%in : memref<?xbf16>, %out : memref<?xf32>, %n : index)
    return
  }
  func.func @widen_f16(%in: memref<?xf16>, %out: memref<?xf32>) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %n = memref.dim %in, %c0 : memref<?xf16>
    gpu.launch_func @kernels::@widen_f16 blocks in (%c1, %c1, %c1) threads in (%n, %c1, %c1)
        args(%in : memref<?xf16>, %out : memref<?xf32>, %n : index)
    return
  }
}
