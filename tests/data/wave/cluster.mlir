// Wave's host-wrapper convention (its lit test test_cluster_dims): the copy of
// dynamic_dims.mlir launched in 2x2x1 thread-block clusters (sm_90 or newer). Wave's lit test
// launches a 1x1x1 grid in 2x2 clusters, which CUDA refuses (a grid extent must be a multiple
// of the cluster's); here the grid comes from the sizes, so a 32x32 tensor gives 2x2x1 blocks.
#tiles = affine_map<()[s0] -> (s0 ceildiv 16)>
module attributes {gpu.container_module} {
  gpu.module @gpu_module {
    gpu.func @read_write(%arg0: memref<f16> {llvm.inreg}, %arg1: memref<f16> {llvm.inreg},
                         %m: index, %n: index)
        kernel attributes {known_block_size = array<i32: 64, 1, 1>} {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %c4 = arith.constant 4 : index
      %c16 = arith.constant 16 : index
      %c64 = arith.constant 64 : index
      %tid = gpu.thread_id x
      %bx = gpu.block_id x
      %by = gpu.block_id y
      %a = memref.reinterpret_cast %arg0 to offset: [0], sizes: [%m, %n], strides: [%n, 1]
          : memref<f16> to memref<?x?xf16, strided<[?, 1]>>
      %b = memref.reinterpret_cast %arg1 to offset: [0], sizes: [%m, %n], strides: [%n, 1]
          : memref<f16> to memref<?x?xf16, strided<[?, 1]>>
      %row0 = arith.muli %bx, %c16 : index
      %col0 = arith.muli %by, %c16 : index
      scf.for %k = %c0 to %c4 step %c1 {
        %s = arith.muli %k, %c64 : index
        %idx = arith.addi %tid, %s : index
        %r = arith.divui %idx, %c16 : index
        %q = arith.remui %idx, %c16 : index
        %i = arith.addi %row0, %r : index
        %j = arith.addi %col0, %q : index
        %in_i = arith.cmpi ult, %i, %m : index
        %in_j = arith.cmpi ult, %j, %n : index
        %in = arith.andi %in_i, %in_j : i1
        scf.if %in {
          %v = memref.load %a[%i, %j] : memref<?x?xf16, strided<[?, 1]>>
          memref.store %v, %b[%i, %j] : memref<?x?xf16, strided<[?, 1]>>
        }
      }
      gpu.return
    }
  }
  func.func private @wave_get_buffer(!llvm.ptr) -> memref<?xi8> attributes {llvm.emit_c_interface}
  func.func private @wave_get_dim(!llvm.ptr, i32) -> i64 attributes {llvm.emit_c_interface}
  func.func @isolated_benchmark(%arg0: !llvm.ptr, %arg1: !llvm.ptr, %arg2: !llvm.ptr) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %c0_i32 = arith.constant 0 : i32
    %c1_i32 = arith.constant 1 : i32
    %0 = call @wave_get_dim(%arg1, %c0_i32) : (!llvm.ptr, i32) -> i64
    %1 = arith.index_cast %0 : i64 to index
    %2 = call @wave_get_dim(%arg1, %c1_i32) : (!llvm.ptr, i32) -> i64
    %3 = arith.index_cast %2 : i64 to index
    %4 = affine.apply #tiles()[%1]
    %5 = affine.apply #tiles()[%3]
    %6 = call @wave_get_buffer(%arg1) : (!llvm.ptr) -> memref<?xi8>
    %view = memref.view %6[%c0][] : memref<?xi8> to memref<f16>
    %7 = call @wave_get_buffer(%arg2) : (!llvm.ptr) -> memref<?xi8>
    %view_0 = memref.view %7[%c0][] : memref<?xi8> to memref<f16>
    %c2 = arith.constant 2 : index
    gpu.launch_func @gpu_module::@read_write clusters in (%c2, %c2, %c1)
        blocks in (%4, %5, %c1)
        threads in (%c64, %c1, %c1)
        args(%view : memref<f16>, %view_0 : memref<f16>, %1 : index, %3 : index)
    return
  }
}
