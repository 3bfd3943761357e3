// out = a * b + a on 2-D dynamic shapes; 16x16 blocks on a 2-D grid (x: columns, y: rows).
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @fma2d(%a: memref<?x?xf32>, %b: memref<?x?xf32>, %out: memref<?x?xf32>,
                    %rows: index, %cols: index) kernel {
      %bx = gpu.block_id x
      %by = gpu.block_id y
      %dx = gpu.block_dim x
      %dy = gpu.block_dim y
      %tx = gpu.thread_id x
      %ty = gpu.thread_id y
      %r0 = arith.muli %by, %dy : index
      %r = arith.addi %r0, %ty : index
      %q0 = arith.muli %bx, %dx : index
      %q = arith.addi %q0, %tx : index
      %rin = arith.cmpi ult, %r, %rows : index
      %qin = arith.cmpi ult, %q, %cols : index
      %in = arith.andi %rin, %qin : i1
      scf.if %in {
        %x = memref.load %a[%r, %q] : memref<?x?xf32>
        %y = memref.load %b[%r, %q] : memref<?x?xf32>
        %p = arith.mulf %x, %y : f32
        %z = arith.addf %p, %x : f32
        memref.store %z, %out[%r, %q] : memref<?x?xf32>
      }
      gpu.return
    }
  }
  func.func @main(%a: memref<?x?xf32>, %b: memref<?x?xf32>, %out: memref<?x?xf32>) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c16 = arith.constant 16 : index
    %rows = memref.dim %out, %c0 : memref<?x?xf32>
    %cols = memref.dim %out, %c1 : memref<?x?xf32>
    %gx = arith.ceildivui %cols, %c16 : index
    %gy = arith.ceildivui %rows, %c16 : index
    gpu.launch_func @kernels::@fma2d blocks in (%gx, %gy, %c1) threads in (%c16, %c16, %c1)
        args(%a : memref<?x?xf32>, %b : memref<?x?xf32>, %out : memref<?x?xf32>,
             %rows : index, %cols : index)
    return
  }
}
