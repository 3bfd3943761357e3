// SDDMM S = spy(S) .* (A B) + S with the sampling matrix S read from the file $TENSOR0 names
// (CSR, f32; libwavert's sparse tensor file reader) and dense A (M x 4, A[i][k] = i + k + 1)
// and B (4 x N, B[k][j] = j - k), handed to cuSPARSE by MLIR's sparsifier
// (enable-gpu-libgen). Prints S as sparse_tensor.print does.
!Filename = !llvm.ptr

#CSR = #sparse_tensor.encoding<{ map = (d0, d1) -> (d0 : dense, d1 : compressed) }>

#sddmm = {
  indexing_maps = [
    affine_map<(i, j, k) -> (i, k)>,  // A
    affine_map<(i, j, k) -> (k, j)>,  // B
    affine_map<(i, j, k) -> (i, j)>   // S (in and out)
  ],
  iterator_types = ["parallel", "parallel", "reduction"]
}

module {
  llvm.func @mgpuCreateSparseEnv()
  llvm.func @mgpuDestroySparseEnv()
  func.func private @getTensorFilename(index) -> (!Filename)

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
    llvm.call @mgpuCreateSparseEnv() : () -> ()
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c4 = arith.constant 4 : index
    %file = call @getTensorFilename(%c0) : (index) -> (!Filename)
    %s = sparse_tensor.new %file : !Filename to tensor<?x?xf32, #CSR>
    %m = sparse_tensor.lvl %s, %c0 : tensor<?x?xf32, #CSR>
    %n = sparse_tensor.lvl %s, %c1 : tensor<?x?xf32, #CSR>
    %a = tensor.generate %m, %c4 {
    ^bb0(%i: index, %k: index):
      %ik = arith.addi %i, %k : index
      %ik1 = arith.addi %ik, %c1 : index
      %w = arith.index_cast %ik1 : index to i32
      %v = arith.sitofp %w : i32 to f32
      tensor.yield %v : f32
    } : tensor<?x?xf32>
    %b = tensor.generate %c4, %n {
    ^bb0(%k: index, %j: index):
      %jk = arith.subi %j, %k : index
      %w = arith.index_cast %jk : index to i32
      %v = arith.sitofp %w : i32 to f32
      tensor.yield %v : f32
    } : tensor<?x?xf32>
    %r = call @sddmm(%s, %a, %b)
        : (tensor<?x?xf32, #CSR>, tensor<?x?xf32>, tensor<?x?xf32>) -> tensor<?x?xf32, #CSR>
    sparse_tensor.print %r : tensor<?x?xf32, #CSR>
    bufferization.dealloc_tensor %r : tensor<?x?xf32, #CSR>
    llvm.call @mgpuDestroySparseEnv() : () -> ()
    return
  }
}
