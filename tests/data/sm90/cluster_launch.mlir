// Thread-block clusters on sm_90: a gpu.launch_func with `clusters in` (2x1x1 clusters over a
// 4x2 grid) and a gpu.launch with `clusters(...)` (1x2x1 clusters over the same grid). Each
// block stores its cluster coordinates as decimal digits into a host-registered 2x4 memref
// at [block y, block x]; the host prints it after each launch.
//   launch_func: clusters per grid x (2), blocks per cluster x (2), cluster id x, y,
//                block id in cluster x.
//   launch:      clusters per grid y (1), blocks per cluster y (2), cluster id x, y,
//                block id in cluster y.
module attributes {gpu.container_module} {
  gpu.module @clusters {
    gpu.func @where_x(%out: memref<2x4xi32>) kernel {
      %ten = arith.constant 10 : index
      %bx = gpu.block_id x
      %by = gpu.block_id y
      %d0 = gpu.cluster_dim x
      %d1 = gpu.cluster_dim_blocks x
      %d2 = gpu.cluster_id x
      %d3 = gpu.cluster_id y
      %d4 = gpu.cluster_block_id x
      %a = arith.muli %d0, %ten : index
      %b = arith.addi %a, %d1 : index
      %c = arith.muli %b, %ten : index
      %d = arith.addi %c, %d2 : index
      %e = arith.muli %d, %ten : index
      %f = arith.addi %e, %d3 : index
      %g = arith.muli %f, %ten : index
      %h = arith.addi %g, %d4 : index
      %v = arith.index_cast %h : index to i32
      memref.store %v, %out[%by, %bx] : memref<2x4xi32>
      gpu.return
    }
  }

  func.func private @printMemrefI32(memref<*xi32>)

  func.func @main() {
    %c1 = arith.constant 1 : index
    %c2 = arith.constant 2 : index
    %c4 = arith.constant 4 : index
    %ten = arith.constant 10 : index
    %out = memref.alloc() : memref<2x4xi32>
    %u = memref.cast %out : memref<2x4xi32> to memref<*xi32>
    gpu.host_register %u : memref<*xi32>

    gpu.launch_func @clusters::@where_x clusters in (%c2, %c1, %c1)
        blocks in (%c4, %c2, %c1) threads in (%c1, %c1, %c1) args(%out : memref<2x4xi32>)
    call @printMemrefI32(%u) : (memref<*xi32>) -> ()

    gpu.launch clusters(%cx, %cy, %cz) in (%sx = %c1, %sy = %c2, %sz = %c1)
               blocks(%bx, %by, %bz) in (%gx = %c4, %gy = %c2, %gz = %c1)
               threads(%tx, %ty, %tz) in (%tsx = %c1, %tsy = %c1, %tsz = %c1) {
      %d0 = gpu.cluster_dim y
      %d1 = gpu.cluster_dim_blocks y
      %d2 = gpu.cluster_id x
      %d3 = gpu.cluster_id y
      %d4 = gpu.cluster_block_id y
      %a = arith.muli %d0, %ten : index
      %b = arith.addi %a, %d1 : index
      %c = arith.muli %b, %ten : index
      %d = arith.addi %c, %d2 : index
      %e = arith.muli %d, %ten : index
      %f = arith.addi %e, %d3 : index
      %g = arith.muli %f, %ten : index
      %h = arith.addi %g, %d4 : index
      %v = arith.index_cast %h : index to i32
      memref.store %v, %out[%by, %bx] : memref<2x4xi32>
      gpu.terminator
    }
    call @printMemrefI32(%u) : (memref<*xi32>) -> ()
    return
  }
}
