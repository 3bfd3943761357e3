// 16 B static workgroup memory plus n floats of dynamic shared memory; one block of 1024
// threads reverses all n elements of a. The host asks for n * 4 bytes of dynamic memory.
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @reverse_all(%a: memref<?xf32>, %n: index)
        workgroup(%tag : memref<4xf32, #gpu.address_space<workgroup>>) kernel {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %one = arith.constant 1.0 : f32
      %tid = gpu.thread_id x
      %bdim = gpu.block_dim x
      %raw = gpu.dynamic_shared_memory : memref<?xi8, #gpu.address_space<workgroup>>
      %buf = memref.view %raw[%c0][%n]
          : memref<?xi8, #gpu.address_space<workgroup>> to memref<?xf32, #gpu.address_space<workgroup>>
      %first = arith.cmpi eq, %tid, %c0 : index
      scf.if %first {
        memref.store %one, %tag[%c0] : memref<4xf32, #gpu.address_space<workgroup>>
      }
      %last = arith.subi %n, %c1 : index
      scf.for %i = %tid to %n step %bdim {
        %v = memref.load %a[%i] : memref<?xf32>
        %j = arith.subi %last, %i : index
        memref.store %v, %buf[%j] : memref<?xf32, #gpu.address_space<workgroup>>
      }
      gpu.barrier
      %t = memref.load %tag[%c0] : memref<4xf32, #gpu.address_space<workgroup>>
      scf.for %i = %tid to %n step %bdim {
        %v = memref.load %buf[%i] : memref<?xf32, #gpu.address_space<workgroup>>
        %w = arith.mulf %v, %t : f32
        memref.store %w, %a[%i] : memref<?xf32>
      }
      gpu.return
    }
  }
  func.func @main(%a: memref<?xf32>) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c4 = arith.constant 4 : index
    %c1024 = arith.constant 1024 : index
    %n = memref.dim %a, %c0 : memref<?xf32>
    %bytes = arith.muli %n, %c4 : index
    %smem = arith.index_cast %bytes : index to i32
    gpu.launch_func @kernels::@reverse_all blocks in (%c1, %c1, %c1) threads in (%c1024, %c1, %c1)
        dynamic_shared_memory_size %smem args(%a : memref<?xf32>, %n : index)
    return
  }
}
