// A kernel storing far outside its buffer (the index comes from memory, so no compiler can
// prove the store out of bounds): `pywave run` prints what the host printed before, then the
// driver's error on stderr, and exits with status 1.
module attributes {gpu.container_module} {
  func.func private @printI64(i64)
  func.func private @printNewline()

  func.func @main() {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %seven = arith.constant 7 : i64
    call @printI64(%seven) : (i64) -> ()
    call @printNewline() : () -> ()
    %far = arith.constant 1099511627776 : i64
    %h = memref.alloc() : memref<1xi64>
    memref.store %far, %h[%c0] : memref<1xi64>
    %uh = memref.cast %h : memref<1xi64> to memref<*xi64>
    gpu.host_register %uh : memref<*xi64>
    %d = gpu.alloc() : memref<4xi32>
    gpu.launch blocks(%bx, %by, %bz) in (%gx = %c1, %gy = %c1, %gz = %c1)
               threads(%tx, %ty, %tz) in (%sx = %c1, %sy = %c1, %sz = %c1) {
      %i64 = memref.load %h[%c0] : memref<1xi64>
      %i = arith.index_cast %i64 : i64 to index
      %v = arith.constant 1 : i32
      memref.store %v, %d[%i] : memref<4xi32>
      gpu.terminator
    }
    return
  }
}
