// A host function returning a value (not supported: results go through memref arguments).
module attributes {gpu.container_module} {
  func.func @main(%a: memref<?xf32>) -> index {
    %c0 = arith.constant 0 : index
    %n = memref.dim %a, %c0 : memref<?xf32>
    return %n : index
  }
}
