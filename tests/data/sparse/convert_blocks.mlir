// A sparse 8 x 8 constant converted to CSR and to BSR (2 x 2 blocks) and printed. With MLIR's
// sparse runtime library (enable-runtime-library=true) the conversions are
// newSparseTensor + lexInsertF32 + endLexInsert of libwavert's sparse tensor storage. No GPU
// code.
#CSR = #sparse_tensor.encoding<{ map = (d0, d1) -> (d0 : dense, d1 : compressed) }>
#BSR = #sparse_tensor.encoding<{
  map = (i, j) -> (i floordiv 2 : dense, j floordiv 2 : compressed,
                   i mod 2 : dense, j mod 2 : dense)
}>

module {
  func.func @main() {
    %t = arith.constant sparse<[[0, 0], [0, 1], [1, 0], [3, 4], [7, 7], [6, 2]],
                               [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]> : tensor<8x8xf32>
    %rows = sparse_tensor.convert %t : tensor<8x8xf32> to tensor<?x?xf32, #CSR>
    sparse_tensor.print %rows : tensor<?x?xf32, #CSR>
    %blocks = sparse_tensor.convert %t : tensor<8x8xf32> to tensor<?x?xf32, #BSR>
    sparse_tensor.print %blocks : tensor<?x?xf32, #BSR>
    bufferization.dealloc_tensor %rows : tensor<?x?xf32, #CSR>
    bufferization.dealloc_tensor %blocks : tensor<?x?xf32, #BSR>
    return
  }
}
