// A 128x128x64 f16 -> f32 matrix product on Hopper's tensor cores, one warpgroup: the host
// function takes A (128x64, row-major), B (64x128, row-major) and D (128x128) on the GPU and
// makes two tensor-map descriptors (128-byte swizzle); one block of 128 threads loads A as
// one 128x64 box and B as two 64x64 boxes (columns 0.. and 64..) into dynamic shared memory
// with TMA, waits on an mbarrier, runs nvgpu.warpgroup.mma (wgmma.m64n128k16, 8 of them)
// and stages the accumulator through a zero-element workgroup global (CUDA's
// `extern __shared__`, which pywave places at the dynamic region) before a vectorised copy
// to D: D = A x B.
!descA = !nvgpu.tensormap.descriptor<tensor = memref<128x64xf16, 3>, swizzle = swizzle_128b,
                                     l2promo = none, oob = zero, interleave = none>
!descB = !nvgpu.tensormap.descriptor<tensor = memref<64x64xf16, 3>, swizzle = swizzle_128b,
                                     l2promo = none, oob = zero, interleave = none>
!barrier = !nvgpu.mbarrier.group<memorySpace = #gpu.address_space<workgroup>>
module attributes {gpu.container_module} {
  memref.global "private" @staging : memref<0xf32, 3> {alignment = 16 : i64}

  func.func @gemm(%a: memref<128x64xf16>, %b: memref<64x128xf16>, %d: memref<128x128xf32>) {
    %c1 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %c128 = arith.constant 128 : index
    %smem = arith.constant 65536 : i32
    %ua = memref.cast %a : memref<128x64xf16> to memref<*xf16>
    %ub = memref.cast %b : memref<64x128xf16> to memref<*xf16>
    %da = nvgpu.tma.create.descriptor %ua box[%c128, %c64] : memref<*xf16> -> !descA
    %db = nvgpu.tma.create.descriptor %ub box[%c64, %c64] : memref<*xf16> -> !descB
    gpu.launch blocks(%bx, %by, %bz) in (%gx = %c1, %gy = %c1, %gz = %c1)
               threads(%tx, %ty, %tz) in (%sx = %c128, %sy = %c1, %sz = %c1)
               dynamic_shared_memory_size %smem {
      %c0 = arith.constant 0 : index
      %c4 = arith.constant 4 : index
      %c32 = arith.constant 32 : index
      %bytes = arith.constant 32768 : index
      %b_at = arith.constant 16384 : index
      %b_right_at = arith.constant 24576 : index
      %ticks = arith.constant 10000000 : index
      %phase = arith.constant false
      %region = gpu.dynamic_shared_memory : memref<?xi8, #gpu.address_space<workgroup>>
      %sa = memref.view %region[%c0][] : memref<?xi8, #gpu.address_space<workgroup>>
          to memref<128x64xf16, #gpu.address_space<workgroup>>
      %sb = memref.view %region[%b_at][] : memref<?xi8, #gpu.address_space<workgroup>>
          to memref<64x128xf16, #gpu.address_space<workgroup>>
      %sb_left = memref.view %region[%b_at][] : memref<?xi8, #gpu.address_space<workgroup>>
          to memref<64x64xf16, #gpu.address_space<workgroup>>
      %sb_right = memref.view %region[%b_right_at][] : memref<?xi8, #gpu.address_space<workgroup>>
          to memref<64x64xf16, #gpu.address_space<workgroup>>
      %bar = nvgpu.mbarrier.create -> !barrier
      %first = arith.cmpi eq, %tx, %c0 : index
      nvgpu.mbarrier.init %bar[%c0], %c1 : !barrier
      gpu.barrier
      scf.if %first {
        nvgpu.mbarrier.arrive.expect_tx %bar[%c0], %bytes : !barrier
        nvgpu.tma.async.load %da[%c0, %c0], %bar[%c0] to %sa
            : !descA, !barrier -> memref<128x64xf16, #gpu.address_space<workgroup>>
        nvgpu.tma.async.load %db[%c0, %c0], %bar[%c0] to %sb_left
            : !descB, !barrier -> memref<64x64xf16, #gpu.address_space<workgroup>>
        nvgpu.tma.async.load %db[%c64, %c0], %bar[%c0] to %sb_right
            : !descB, !barrier -> memref<64x64xf16, #gpu.address_space<workgroup>>
      }
      nvgpu.mbarrier.try_wait.parity %bar[%c0], %phase, %ticks : !barrier
      %wa = nvgpu.warpgroup.generate.descriptor %sa, %da
          : memref<128x64xf16, #gpu.address_space<workgroup>>, !descA
          -> !nvgpu.warpgroup.descriptor<tensor = memref<128x64xf16, 3>>
      %wb = nvgpu.warpgroup.generate.descriptor %sb, %db
          : memref<64x128xf16, #gpu.address_space<workgroup>>, !descB
          -> !nvgpu.warpgroup.descriptor<tensor = memref<64x128xf16, 3>>
      %zero = nvgpu.warpgroup.mma.init.accumulator -> <fragmented = vector<128x128xf32>>
      %acc = nvgpu.warpgroup.mma %wa, %wb, %zero {transposeB}
          : <tensor = memref<128x64xf16, 3>>, <tensor = memref<64x128xf16, 3>>,
            <fragmented = vector<128x128xf32>> -> <fragmented = vector<128x128xf32>>
      nvvm.wgmma.wait.group.sync.aligned 0
      %base = memref.get_global @staging : memref<0xf32, 3>
      %out = memref.reinterpret_cast %base to offset: [0], sizes: [128, 128], strides: [128, 1]
          : memref<0xf32, 3> to memref<128x128xf32, 3>
      nvgpu.warpgroup.mma.store %acc, %out : <fragmented = vector<128x128xf32>>
          to memref<128x128xf32, 3>
      gpu.barrier
      %warp = arith.divui %tx, %c32 : index
      %lane = arith.remui %tx, %c32 : index
      %col = arith.muli %lane, %c4 : index
      scf.for %row = %warp to %c128 step %c4 {
        %v = vector.load %out[%row, %col] : memref<128x128xf32, 3>, vector<4xf32>
        vector.store %v, %d[%row, %col] : memref<128x128xf32>, vector<4xf32>
      }
      gpu.terminator
    }
    return
  }
}
