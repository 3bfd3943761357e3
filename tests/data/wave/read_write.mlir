// Wave's host-wrapper convention (its lit test test_read_write): a 16x16 f16 copy. The host
// function takes the stream and two Python objects; the kernel takes 0-d memrefs {llvm.inreg}
// and reinterprets them. pywave runs this text unchanged.
module attributes {gpu.container_module} {
  gpu.module @gpu_module {
    gpu.func @read_write(%arg0: memref<f16> {llvm.inreg}, %arg1: memref<f16> {llvm.inreg})
        kernel attributes {known_block_size = array<i32: 64, 1, 1>} {
      %c16 = arith.constant 16 : index
      %c0 = arith.constant 0 : index
      %tid = gpu.thread_id x
      %a = memref.reinterpret_cast %arg0 to offset: [0], sizes: [16, 16], strides: [16, 1]
          : memref<f16> to memref<16x16xf16, strided<[16, 1]>>
      %b = memref.reinterpret_cast %arg1 to offset: [0], sizes: [256], strides: [1]
          : memref<f16> to memref<256xf16, strided<[1]>>
      %row = arith.cmpi ult, %tid, %c16 : index
      scf.if %row {
        %v = vector.load %a[%tid, %c0] : memref<16x16xf16, strided<[16, 1]>>, vector<16xf16>
        %i = arith.muli %tid, %c16 : index
        vector.store %v, %b[%i] : memref<256xf16, strided<[1]>>, vector<16xf16>
      }
      gpu.return
    }
  }
  func.func private @wave_get_buffer(!llvm.ptr) -> memref<?xi8> attributes {llvm.emit_c_interface}
  func.func @isolated_benchmark(%arg0: !llvm.ptr, %arg1: !llvm.ptr, %arg2: !llvm.ptr) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %0 = call @wave_get_buffer(%arg1) : (!llvm.ptr) -> memref<?xi8>
    %view = memref.view %0[%c0][] : memref<?xi8> to memref<f16>
    %1 = call @wave_get_buffer(%arg2) : (!llvm.ptr) -> memref<?xi8>
    %view_0 = memref.view %1[%c0][] : memref<?xi8> to memref<f16>
    gpu.launch_func @gpu_module::@read_write blocks in (%c1, %c1, %c1)
        threads in (%c64, %c1, %c1) args(%view : memref<f16>, %view_0 : memref<f16>)
    return
  }
}
