// Every sparse op of the gpu dialect, for the signatures gpu-to-llvm declares for their mgpu*
// runtime calls (compared with libwavert's wavert_mgpu.h by tests/libwavert/test_sparse_mgpu.py).
module attributes {gpu.container_module} {
  func.func @all(%arg0: index, %vals: memref<?xf64>, %idx: memref<?xi32>, %pos: memref<?xi32>, %h16: memref<?x?xf16>) {
    %t0 = gpu.wait async
    %sm, %t2 = gpu.create_csr async [%t0] %arg0, %arg0, %arg0, %pos, %idx, %vals : memref<?xi32>, memref<?xi32>, memref<?xf64>
    %sc, %t2b = gpu.create_csc async [%t2] %arg0, %arg0, %arg0, %pos, %idx, %vals : memref<?xi32>, memref<?xi32>, memref<?xf64>
    %sb, %t2c = gpu.create_bsr async [%t2b] %arg0, %arg0, %arg0, %arg0, %arg0, %pos, %idx, %vals : memref<?xi32>, memref<?xi32>, memref<?xf64>
    %so, %t2d = gpu.create_coo async [%t2c] %arg0, %arg0, %arg0, %idx, %idx, %vals : memref<?xi32>, memref<?xi32>, memref<?xf64>
    %sa, %t2e = gpu.create_coo_aos async [%t2d] %arg0, %arg0, %arg0, %idx, %vals : memref<?xi32>, memref<?xf64>
    %dv, %t3 = gpu.create_dn_tensor async [%t2e] %vals, %arg0 : index into memref<?xf64>
    %dm, %t4 = gpu.create_dn_tensor async [%t3] %vals, %arg0, %arg0 : index, index into memref<?xf64>
    %bs, %t5 = gpu.spmv_buffer_size async [%t4] %sm, %dv, %dv into f64
    %t6 = gpu.spmv async [%t5] %sm, %dv, %dv, %vals : memref<?xf64> into f64
    %bs2, %t7 = gpu.spmm_buffer_size async [%t6] %sm, %dm, %dm : index into f64
    %t8 = gpu.spmm async [%t7] %sm, %dm, %dm, %vals : memref<?xf64> into f64
    %bs3, %t9 = gpu.sddmm_buffer_size async [%t8] %dm, %dm, %sm into f64
    %t10 = gpu.sddmm async [%t9] %dm, %dm, %sm, %vals : memref<?xf64> into f64
    %d, %t11 = gpu.spgemm_create_descr async [%t10]
    %b1, %t12 = gpu.spgemm_work_estimation_or_compute async [%t11]{WORK_ESTIMATION} %sm, %sm, %sm, %d, %arg0, %vals : f64 into memref<?xf64>
    %b2, %t13 = gpu.spgemm_work_estimation_or_compute async [%t12]{COMPUTE} %sm, %sm, %sm, %d, %arg0, %vals : f64 into memref<?xf64>
    %r, %c, %n, %t14 = gpu.spmat_get_size async [%t13] %sm
    %t15 = gpu.set_csr_pointers async [%t14] %sm, %pos, %idx, %vals : memref<?xi32>, memref<?xi32>, memref<?xf64>
    %t16 = gpu.spgemm_copy async [%t15] %sm, %sm, %sm, %d : f64
    %t17 = gpu.spgemm_destroy_descr async [%t16] %d
    %t18 = gpu.destroy_sp_mat async [%t17] %sm
    %t19 = gpu.destroy_dn_tensor async [%t18] %dv
    %t20 = gpu.destroy_dn_tensor async [%t19] %dm
    gpu.wait [%t20]
    return
  }
  func.func @lt(%arg0: index, %h16: memref<?xf16>) {
    %t0 = gpu.wait async
    %sm, %t2 = gpu.create_2to4_spmat async [%t0] {PRUNE_AND_CHECK} %arg0, %arg0, %h16 : memref<?xf16>
    %dm, %t4 = gpu.create_dn_tensor async [%t2] %h16, %arg0, %arg0 : index, index into memref<?xf16>
    %b1, %b2, %b3, %t5 = gpu.spmm_buffer_size async [%t4] %sm, %dm, %dm : index, index, index into f16
    %t6 = gpu.spmm async [%t5] %sm, %dm, %dm, %h16, %h16, %h16 : memref<?xf16>, memref<?xf16>, memref<?xf16> into f16
    %t7 = gpu.destroy_sp_mat async [%t6] %sm
    %t8 = gpu.destroy_dn_tensor async [%t7] %dm
    gpu.wait [%t8]
    return
  }
}
