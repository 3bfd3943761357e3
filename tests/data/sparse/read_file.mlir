// Reads the matrix named by $TENSOR0 twice with MLIR's sparsifier (sparse_tensor.new of a file
// name: libwavert's sparse tensor file reader) and prints both: rows compressed (CSR, f64) and
// columns compressed (CSC, f32, so the reader's entries come in another order). No GPU code.
!Filename = !llvm.ptr

#CSR = #sparse_tensor.encoding<{ map = (d0, d1) -> (d0 : dense, d1 : compressed) }>
#CSC = #sparse_tensor.encoding<{ map = (d0, d1) -> (d1 : dense, d0 : compressed) }>

module {
  func.func private @getTensorFilename(index) -> (!Filename)

  func.func @main() {
    %c0 = arith.constant 0 : index
    %file = call @getTensorFilename(%c0) : (index) -> (!Filename)
    %rows = sparse_tensor.new %file : !Filename to tensor<?x?xf64, #CSR>
    sparse_tensor.print %rows : tensor<?x?xf64, #CSR>
    %cols = sparse_tensor.new %file : !Filename to tensor<?x?xf32, #CSC>
    sparse_tensor.print %cols : tensor<?x?xf32, #CSC>
    bufferization.dealloc_tensor %rows : tensor<?x?xf64, #CSR>
    bufferization.dealloc_tensor %cols : tensor<?x?xf32, #CSC>
    return
  }
}
