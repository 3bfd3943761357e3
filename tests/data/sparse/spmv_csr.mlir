// SpMV y = A x + y with A in CSR (32-bit positions and indices), handed to cuSPARSE by
// MLIR's sparsifier (enable-gpu-libgen): mgpuCreateCsr, mgpuCreateDnVec, mgpuSpMVBufferSize,
// mgpuSpMV. Prints ( 17, 20, 52 ).
#CSR = #sparse_tensor.encoding<{
  map = (d0, d1) -> (d0 : dense, d1 : compressed), posWidth = 32, crdWidth = 32
}>

module {
  func.func private @mgpuCreateSparseEnv()
  func.func private @mgpuDestroySparseEnv()

  func.func @matvec(%a: tensor<?x?xf64, #CSR>, %x: tensor<?xf64>,
                    %y: tensor<?xf64>) -> tensor<?xf64> {
    %r = linalg.matvec ins(%a, %x : tensor<?x?xf64, #CSR>, tensor<?xf64>)
                       outs(%y : tensor<?xf64>) -> tensor<?xf64>
    return %r : tensor<?xf64>
  }

  func.func @main() {
    call @mgpuCreateSparseEnv() : () -> ()
    %c0 = arith.constant 0 : index
    %f0 = arith.constant 0.0 : f64
    %dense = arith.constant dense<[[1.0, 0.0, 2.0, 0.0],
                                   [0.0, 0.0, 0.0, 0.0],
                                   [0.0, 3.0, 0.0, 4.0]]> : tensor<3x4xf64>
    %csr = sparse_tensor.convert %dense : tensor<3x4xf64> to tensor<3x4xf64, #CSR>
    %a = tensor.cast %csr : tensor<3x4xf64, #CSR> to tensor<?x?xf64, #CSR>
    %x0 = arith.constant dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf64>
    %x = tensor.cast %x0 : tensor<4xf64> to tensor<?xf64>
    %y0 = arith.constant dense<[10.0, 20.0, 30.0]> : tensor<3xf64>
    %y = tensor.cast %y0 : tensor<3xf64> to tensor<?xf64>
    %r = call @matvec(%a, %x, %y)
        : (tensor<?x?xf64, #CSR>, tensor<?xf64>, tensor<?xf64>) -> tensor<?xf64>
    %v = vector.transfer_read %r[%c0], %f0 : tensor<?xf64>, vector<3xf64>
    vector.print %v : vector<3xf64>
    bufferization.dealloc_tensor %csr : tensor<3x4xf64, #CSR>
    call @mgpuDestroySparseEnv() : () -> ()
    return
  }
}
