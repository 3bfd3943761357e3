// Subgroup queries and an assert in one kernel: each thread writes num_subgroups +
// subgroup_id + its lane id; the assert checks the lane id against the subgroup size.
module attributes {gpu.container_module} {
  gpu.module @k {
    gpu.func @queries(%o: memref<?xi32>) kernel {
      %t = gpu.thread_id x
      %n = gpu.num_subgroups : index
      %s = gpu.subgroup_id : index
      %l = gpu.lane_id
      %size = gpu.subgroup_size : index
      %fits = arith.cmpi ult, %l, %size : index
      cf.assert %fits, "lane id below the subgroup size"
      %li = arith.index_cast %l : index to i32
      %ns = arith.addi %n, %s : index
      %nsi = arith.index_cast %ns : index to i32
      %v = arith.addi %li, %nsi : i32
      memref.store %v, %o[%t] : memref<?xi32>
      gpu.return
    }
  }
  func.func @main(%o: memref<?xi32>) {
    %c1 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    gpu.launch_func @k::@queries blocks in (%c1, %c1, %c1) threads in (%c64, %c1, %c1)
        args(%o : memref<?xi32>)
    return
  }
}
