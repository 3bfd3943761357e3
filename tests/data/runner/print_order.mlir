// Host prints (C stdio) and device printf interleave in program order: a synchronous launch
// returns after its kernel, whose printf output the driver flushes at that point.
module attributes {gpu.container_module} {
  func.func private @printI64(i64)
  func.func private @printNewline()

  func.func @main() {
    %c1 = arith.constant 1 : index
    %c2 = arith.constant 2 : index
    %one = arith.constant 1 : i64
    %three = arith.constant 3 : i64
    call @printI64(%one) : (i64) -> ()
    call @printNewline() : () -> ()
    gpu.launch blocks(%bx, %by, %bz) in (%gx = %c1, %gy = %c1, %gz = %c1)
               threads(%tx, %ty, %tz) in (%sx = %c2, %sy = %c1, %sz = %c1) {
      gpu.printf "device %lld\n", %tx : index
      gpu.terminator
    }
    call @printI64(%three) : (i64) -> ()
    call @printNewline() : () -> ()
    return
  }
}
