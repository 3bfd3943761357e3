// Three kernels launched in order from one host function: b = 2a; c = a + b; c = c * c.
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @double(%a: memref<?xf32>, %b: memref<?xf32>, %n: index) kernel {
      %bid = gpu.block_id x
      %bdim = gpu.block_dim x
      %tid = gpu.thread_id x
      %t0 = arith.muli %bid, %bdim : index
      %i = arith.addi %t0, %tid : index
      %in = arith.cmpi ult, %i, %n : index
      scf.if %in {
        %x = memref.load %a[%i] : memref<?xf32>
        %y = arith.addf %x, %x : f32
        memref.store %y, %b[%i] : memref<?xf32>
      }
      gpu.return
    }
    gpu.func @add(%a: memref<?xf32>, %b: memref<?xf32>, %c: memref<?xf32>, %n: index) kernel {
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
        memref.store %z, %c[%i] : memref<?xf32>
      }
      gpu.return
    }
    gpu.func @square(%c: memref<?xf32>, %n: index) kernel {
      %bid = gpu.block_id x
      %bdim = gpu.block_dim x
      %tid = gpu.thread_id x
      %t0 = arith.muli %bid, %bdim : index
      %i = arith.addi %t0, %tid : index
      %in = arith.cmpi ult, %i, %n : index
      scf.if %in {
        %x = memref.load %c[%i] : memref<?xf32>
        %y = arith.mulf %x, %x : f32
        memref.store %y, %c[%i] : memref<?xf32>
      }
      gpu.return
    }
  }
  func.func @main(%a: memref<?xf32>, %b: memref<?xf32>, %c: memref<?xf32>) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c128 = arith.constant 128 : index
    %n = memref.dim %a, %c0 : memref<?xf32>
    %g = arith.ceildivui %n, %c128 : index
    gpu.launch_func @kernels::@double blocks in (%g, %c1, %c1) threads in (%c128, %c1, %c1)
        args(%a : memref<?xf32>, %b : memref<?xf32>, %n : index)
    gpu.launch_func @kernels::@add blocks in (%g, %c1, %c1) threads in (%c128, %c1, %c1)
        args(%a : memref<?xf32>, %b : memref<?xf32>, %c : memref<?xf32>, %n : index)
    gpu.launch_func @kernels::@square blocks in (%g, %c1, %c1) threads in (%c128, %c1, %c1)
        args(%c : memref<?xf32>, %n : index)
    return
  }
}
