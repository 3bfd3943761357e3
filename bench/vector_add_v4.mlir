// c = a + b, four float32 per thread with 16-byte vector loads/stores (ld.global.v4) and a
// scalar tail; 256 threads per block. The vector accesses assume 16-byte aligned tensors.
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @add(%a: memref<?xf32>, %b: memref<?xf32>, %c: memref<?xf32>, %n: index) kernel {
      %c4 = arith.constant 4 : index
      %bid = gpu.block_id x
      %bdim = gpu.block_dim x
      %tid = gpu.thread_id x
      %t0 = arith.muli %bid, %bdim : index
      %t = arith.addi %t0, %tid : index
      %i = arith.muli %t, %c4 : index
      %end = arith.addi %i, %c4 : index
      %full = arith.cmpi ule, %end, %n : index
      scf.if %full {
        %x = vector.load %a[%i] {alignment = 16} : memref<?xf32>, vector<4xf32>
        %y = vector.load %b[%i] {alignment = 16} : memref<?xf32>, vector<4xf32>
        %z = arith.addf %x, %y : vector<4xf32>
        vector.store %z, %c[%i] {alignment = 16} : memref<?xf32>, vector<4xf32>
      } else {
        %hi = arith.minui %end, %n : index
        %c1 = arith.constant 1 : index
        scf.for %j = %i to %hi step %c1 {
          %x = memref.load %a[%j] : memref<?xf32>
          %y = memref.load %b[%j] : memref<?xf32>
          %z = arith.addf %x, %y : f32
          memref.store %z, %c[%j] : memref<?xf32>
        }
      }
      gpu.return
    }
  }
  func.func @main(%a: memref<?xf32>, %b: memref<?xf32>, %c: memref<?xf32>) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c1024 = arith.constant 1024 : index
    %c256 = arith.constant 256 : index
    %n = memref.dim %c, %c0 : memref<?xf32>
    %g = arith.ceildivui %n, %c1024 : index
    gpu.launch_func @kernels::@add blocks in (%g, %c1, %c1) threads in (%c256, %c1, %c1)
        args(%a : memref<?xf32>, %b : memref<?xf32>, %c : memref<?xf32>, %n : index)
    return
  }
}
