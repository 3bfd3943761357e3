// Async host code reading its inputs: x += 1 and y += 2 on two independent `gpu.wait async`
// tokens, joined by `gpu.wait async [%l1, %l2]`, then x += y and a blocking `gpu.wait`. Run
// after x.fill_(1); y.fill_(3) on the caller's stream, x ends as 7 and y as 5 only when the
// created streams are ordered after the caller's stream at entry.
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @add_scalar(%a: memref<?xf32>, %v: f32, %n: index) kernel {
      %bid = gpu.block_id x
      %bdim = gpu.block_dim x
      %tid = gpu.thread_id x
      %t0 = arith.muli %bid, %bdim : index
      %i = arith.addi %t0, %tid : index
      %in = arith.cmpi ult, %i, %n : index
      scf.if %in {
        %x = memref.load %a[%i] : memref<?xf32>
        %y = arith.addf %x, %v : f32
        memref.store %y, %a[%i] : memref<?xf32>
      }
      gpu.return
    }
    gpu.func @add_into(%a: memref<?xf32>, %b: memref<?xf32>, %n: index) kernel {
      %bid = gpu.block_id x
      %bdim = gpu.block_dim x
      %tid = gpu.thread_id x
      %t0 = arith.muli %bid, %bdim : index
      %i = arith.addi %t0, %tid : index
      %in = arith.cmpi ult, %i, %n : index
      scf.if %in {
        %x = memref.load %a[%i] : memref<?xf32>
        %y = memref.load %b[%i] : memref<?xf32>
        %z = arith.addf %x, %y : f32
        memref.store %z, %a[%i] : memref<?xf32>
      }
      gpu.return
    }
  }
  func.func @main(%x: memref<?xf32>, %y: memref<?xf32>) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c256 = arith.constant 256 : index
    %one = arith.constant 1.0 : f32
    %two = arith.constant 2.0 : f32
    %n = memref.dim %x, %c0 : memref<?xf32>
    %g = arith.ceildivui %n, %c256 : index
    %t1 = gpu.wait async
    %t2 = gpu.wait async
    %l1 = gpu.launch_func async [%t1] @kernels::@add_scalar blocks in (%g, %c1, %c1)
        threads in (%c256, %c1, %c1) args(%x : memref<?xf32>, %one : f32, %n : index)
    %l2 = gpu.launch_func async [%t2] @kernels::@add_scalar blocks in (%g, %c1, %c1)
        threads in (%c256, %c1, %c1) args(%y : memref<?xf32>, %two : f32, %n : index)
    %j = gpu.wait async [%l1, %l2]
    %l3 = gpu.launch_func async [%j] @kernels::@add_into blocks in (%g, %c1, %c1)
        threads in (%c256, %c1, %c1) args(%x : memref<?xf32>, %y : memref<?xf32>, %n : index)
    gpu.wait [%l3]
    return
  }
}
