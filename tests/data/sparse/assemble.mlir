// sparse_tensor.assemble of a CSR and a COO (positions and an array of structures of
// coordinates) and sparse_tensor.disassemble of the CSR: with enable-runtime-library=true,
// assemble is newSparseTensor action 2 (kPack) of libwavert's storage
// (tests/libwavert/test_sparse_assemble.py). The assembled tensors are not deallocated: without the
// runtime library they alias the constants' buffers.
#CSR = #sparse_tensor.encoding<{ map = (i, j) -> (i : dense, j : compressed) }>
#COO = #sparse_tensor.encoding<{ map = (i, j) -> (i : compressed(nonunique), j : singleton) }>
func.func private @printMemrefF64(memref<*xf64>)
func.func @main() {
  %c0 = arith.constant 0 : index
  %f0 = arith.constant 0.0 : f64
  %values = arith.constant dense<[1.5, 2.0, 3.25]> : tensor<3xf64>
  %pos = arith.constant dense<[0, 2, 2, 3]> : tensor<4xindex>
  %crd = arith.constant dense<[1, 3, 0]> : tensor<3xindex>
  %s = sparse_tensor.assemble (%pos, %crd), %values : (tensor<4xindex>, tensor<3xindex>), tensor<3xf64> to tensor<3x4xf64, #CSR>
  %d = sparse_tensor.convert %s : tensor<3x4xf64, #CSR> to tensor<3x4xf64>
  %m = bufferization.to_buffer %d : tensor<3x4xf64> to memref<3x4xf64>
  %u = memref.cast %m : memref<3x4xf64> to memref<*xf64>
  call @printMemrefF64(%u) : (memref<*xf64>) -> ()

  %cpos = arith.constant dense<[0, 3]> : tensor<2xindex>
  %caos = arith.constant dense<[[0, 2], [1, 1], [2, 3]]> : tensor<3x2xindex>
  %cval = arith.constant dense<[4.0, 5.0, 6.0]> : tensor<3xf64>
  %coo = sparse_tensor.assemble (%cpos, %caos), %cval : (tensor<2xindex>, tensor<3x2xindex>), tensor<3xf64> to tensor<3x4xf64, #COO>
  %cd = sparse_tensor.convert %coo : tensor<3x4xf64, #COO> to tensor<3x4xf64>
  %cm = bufferization.to_buffer %cd : tensor<3x4xf64> to memref<3x4xf64>
  %cu = memref.cast %cm : memref<3x4xf64> to memref<*xf64>
  call @printMemrefF64(%cu) : (memref<*xf64>) -> ()

  %op = tensor.empty() : tensor<4xindex>
  %oc = tensor.empty() : tensor<3xindex>
  %ov = tensor.empty() : tensor<3xf64>
  %rp, %rc, %rv, %pl, %cl, %vl = sparse_tensor.disassemble %s : tensor<3x4xf64, #CSR>
      out_lvls(%op, %oc : tensor<4xindex>, tensor<3xindex>) out_vals(%ov : tensor<3xf64>)
      -> (tensor<4xindex>, tensor<3xindex>), tensor<3xf64>, (index, index), index
  %mv = bufferization.to_buffer %rv : tensor<3xf64> to memref<3xf64>
  %uv = memref.cast %mv : memref<3xf64> to memref<*xf64>
  call @printMemrefF64(%uv) : (memref<*xf64>) -> ()
  vector.print %vl : index
  vector.print %pl : index
  vector.print %cl : index
  %p2 = vector.transfer_read %rp[%c0], %c0 : tensor<4xindex>, vector<4xindex>
  vector.print %p2 : vector<4xindex>
  %c2 = vector.transfer_read %rc[%c0], %c0 : tensor<3xindex>, vector<3xindex>
  vector.print %c2 : vector<3xindex>
  return
}
