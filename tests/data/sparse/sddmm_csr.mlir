// SDDMM S = spy(S) .* (A B) + S with S in CSR (32-bit positions and indices), A and B dense,
// handed to cuSPARSE by MLIR's sparsifier (enable-gpu-libgen): mgpuCreateDnMat, mgpuCreateCsr,
// mgpuSDDMMBufferSize, mgpuSDDMM. Prints S's stored values: ( 2, 19, 7 ).
#CSR = #sparse_tensor.encoding<{
  map = (d0, d1) -> (d0 : dense, d1 : compressed), posWidth = 32, crdWidth = 32
}>

#sddmm = {
  indexing_maps = [
    affine_map<(i, j, k) -> (i, k)>,  // A
    affine_map<(i, j, k) -> (k, j)>,  // B
    affine_map<(i, j, k) -> (i, j)>   // S (in and out)
  ],
  iterator_types = ["parallel", "parallel", "reduction"]
}

module {
  func.func @sddmm(%s: tensor<?x?xf32, #CSR>, %a: tensor<?x?xf32>,
                   %b: tensor<?x?xf32>) -> tensor<?x?xf32, #CSR> {
    %r = linalg.generic #sddmm
      ins(%a, %b : tensor<?x?xf32>, tensor<?x?xf32>)
      outs(%s : tensor<?x?xf32, #CSR>) {
      ^bb0(%x: f32, %y: f32, %z: f32):
        %zero = arith.constant 0.0 : f32
        %product = sparse_tensor.unary %z : f32 to f32
          present = {
            ^bb0(%p: f32):
              %m = arith.mulf %x, %y : f32
              sparse_tensor.yield %m : f32
          }
          absent = {}
        %sum = sparse_tensor.reduce %z, %product, %zero : f32 {
          ^bb0(%p: f32, %q: f32):
            %t = arith.addf %p, %q : f32
            sparse_tensor.yield %t : f32
        }
        linalg.yield %sum : f32
    } -> tensor<?x?xf32, #CSR>
    return %r : tensor<?x?xf32, #CSR>
  }

  func.func @main() {
    %c0 = arith.constant 0 : index
    %f0 = arith.constant 0.0 : f32
    %pattern = arith.constant dense<[[1.0, 0.0, 0.0],
                                     [0.0, 0.0, 1.0],
                                     [0.0, 1.0, 0.0]]> : tensor<3x3xf32>
    %csr = sparse_tensor.convert %pattern : tensor<3x3xf32> to tensor<3x3xf32, #CSR>
    %s = tensor.cast %csr : tensor<3x3xf32, #CSR> to tensor<?x?xf32, #CSR>
    %a0 = arith.constant dense<[[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]> : tensor<3x2xf32>
    %a = tensor.cast %a0 : tensor<3x2xf32> to tensor<?x?xf32>
    %b0 = arith.constant dense<[[1.0, 0.0, 2.0], [0.0, 1.0, 3.0]]> : tensor<2x3xf32>
    %b = tensor.cast %b0 : tensor<2x3xf32> to tensor<?x?xf32>
    %r = call @sddmm(%s, %a, %b)
        : (tensor<?x?xf32, #CSR>, tensor<?x?xf32>, tensor<?x?xf32>) -> tensor<?x?xf32, #CSR>
    %values = sparse_tensor.values %r : tensor<?x?xf32, #CSR> to memref<?xf32>
    %v = vector.transfer_read %values[%c0], %f0 : memref<?xf32>, vector<3xf32>
    vector.print %v : vector<3xf32>
    bufferization.dealloc_tensor %r : tensor<?x?xf32, #CSR>
    return
  }
}
