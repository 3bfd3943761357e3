// scale_in_place.mlir whose gpu.module carries an AMD (rocdl) target.
module attributes {gpu.container_module} {
  gpu.module @kernels [#rocdl.target<chip = "gfx942">] {
    gpu.func @scale(%a: memref<?xf32>, %s: f32, %n: index) kernel {
      %bid = gpu.block_id x
      %bdim = gpu.block_dim x
      %tid = gpu.thread_id x
      %t0 = arith.muli %bid, %bdim : index
      %i = arith.addi %t0, %tid : index
      %in = arith.cmpi ult, %i, %n : index
      scf.if %in {
        %v = memref.load %a[%i] : memref<?xf32>
        %w = arith.mulf %v, %s : f32
        memref.store %w, %a[%i] : memref<?xf32>
      }
      gpu.return
    }
  }
  func.func @main(%a: memref<?xf32>, %s: f32) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c256 = arith.constant 256 : index
    %n = memref.dim %a, %c0 : memref<?xf32>
    %g = arith.ceildivui %n, %c256 : index
    gpu.launch_func @kernels::@scale blocks in (%g, %c1, %c1) threads in (%c256, %c1, %c1)
        args(%a : memref<?xf32>, %s : f32, %n : index)
    return
  }
}
