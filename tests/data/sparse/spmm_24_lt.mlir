// 2:4 structured SpMM on cuSPARSELt through the gpu dialect's sparse ops (as the sparsifier
// emits them for a 2:4 matrix): C = A B + C with A 32x32 f16 keeping columns 4q and 4q+1 of
// each group of four (1.0), B(k, j) = j, C = 0, so C(i, j) = 16 j. Pruned and checked on the
// GPU (PRUNE_AND_CHECK). Prints rows 0 and 31 of C.
module attributes {gpu.container_module} {
  func.func private @mgpuCreateSparseLtEnv()
  func.func private @mgpuDestroySparseLtEnv()

  func.func @main() {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c2 = arith.constant 2 : index
    %c4 = arith.constant 4 : index
    %c31 = arith.constant 31 : index
    %c32 = arith.constant 32 : index
    %f0 = arith.constant 0.0 : f16
    %f1 = arith.constant 1.0 : f16
    %a = memref.alloc() : memref<32x32xf16>
    %b = memref.alloc() : memref<32x32xf16>
    %c = memref.alloc() : memref<32x32xf16>
    scf.for %i = %c0 to %c32 step %c1 {
      scf.for %j = %c0 to %c32 step %c1 {
        %q = arith.remui %j, %c4 : index
        %keep = arith.cmpi ult, %q, %c2 : index
        %av = arith.select %keep, %f1, %f0 : f16
        memref.store %av, %a[%i, %j] : memref<32x32xf16>
        %j32 = arith.index_cast %j : index to i32
        %bv = arith.sitofp %j32 : i32 to f16
        memref.store %bv, %b[%i, %j] : memref<32x32xf16>
        memref.store %f0, %c[%i, %j] : memref<32x32xf16>
      }
    }
    call @mgpuCreateSparseLtEnv() : () -> ()
    %t0 = gpu.wait async
    %da, %t1 = gpu.alloc async [%t0] () : memref<32x32xf16>
    %db, %t2 = gpu.alloc async [%t1] () : memref<32x32xf16>
    %dc, %t3 = gpu.alloc async [%t2] () : memref<32x32xf16>
    %t4 = gpu.memcpy async [%t3] %da, %a : memref<32x32xf16>, memref<32x32xf16>
    %t5 = gpu.memcpy async [%t4] %db, %b : memref<32x32xf16>, memref<32x32xf16>
    %t6 = gpu.memcpy async [%t5] %dc, %c : memref<32x32xf16>, memref<32x32xf16>
    %spa, %t7 = gpu.create_2to4_spmat async [%t6] {PRUNE_AND_CHECK} %c32, %c32, %da
        : memref<32x32xf16>
    %dnb, %t8 = gpu.create_dn_tensor async [%t7] %db, %c32, %c32 : index, index into memref<32x32xf16>
    %dnc, %t9 = gpu.create_dn_tensor async [%t8] %dc, %c32, %c32 : index, index into memref<32x32xf16>
    %s0, %s1, %s2, %t10 = gpu.spmm_buffer_size async [%t9] %spa, %dnb, %dnc
        : index, index, index into f16
    %w0, %t11 = gpu.alloc async [%t10] (%s0) : memref<?xi8>
    %w1, %t12 = gpu.alloc async [%t11] (%s1) : memref<?xi8>
    %w2, %t13 = gpu.alloc async [%t12] (%s2) : memref<?xi8>
    %t14 = gpu.spmm async [%t13] %spa, %dnb, %dnc, %w0, %w1, %w2
        : memref<?xi8>, memref<?xi8>, memref<?xi8> into f16
    %t15 = gpu.destroy_sp_mat async [%t14] %spa
    %t16 = gpu.destroy_dn_tensor async [%t15] %dnb
    %t17 = gpu.destroy_dn_tensor async [%t16] %dnc
    %t18 = gpu.memcpy async [%t17] %c, %dc : memref<32x32xf16>, memref<32x32xf16>
    %t19 = gpu.dealloc async [%t18] %w0 : memref<?xi8>
    %t20 = gpu.dealloc async [%t19] %w1 : memref<?xi8>
    %t21 = gpu.dealloc async [%t20] %w2 : memref<?xi8>
    %t22 = gpu.dealloc async [%t21] %da : memref<32x32xf16>
    %t23 = gpu.dealloc async [%t22] %db : memref<32x32xf16>
    %t24 = gpu.dealloc async [%t23] %dc : memref<32x32xf16>
    gpu.wait [%t24]
    call @mgpuDestroySparseLtEnv() : () -> ()
    %row0 = vector.transfer_read %c[%c0, %c0], %f0 : memref<32x32xf16>, vector<32xf16>
    vector.print %row0 : vector<32xf16>
    %row31 = vector.transfer_read %c[%c31, %c0], %f0 : memref<32x32xf16>, vector<32xf16>
    vector.print %row31 : vector<32xf16>
    memref.dealloc %a : memref<32x32xf16>
    memref.dealloc %b : memref<32x32xf16>
    memref.dealloc %c : memref<32x32xf16>
    return
  }
}
