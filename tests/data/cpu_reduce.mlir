module attributes {gpu.container_module} {
  gpu.module @k {
    gpu.func @sum(%a: memref<?xi32>, %out: memref<?xi32>)
        workgroup(%s: memref<256xi32, #gpu.address_space<workgroup>>) kernel {
      %t = gpu.thread_id x
      %b = gpu.block_id x
      %g = gpu.global_id x
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %c128 = arith.constant 128 : index
      %v = memref.load %a[%g] : memref<?xi32>
      memref.store %v, %s[%t] : memref<256xi32, #gpu.address_space<workgroup>>
      gpu.barrier
      %r = scf.while (%step = %c128) : (index) -> index {
        %more = arith.cmpi ugt, %step, %c0 : index
        scf.condition(%more) %step : index
      } do {
      ^bb0(%step: index):
        %lt = arith.cmpi ult, %t, %step : index
        scf.if %lt {
          %o = arith.addi %t, %step : index
          %x = memref.load %s[%t] : memref<256xi32, #gpu.address_space<workgroup>>
          %y = memref.load %s[%o] : memref<256xi32, #gpu.address_space<workgroup>>
          %z = arith.addi %x, %y : i32
          memref.store %z, %s[%t] : memref<256xi32, #gpu.address_space<workgroup>>
        }
        gpu.barrier
        %next = arith.shrui %step, %c1 : index
        scf.yield %next : index
      }
      %first = arith.cmpi eq, %t, %c0 : index
      scf.if %first {
        %total = memref.load %s[%c0] : memref<256xi32, #gpu.address_space<workgroup>>
        memref.store %total, %out[%b] : memref<?xi32>
      }
      gpu.return
    }
  }
  func.func @run(%a: memref<?xi32>, %out: memref<?xi32>) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c256 = arith.constant 256 : index
    %g = memref.dim %out, %c0 : memref<?xi32>
    gpu.launch_func @k::@sum blocks in (%g, %c1, %c1) threads in (%c256, %c1, %c1)
        args(%a : memref<?xi32>, %out : memref<?xi32>)
    return
  }
}
