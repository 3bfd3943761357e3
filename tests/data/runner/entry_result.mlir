// Entry functions that return a value (mlir-runner's --entry-point-result=i32/i64/f32), one
// of them after a kernel's result came back to the host.
module attributes {gpu.container_module} {
  func.func @answer() -> i32 {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %h = memref.alloc() : memref<1xi32>
    %d = gpu.alloc() : memref<1xi32>
    gpu.launch blocks(%bx, %by, %bz) in (%gx = %c1, %gy = %c1, %gz = %c1)
               threads(%tx, %ty, %tz) in (%sx = %c1, %sy = %c1, %sz = %c1) {
      %v = arith.constant 42 : i32
      memref.store %v, %d[%c0] : memref<1xi32>
      gpu.terminator
    }
    gpu.memcpy %h, %d : memref<1xi32>, memref<1xi32>
    gpu.dealloc %d : memref<1xi32>
    %r = memref.load %h[%c0] : memref<1xi32>
    memref.dealloc %h : memref<1xi32>
    return %r : i32
  }

  func.func @big() -> i64 {
    %r = arith.constant -5000000000 : i64
    return %r : i64
  }

  func.func @half() -> f32 {
    %r = arith.constant 0.5 : f32
    return %r : f32
  }
}
