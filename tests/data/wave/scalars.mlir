// Wave's host-wrapper convention (its lit test test_scalars): an f32 and an i32 read from
// Python numbers with wave_get_float64 / wave_get_int64, then truncated; the kernel writes
// f16(b) + f16(c) into all 16x16 elements of d.
module attributes {gpu.container_module} {
  gpu.module @gpu_module {
    gpu.func @scalars(%arg0: memref<f16> {llvm.inreg}, %b: f32, %c: i32)
        kernel attributes {known_block_size = array<i32: 64, 1, 1>} {
      %c0 = arith.constant 0 : index
      %c4 = arith.constant 4 : index
      %c1 = arith.constant 1 : index
      %tid = gpu.thread_id x
      %d = memref.reinterpret_cast %arg0 to offset: [0], sizes: [256], strides: [1]
          : memref<f16> to memref<256xf16, strided<[1]>>
      %bh = arith.truncf %b : f32 to f16
      %ch = arith.sitofp %c : i32 to f16
      %sum = arith.addf %bh, %ch : f16
      %first = arith.muli %tid, %c4 : index
      scf.for %k = %c0 to %c4 step %c1 {
        %i = arith.addi %first, %k : index
        memref.store %sum, %d[%i] : memref<256xf16, strided<[1]>>
      }
      gpu.return
    }
  }
  func.func private @wave_get_buffer(!llvm.ptr) -> memref<?xi8> attributes {llvm.emit_c_interface}
  func.func private @wave_get_int64(!llvm.ptr) -> i64 attributes {llvm.emit_c_interface}
  func.func private @wave_get_float64(!llvm.ptr) -> f64 attributes {llvm.emit_c_interface}
  func.func @isolated_benchmark(%arg0: !llvm.ptr, %arg1: !llvm.ptr, %arg2: !llvm.ptr,
                                %arg3: !llvm.ptr) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %0 = call @wave_get_buffer(%arg3) : (!llvm.ptr) -> memref<?xi8>
    %view = memref.view %0[%c0][] : memref<?xi8> to memref<f16>
    %1 = call @wave_get_float64(%arg1) : (!llvm.ptr) -> f64
    %2 = arith.truncf %1 : f64 to f32
    %3 = call @wave_get_int64(%arg2) : (!llvm.ptr) -> i64
    %4 = arith.trunci %3 : i64 to i32
    gpu.launch_func @gpu_module::@scalars blocks in (%c1, %c1, %c1)
        threads in (%c64, %c1, %c1) args(%view : memref<f16>, %2 : f32, %4 : i32)
    return
  }
}
