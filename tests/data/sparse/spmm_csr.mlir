// SpMM C = A B + C with A in CSR (32-bit positions and indices), B and C dense, handed to
// cuSPARSE by MLIR's sparsifier (enable-gpu-libgen): mgpuCreateCsr, mgpuCreateDnMat,
// mgpuSpMMBufferSize, mgpuSpMM. Prints ( ( 12, 15 ), ( 1, 1 ), ( 38, 45 ) ).
#CSR = #sparse_tensor.encoding<{
  map = (d0, d1) -> (d0 : dense, d1 : compressed), posWidth = 32, crdWidth = 32
}>

module {
  func.func @matmul(%a: tensor<?x?xf64, #CSR>, %b: tensor<?x?xf64>,
                    %c: tensor<?x?xf64>) -> tensor<?x?xf64> {
    %r = linalg.matmul ins(%a, %b : tensor<?x?xf64, #CSR>, tensor<?x?xf64>)
                       outs(%c : tensor<?x?xf64>) -> tensor<?x?xf64>
    return %r : tensor<?x?xf64>
  }

  func.func @main() {
    %c0 = arith.constant 0 : index
    %f0 = arith.constant 0.0 : f64
    %dense = arith.constant dense<[[1.0, 0.0, 2.0, 0.0],
                                   [0.0, 0.0, 0.0, 0.0],
                                   [0.0, 3.0, 0.0, 4.0]]> : tensor<3x4xf64>
    %csr = sparse_tensor.convert %dense : tensor<3x4xf64> to tensor<3x4xf64, #CSR>
    %a = tensor.cast %csr : tensor<3x4xf64, #CSR> to tensor<?x?xf64, #CSR>
    %b0 = arith.constant dense<[[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]]>
        : tensor<4x2xf64>
    %b = tensor.cast %b0 : tensor<4x2xf64> to tensor<?x?xf64>
    %c1 = arith.constant dense<1.0> : tensor<3x2xf64>
    %c = tensor.cast %c1 : tensor<3x2xf64> to tensor<?x?xf64>
    %r = call @matmul(%a, %b, %c)
        : (tensor<?x?xf64, #CSR>, tensor<?x?xf64>, tensor<?x?xf64>) -> tensor<?x?xf64>
    %v = vector.transfer_read %r[%c0, %c0], %f0 : tensor<?x?xf64>, vector<3x2xf64>
    vector.print %v : vector<3x2xf64>
    bufferization.dealloc_tensor %csr : tensor<3x4xf64, #CSR>
    return
  }
}
