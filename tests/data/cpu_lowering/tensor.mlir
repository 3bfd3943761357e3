// Tensors: linalg on tensors and tensor ops, which need bufferization first.
func.func @main() {
  %a = arith.constant dense<[[1.0, 2.0], [3.0, 4.0]]> : tensor<2x2xf32>
  %b = arith.constant dense<[[0.5, -1.0], [2.0, 0.25]]> : tensor<2x2xf32>
  %e = tensor.empty() : tensor<2x2xf32>
  %z = arith.constant 0.0 : f32
  %init = linalg.fill ins(%z : f32) outs(%e : tensor<2x2xf32>) -> tensor<2x2xf32>
  %mm = linalg.matmul ins(%a, %b : tensor<2x2xf32>, tensor<2x2xf32>)
                      outs(%init : tensor<2x2xf32>) -> tensor<2x2xf32>
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %v = arith.constant 9.0 : f32
  %ins = tensor.insert %v into %mm[%c1, %c0] : tensor<2x2xf32>
  %x00 = tensor.extract %ins[%c0, %c0] : tensor<2x2xf32>
  %x01 = tensor.extract %ins[%c0, %c1] : tensor<2x2xf32>
  %x10 = tensor.extract %ins[%c1, %c0] : tensor<2x2xf32>
  %x11 = tensor.extract %ins[%c1, %c1] : tensor<2x2xf32>
  vector.print %x00 : f32
  vector.print %x01 : f32
  vector.print %x10 : f32
  vector.print %x11 : f32
  %orig = tensor.extract %mm[%c1, %c0] : tensor<2x2xf32>
  vector.print %orig : f32
  return
}
