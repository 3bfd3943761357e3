// Copies through fully dynamic strided layouts: views that are transposed, sliced, or (cupy)
// negatively strided are accepted as they are. out is compact.
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @copy2d(%a: memref<?x?xf32, strided<[?, ?], offset: ?>>, %out: memref<?x?xf32>,
                     %rows: index, %cols: index) kernel {
      %r = gpu.block_id x
      %q = gpu.thread_id x
      %rin = arith.cmpi ult, %r, %rows : index
      %qin = arith.cmpi ult, %q, %cols : index
      %in = arith.andi %rin, %qin : i1
      scf.if %in {
        %v = memref.load %a[%r, %q] : memref<?x?xf32, strided<[?, ?], offset: ?>>
        memref.store %v, %out[%r, %q] : memref<?x?xf32>
      }
      gpu.return
    }
    gpu.func @copy1d(%a: memref<?xf32, strided<[?], offset: ?>>, %out: memref<?xf32>,
                     %n: index) kernel {
      %bid = gpu.block_id x
      %bdim = gpu.block_dim x
      %tid = gpu.thread_id x
      %t0 = arith.muli %bid, %bdim : index
      %i = arith.addi %t0, %tid : index
      %in = arith.cmpi ult, %i, %n : index
      scf.if %in {
        %v = memref.load %a[%i] : memref<?xf32, strided<[?], offset: ?>>
        memref.store %v, %out[%i] : memref<?xf32>
      }
      gpu.return
    }
  }
  // rows <= 2^31 - 1 blocks, cols <= 1024 threads.
  func.func @copy2d(%a: memref<?x?xf32, strided<[?, ?], offset: ?>>, %out: memref<?x?xf32>) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %rows = memref.dim %out, %c0 : memref<?x?xf32>
    %cols = memref.dim %out, %c1 : memref<?x?xf32>
    gpu.launch_func @kernels::@copy2d blocks in (%rows, %c1, %c1) threads in (%cols, %c1, %c1)
        args(%a : memref<?x?xf32, strided<[?, ?], offset: ?>>, %out : memref<?x?xf32>,
             %rows : index, %cols : index)
    return
  }
  func.func @copy1d(%a: memref<?xf32, strided<[?], offset: ?>>, %out: memref<?xf32>) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c256 = arith.constant 256 : index
    %n = memref.dim %out, %c0 : memref<?xf32>
    %g = arith.ceildivui %n, %c256 : index
    gpu.launch_func @kernels::@copy1d blocks in (%g, %c1, %c1) threads in (%c256, %c1, %c1)
        args(%a : memref<?xf32, strided<[?], offset: ?>>, %out : memref<?xf32>, %n : index)
    return
  }
  // Identity layout: needs a compact row-major tensor.
  func.func @copy_compact(%a: memref<?x?xf32>, %out: memref<?x?xf32>) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %rows = memref.dim %out, %c0 : memref<?x?xf32>
    %cols = memref.dim %out, %c1 : memref<?x?xf32>
    %v = memref.cast %a : memref<?x?xf32> to memref<?x?xf32, strided<[?, ?], offset: ?>>
    gpu.launch_func @kernels::@copy2d blocks in (%rows, %c1, %c1) threads in (%cols, %c1, %c1)
        args(%v : memref<?x?xf32, strided<[?, ?], offset: ?>>, %out : memref<?x?xf32>,
             %rows : index, %cols : index)
    return
  }
}
