// Reads the matrix named by $TENSOR0 into 2 x 2 blocks (BSR: i floordiv 2 dense, j floordiv 2
// compressed, i mod 2 and j mod 2 dense) and prints it: the reader maps each entry to its
// four level coordinates (dim2lvl's floor and mod encodings). No GPU code.
!Filename = !llvm.ptr

#BSR = #sparse_tensor.encoding<{
  map = (i, j) -> (i floordiv 2 : dense, j floordiv 2 : compressed,
                   i mod 2 : dense, j mod 2 : dense)
}>

module {
  func.func private @getTensorFilename(index) -> (!Filename)

  func.func @main() {
    %c0 = arith.constant 0 : index
    %file = call @getTensorFilename(%c0) : (index) -> (!Filename)
    %blocks = sparse_tensor.new %file : !Filename to tensor<?x?xf64, #BSR>
    sparse_tensor.print %blocks : tensor<?x?xf64, #BSR>
    bufferization.dealloc_tensor %blocks : tensor<?x?xf64, #BSR>
    return
  }
}
