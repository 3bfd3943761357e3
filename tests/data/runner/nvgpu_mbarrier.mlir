// nvgpu on sm_90a: an mbarrier in workgroup memory, initialised by thread 0, arrived at by
// every thread and waited on (compiled with --target sm_90a --features +ptx80).
!barrier = !nvgpu.mbarrier.group<memorySpace = #gpu.address_space<workgroup>>
module attributes {gpu.container_module} {
  func.func private @printMemrefI32(memref<*xi32>)

  func.func @main() {
    %c1 = arith.constant 1 : index
    %c32 = arith.constant 32 : index
    %out = memref.alloc() : memref<32xi32>
    %u = memref.cast %out : memref<32xi32> to memref<*xi32>
    gpu.host_register %u : memref<*xi32>
    gpu.launch blocks(%bx, %by, %bz) in (%gx = %c1, %gy = %c1, %gz = %c1)
               threads(%tx, %ty, %tz) in (%sx = %c32, %sy = %c1, %sz = %c1) {
      %c0 = arith.constant 0 : index
      %bar = nvgpu.mbarrier.create -> !barrier
      %first = arith.cmpi eq, %tx, %c0 : index
      scf.if %first {
        nvgpu.mbarrier.init %bar[%c0], %c32 : !barrier
      }
      gpu.barrier
      %token = nvgpu.mbarrier.arrive %bar[%c0] : !barrier -> !nvgpu.mbarrier.token
      %phase = arith.constant false
      %ticks = arith.constant 10000000 : index
      nvgpu.mbarrier.try_wait.parity %bar[%c0], %phase, %ticks : !barrier
      %v = arith.index_cast %tx : index to i32
      memref.store %v, %out[%tx] : memref<32xi32>
      gpu.terminator
    }
    call @printMemrefI32(%u) : (memref<*xi32>) -> ()
    return
  }
}
