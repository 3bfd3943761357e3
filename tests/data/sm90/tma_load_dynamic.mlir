// tma_load.mlir with its two tiles in dynamic shared memory (views at byte 0 and 128) behind
// the kernel's static mbarrier: a TMA box must be 128-byte aligned, and the dynamic region
// starts after the static shared memory. TMA on sm_90a: a tiled tensor-map descriptor made on
// the host over a 16x32 f32 device matrix (element [i][j] = 32 i + j), two 4x8 box loads into workgroup memory completed
// through one mbarrier (expect_tx of both boxes' bytes), then the tiles copied to a
// host-registered 8x8 memref and printed. Box 1 starts at row 4, column 8 (inside); box 2 at
// row 14, column 28: its rows 16-17 and columns 32-35 are outside the matrix and read as
// zero (oob = zero). Coordinates are innermost first: [column, row].
!desc = !nvgpu.tensormap.descriptor<tensor = memref<4x8xf32, 3>, swizzle = none,
                                    l2promo = none, oob = zero, interleave = none>
!barrier = !nvgpu.mbarrier.group<memorySpace = #gpu.address_space<workgroup>>
module attributes {gpu.container_module} {
  func.func private @printMemrefF32(memref<*xf32>)

  func.func @main() {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c4 = arith.constant 4 : index
    %c8 = arith.constant 8 : index
    %c14 = arith.constant 14 : index
    %c16 = arith.constant 16 : index
    %c28 = arith.constant 28 : index
    %c32 = arith.constant 32 : index
    %host = memref.alloc() : memref<16x32xf32>
    scf.for %i = %c0 to %c16 step %c1 {
      scf.for %j = %c0 to %c32 step %c1 {
        %row = arith.muli %i, %c32 : index
        %k = arith.addi %row, %j : index
        %ki = arith.index_cast %k : index to i32
        %v = arith.sitofp %ki : i32 to f32
        memref.store %v, %host[%i, %j] : memref<16x32xf32>
      }
    }
    %dev = gpu.alloc () : memref<16x32xf32>
    gpu.memcpy %dev, %host : memref<16x32xf32>, memref<16x32xf32>
    %udev = memref.cast %dev : memref<16x32xf32> to memref<*xf32>
    %desc = nvgpu.tma.create.descriptor %udev box[%c4, %c8] : memref<*xf32> -> !desc

    %out = memref.alloc() : memref<8x8xf32>
    %uout = memref.cast %out : memref<8x8xf32> to memref<*xf32>
    gpu.host_register %uout : memref<*xf32>
    %smem_bytes = arith.constant 256 : i32
    gpu.launch blocks(%bx, %by, %bz) in (%gx = %c1, %gy = %c1, %gz = %c1)
               threads(%tx, %ty, %tz) in (%sx = %c1, %sy = %c1, %sz = %c1)
               dynamic_shared_memory_size %smem_bytes {
      %bytes = arith.constant 256 : index
      %ticks = arith.constant 10000000 : index
      %phase = arith.constant false
      %c128 = arith.constant 128 : index
      %smem = gpu.dynamic_shared_memory : memref<?xi8, #gpu.address_space<workgroup>>
      %a = memref.view %smem[%c0][] : memref<?xi8, #gpu.address_space<workgroup>> to memref<4x8xf32, #gpu.address_space<workgroup>>
      %b = memref.view %smem[%c128][] : memref<?xi8, #gpu.address_space<workgroup>> to memref<4x8xf32, #gpu.address_space<workgroup>>
      %bar = nvgpu.mbarrier.create -> !barrier
      nvgpu.mbarrier.init %bar[%c0], %c1 : !barrier
      nvgpu.mbarrier.arrive.expect_tx %bar[%c0], %bytes : !barrier
      nvgpu.tma.async.load %desc[%c8, %c4], %bar[%c0] to %a
          : !desc, !barrier -> memref<4x8xf32, #gpu.address_space<workgroup>>
      nvgpu.tma.async.load %desc[%c28, %c14], %bar[%c0] to %b
          : !desc, !barrier -> memref<4x8xf32, #gpu.address_space<workgroup>>
      nvgpu.mbarrier.try_wait.parity %bar[%c0], %phase, %ticks : !barrier
      scf.for %i = %c0 to %c4 step %c1 {
        scf.for %j = %c0 to %c8 step %c1 {
          %va = memref.load %a[%i, %j] : memref<4x8xf32, #gpu.address_space<workgroup>>
          memref.store %va, %out[%i, %j] : memref<8x8xf32>
          %vb = memref.load %b[%i, %j] : memref<4x8xf32, #gpu.address_space<workgroup>>
          %i4 = arith.addi %i, %c4 : index
          memref.store %vb, %out[%i4, %j] : memref<8x8xf32>
        }
      }
      gpu.terminator
    }
    call @printMemrefF32(%uout) : (memref<*xf32>) -> ()
    gpu.dealloc %dev : memref<16x32xf32>
    return
  }
}
