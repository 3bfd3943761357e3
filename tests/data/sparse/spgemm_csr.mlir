// SpGEMM C = A A with A and C in CSR (32-bit positions and indices), handed to cuSPARSE by
// MLIR's sparsifier (enable-gpu-libgen): mgpuSpGEMMCreateDescr, mgpuSpGEMMWorkEstimation and
// mgpuSpGEMMCompute (asked for their buffer sizes, then run), mgpuSpMatGetSize,
// mgpuSetCsrPointers, mgpuSpGEMMCopy. Prints C as a dense matrix, then its entry count.
#CSR = #sparse_tensor.encoding<{
  map = (d0, d1) -> (d0 : dense, d1 : compressed), posWidth = 32, crdWidth = 32
}>

module {
  func.func private @mgpuCreateSparseEnv()
  func.func private @mgpuDestroySparseEnv()

  func.func @square(%a: tensor<4x4xf32, #CSR>) -> tensor<4x4xf32, #CSR> {
    %init = bufferization.alloc_tensor() : tensor<4x4xf32, #CSR>
    %c = linalg.matmul ins(%a, %a : tensor<4x4xf32, #CSR>, tensor<4x4xf32, #CSR>)
                       outs(%init : tensor<4x4xf32, #CSR>) -> tensor<4x4xf32, #CSR>
    return %c : tensor<4x4xf32, #CSR>
  }

  func.func @main() {
    call @mgpuCreateSparseEnv() : () -> ()
    %c0 = arith.constant 0 : index
    %f0 = arith.constant 0.0 : f32
    %dense = arith.constant dense<[[2.0, 0.0, 0.0, 1.0],
                                   [0.0, 3.0, 0.0, 0.0],
                                   [0.0, 4.0, 0.0, 0.0],
                                   [5.0, 0.0, 0.0, 6.0]]> : tensor<4x4xf32>
    %a = sparse_tensor.convert %dense : tensor<4x4xf32> to tensor<4x4xf32, #CSR>
    %c = call @square(%a) : (tensor<4x4xf32, #CSR>) -> tensor<4x4xf32, #CSR>
    %d = sparse_tensor.convert %c : tensor<4x4xf32, #CSR> to tensor<4x4xf32>
    %v = vector.transfer_read %d[%c0, %c0], %f0 : tensor<4x4xf32>, vector<4x4xf32>
    vector.print %v : vector<4x4xf32>
    %nnz = sparse_tensor.number_of_entries %c : tensor<4x4xf32, #CSR>
    vector.print %nnz : index
    bufferization.dealloc_tensor %a : tensor<4x4xf32, #CSR>
    bufferization.dealloc_tensor %c : tensor<4x4xf32, #CSR>
    call @mgpuDestroySparseEnv() : () -> ()
    return
  }
}
