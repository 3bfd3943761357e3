// A gpu.launch region in the host function (outlined by gpu-kernel-outlining): a += s.
module attributes {gpu.container_module} {
  func.func @main(%a: memref<?xf32>, %s: f32) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c256 = arith.constant 256 : index
    %n = memref.dim %a, %c0 : memref<?xf32>
    %g = arith.ceildivui %n, %c256 : index
    gpu.launch blocks(%bx, %by, %bz) in (%gx = %g, %gy = %c1, %gz = %c1)
               threads(%tx, %ty, %tz) in (%sx = %c256, %sy = %c1, %sz = %c1) {
      %t0 = arith.muli %bx, %sx : index
      %i = arith.addi %t0, %tx : index
      %in = arith.cmpi ult, %i, %n : index
      scf.if %in {
        %v = memref.load %a[%i] : memref<?xf32>
        %w = arith.addf %v, %s : f32
        memref.store %w, %a[%i] : memref<?xf32>
      }
      gpu.terminator
    }
    return
  }
}
