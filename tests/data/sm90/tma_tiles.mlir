// TMA at any index width: a 16x32 f32 matrix (element [i][j] = 32 i + j) copied tile by
// tile, one 4x8 box per block of a 4x4 grid, through a tensor-map descriptor made on the
// host. Block (x, y) loads the box at row 4 y + 2, column 8 x + 4 (coordinates computed in
// the kernel; innermost first: [column, row]) into workgroup memory, waits on an mbarrier
// and writes it to rows 4 y.., columns 8 x.. of a device matrix, which @main returns as a
// host copy: out[i][j] = in[i + 2][j + 4], zero where that lies outside the matrix
// (oob = zero).
!desc = !nvgpu.tensormap.descriptor<tensor = memref<4x8xf32, 3>, swizzle = none,
                                    l2promo = none, oob = zero, interleave = none>
!barrier = !nvgpu.mbarrier.group<memorySpace = #gpu.address_space<workgroup>>
module attributes {gpu.container_module} {
  memref.global "private" @tile : memref<4x8xf32, 3> {alignment = 128 : i64}

  func.func @main() -> memref<16x32xf32> {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c2 = arith.constant 2 : index
    %c4 = arith.constant 4 : index
    %c8 = arith.constant 8 : index
    %c16 = arith.constant 16 : index
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
    %in = gpu.alloc () : memref<16x32xf32>
    %out = gpu.alloc () : memref<16x32xf32>
    gpu.memcpy %in, %host : memref<16x32xf32>, memref<16x32xf32>
    %uin = memref.cast %in : memref<16x32xf32> to memref<*xf32>
    %desc = nvgpu.tma.create.descriptor %uin box[%c4, %c8] : memref<*xf32> -> !desc
    gpu.launch blocks(%bx, %by, %bz) in (%gx = %c4, %gy = %c4, %gz = %c1)
               threads(%tx, %ty, %tz) in (%sx = %c1, %sy = %c1, %sz = %c1) {
      %bytes = arith.constant 128 : index
      %ticks = arith.constant 10000000 : index
      %phase = arith.constant false
      %t = memref.get_global @tile : memref<4x8xf32, 3>
      %bar = nvgpu.mbarrier.create -> !barrier
      nvgpu.mbarrier.init %bar[%c0], %c1 : !barrier
      nvgpu.mbarrier.arrive.expect_tx %bar[%c0], %bytes : !barrier
      %x8 = arith.muli %bx, %c8 : index
      %y4 = arith.muli %by, %c4 : index
      %col = arith.addi %x8, %c4 : index
      %row = arith.addi %y4, %c2 : index
      nvgpu.tma.async.load %desc[%col, %row], %bar[%c0] to %t
          : !desc, !barrier -> memref<4x8xf32, 3>
      nvgpu.mbarrier.try_wait.parity %bar[%c0], %phase, %ticks : !barrier
      scf.for %i = %c0 to %c4 step %c1 {
        scf.for %j = %c0 to %c8 step %c1 {
          %v = memref.load %t[%i, %j] : memref<4x8xf32, 3>
          %oi = arith.addi %y4, %i : index
          %oj = arith.addi %x8, %j : index
          memref.store %v, %out[%oi, %oj] : memref<16x32xf32>
        }
      }
      gpu.terminator
    }
    gpu.memcpy %host, %out : memref<16x32xf32>, memref<16x32xf32>
    gpu.dealloc %in : memref<16x32xf32>
    gpu.dealloc %out : memref<16x32xf32>
    return %host : memref<16x32xf32>
  }
}
