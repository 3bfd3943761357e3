// a = 2 and b = 3 filled by async launches on separate tokens, then c = a + b launched
// depending on both tokens, then gpu.wait. Either exact or a CompileError naming the op and
// "async dependencies".
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @fill(%a: memref<?xf32>, %v: f32, %n: index) kernel {
      %bid = gpu.block_id x
      %bdim = gpu.block_dim x
      %tid = gpu.thread_id x
      %t0 = arith.muli %bid, %bdim : index
      %i = arith.addi %t0, %tid : index
      %in = arith.cmpi ult, %i, %n : index
      scf.if %in {
        memref.store %v, %a[%i] : memref<?xf32>
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
  }
  func.func @main(%a: memref<?xf32>, %b: memref<?xf32>, %c: memref<?xf32>) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c256 = arith.constant 256 : index
    %two = arith.constant 2.0 : f32
    %three = arith.constant 3.0 : f32
    %n = memref.dim %c, %c0 : memref<?xf32>
    %g = arith.ceildivui %n, %c256 : index
    %t1 = gpu.wait async
    %t2 = gpu.wait async
    %l1 = gpu.launch_func async [%t1] @kernels::@fill blocks in (%g, %c1, %c1)
        threads in (%c256, %c1, %c1) args(%a : memref<?xf32>, %two : f32, %n : index)
    %l2 = gpu.launch_func async [%t2] @kernels::@fill blocks in (%g, %c1, %c1)
        threads in (%c256, %c1, %c1) args(%b : memref<?xf32>, %three : f32, %n : index)
    %l3 = gpu.launch_func async [%l1, %l2] @kernels::@add blocks in (%g, %c1, %c1)
        threads in (%c256, %c1, %c1)
        args(%a : memref<?xf32>, %b : memref<?xf32>, %c : memref<?xf32>, %n : index)
    gpu.wait [%l3]
    return
  }
}
