// Kernel ops of upstream's NVVM pipeline coverage: gpu.subgroup_reduce (whole warp and
// clustered), gpu.subgroup_size, gpu.lane_id, gpu.all_reduce xor without `uniform`, and
// vector transfer reads and writes (1-D, and 2-D with a transposing permutation map).
module attributes {gpu.container_module} {
  func.func private @printMemrefI32(memref<*xi32>)
  func.func private @printMemrefF32(memref<*xf32>)

  func.func @main() {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c2 = arith.constant 2 : index
    %c32 = arith.constant 32 : index
    %out = memref.alloc() : memref<4x8xi32>
    %uo = memref.cast %out : memref<4x8xi32> to memref<*xi32>
    gpu.host_register %uo : memref<*xi32>
    gpu.launch blocks(%bx, %by, %bz) in (%gx = %c1, %gy = %c1, %gz = %c1)
               threads(%tx, %ty, %tz) in (%sx = %c32, %sy = %c1, %sz = %c1) {
      %lane = gpu.lane_id
      %v = arith.index_cast %lane : index to i32
      %sum = gpu.subgroup_reduce add %v : (i32) -> i32
      %quad = gpu.subgroup_reduce add %v cluster(size = 4) : (i32) -> i32
      %size = gpu.subgroup_size : index
      %size32 = arith.index_cast %size : index to i32
      %one = arith.constant 1 : i32
      %w = arith.addi %v, %one : i32
      %x = gpu.all_reduce xor %w {} : (i32) -> (i32)
      %c4 = arith.constant 4 : index
      %r = arith.remui %lane, %c4 : index
      %first = arith.cmpi eq, %r, %c0 : index
      scf.if %first {
        %col = arith.divui %lane, %c4 : index
        %k1 = arith.constant 1 : index
        %k2 = arith.constant 2 : index
        %k3 = arith.constant 3 : index
        memref.store %sum, %out[%c0, %col] : memref<4x8xi32>
        memref.store %quad, %out[%k1, %col] : memref<4x8xi32>
        memref.store %size32, %out[%k2, %col] : memref<4x8xi32>
        memref.store %x, %out[%k3, %col] : memref<4x8xi32>
      }
      gpu.terminator
    }
    call @printMemrefI32(%uo) : (memref<*xi32>) -> ()

    %in = memref.alloc() : memref<2x2xf32>
    %res = memref.alloc() : memref<2x2xf32>
    %f1 = arith.constant 1.0 : f32
    %f2 = arith.constant 2.0 : f32
    %f3 = arith.constant 3.0 : f32
    %f4 = arith.constant 4.0 : f32
    memref.store %f1, %in[%c0, %c0] : memref<2x2xf32>
    memref.store %f2, %in[%c0, %c1] : memref<2x2xf32>
    memref.store %f3, %in[%c1, %c0] : memref<2x2xf32>
    memref.store %f4, %in[%c1, %c1] : memref<2x2xf32>
    %ui = memref.cast %in : memref<2x2xf32> to memref<*xf32>
    %ur = memref.cast %res : memref<2x2xf32> to memref<*xf32>
    gpu.host_register %ui : memref<*xf32>
    gpu.host_register %ur : memref<*xf32>
    gpu.launch blocks(%bx, %by, %bz) in (%gx = %c1, %gy = %c1, %gz = %c1)
               threads(%tx, %ty, %tz) in (%sx = %c1, %sy = %c1, %sz = %c1) {
      %pad = arith.constant 0.0 : f32
      %a = vector.transfer_read %in[%c0, %c0], %pad {in_bounds = [true, true]}
          : memref<2x2xf32>, vector<2x2xf32>
      %b = arith.addf %a, %a : vector<2x2xf32>
      vector.transfer_write %b, %res[%c0, %c0]
          {in_bounds = [true, true], permutation_map = affine_map<(d0, d1) -> (d1, d0)>}
          : vector<2x2xf32>, memref<2x2xf32>
      %row = vector.transfer_read %in[%c1, %c0], %pad : memref<2x2xf32>, vector<2xf32>
      vector.transfer_write %row, %in[%c0, %c0] : vector<2xf32>, memref<2x2xf32>
      gpu.terminator
    }
    call @printMemrefF32(%ur) : (memref<*xf32>) -> ()
    call @printMemrefF32(%ui) : (memref<*xf32>) -> ()
    return
  }
}
