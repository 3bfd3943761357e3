// memref<?xi1> input widened to i32 with arith.extui (@widen_ui: true -> 1) or
// arith.extsi (@widen_si: true -> -1, MLIR semantics).
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @widen_ui(%in: memref<?xi1>, %out: memref<?xi32>, %n: index) kernel {
      %i = gpu.thread_id x
      %ok = arith.cmpi ult, %i, %n : index
      scf.if %ok {
        %v = memref.load %in[%i] : memref<?xi1>
        %w = arith.extui %v : i1 to i32
        memref.store %w, %out[%i] : memref<?xi32>
      }
      gpu.return
    }
    gpu.func @widen_si(%in: memref<?xi1>, %out: memref<?xi32>, %n: index) kernel {
      %i = gpu.thread_id x
      %ok = arith.cmpi ult, %i, %n : index
      scf.if %ok {
        %v = memref.load %in[%i] : memref<?xi1>
        %w = arith.extsi %v : i1 to i32
        memref.store %w, %out[%i] : memref<?xi32>
      }
      gpu.return
    }
  }
  // n <= 1024 (one block).
  func.func @widen_ui(%in: memref<?xi1>, %out: memref<?xi32>) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %n = memref.dim %in, %c0 : memref<?xi1>
    gpu.launch_func @kernels::@widen_ui blocks in (%c1, %c1, %c1) threads in (%n, %c1, %c1)
        args(%in : memref<?xi1>, %out : memref<?xi32>, %n : index)
    return
  }
  func.func @widen_si(%in: memref<?xi1>, %out: memref<?xi32>) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %n = memref.dim %in, %c0 : memref<?xi1>
    gpu.launch_func @kernels::@widen_si blocks in (%c1, %c1, %c1) threads in (%n, %c1, %c1)
        args(%in : memref<?xi1>, %out : memref<?xi32>, %n : index)
    return
  }
}
