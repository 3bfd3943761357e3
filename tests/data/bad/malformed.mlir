module attributes {gpu.container_module} {
  func.func @main(%a: memref<?xf32>) {
    %c0 = arith.constant 0 : index
    %n = memref.dim %a, %c0 : memref<?xf32>
    %bad = arith.addi %n, %missing : index
    return
  }
}
