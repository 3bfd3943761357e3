// Every runner utility called as MLIR programs call them (tests/libwavert/test_runner_utilities.py).
module {
  func.func private @printMemrefI8(memref<*xi8>) attributes {llvm.emit_c_interface}
  func.func private @printMemrefI32(memref<*xi32>)
  func.func private @printMemrefI64(memref<*xi64>)
  func.func private @printMemrefF32(memref<*xf32>)
  func.func private @printMemrefF64(memref<*xf64>)
  func.func private @printMemrefInd(memref<*xindex>)
  func.func private @printMemrefC32(memref<*xcomplex<f32>>)
  func.func private @printMemrefC64(memref<*xcomplex<f64>>)
  func.func private @printMemref2dF32(memref<?x?xf32>) attributes {llvm.emit_c_interface}
  func.func private @printMemref0dF32(memref<f32>) attributes {llvm.emit_c_interface}
  func.func private @printMemref1dI64(memref<?xi64>) attributes {llvm.emit_c_interface}
  func.func private @printMemrefShapeF32(memref<*xf32>) attributes {llvm.emit_c_interface}
  func.func private @verifyMemRefF32(memref<*xf32>, memref<*xf32>) -> i64 attributes {llvm.emit_c_interface}
  func.func private @verifyMemRefI32(memref<*xi32>, memref<*xi32>) -> i64 attributes {llvm.emit_c_interface}
  func.func private @rtclock() -> f64
  func.func private @nanoTime() -> i64 attributes {llvm.emit_c_interface}
  func.func private @rtsrand(i64) -> !llvm.ptr
  func.func private @rtrand(!llvm.ptr, i64) -> i64
  func.func private @rtdrand(!llvm.ptr)
  func.func private @shuffle(memref<?xi64>, !llvm.ptr) attributes {llvm.emit_c_interface}
  func.func private @stdSortI64(i64, memref<?xi64>) attributes {llvm.emit_c_interface}
  func.func private @printI64(i64)
  func.func private @printNewline()

  func.func @main() {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c2 = arith.constant 2 : index
    %c3 = arith.constant 3 : index
    %zero0 = arith.constant 0 : i64
    %one = arith.constant 1 : i64
    %six = arith.constant 6 : i64
    %seven = arith.constant 7 : i64
    %m = memref.alloc() : memref<2x3xf32>
    scf.for %i = %c0 to %c2 step %c1 {
      scf.for %j = %c0 to %c3 step %c1 {
        %k = affine.apply affine_map<(a, b) -> (a * 3 + b)>(%i, %j)
        %n = arith.index_cast %k : index to i32
        %f = arith.sitofp %n : i32 to f32
        %h = arith.constant 0.5 : f32
        %v = arith.addf %f, %h : f32
        memref.store %v, %m[%i, %j] : memref<2x3xf32>
      }
    }
    %u = memref.cast %m : memref<2x3xf32> to memref<*xf32>
    call @printMemrefF32(%u) : (memref<*xf32>) -> ()
    call @printMemrefShapeF32(%u) : (memref<*xf32>) -> ()
    %d = memref.cast %m : memref<2x3xf32> to memref<?x?xf32>
    call @printMemref2dF32(%d) : (memref<?x?xf32>) -> ()
    %s = memref.subview %m[1, 1] [1, 1] [1, 1] : memref<2x3xf32> to memref<f32, strided<[], offset: 4>>
    %z = memref.alloc() : memref<f32>
    memref.copy %s, %z : memref<f32, strided<[], offset: 4>> to memref<f32>
    call @printMemref0dF32(%z) : (memref<f32>) -> ()

    // memref.copy of a transposed view (not contiguous: memrefCopy).
    %t = memref.transpose %m (i, j) -> (j, i) : memref<2x3xf32> to memref<3x2xf32, strided<[1, 3]>>
    %tc = memref.alloc() : memref<3x2xf32>
    memref.copy %t, %tc : memref<3x2xf32, strided<[1, 3]>> to memref<3x2xf32>
    %tu = memref.cast %tc : memref<3x2xf32> to memref<*xf32>
    call @printMemrefF32(%tu) : (memref<*xf32>) -> ()

    %e = memref.alloc() : memref<2x3xf32>
    memref.copy %m, %e : memref<2x3xf32> to memref<2x3xf32>
    %eu = memref.cast %e : memref<2x3xf32> to memref<*xf32>
    %ok = call @verifyMemRefF32(%u, %eu) : (memref<*xf32>, memref<*xf32>) -> i64
    call @printI64(%ok) : (i64) -> ()
    call @printNewline() : () -> ()
    %nine = arith.constant 9.0 : f32
    memref.store %nine, %e[%c1, %c2] : memref<2x3xf32>
    %bad = call @verifyMemRefF32(%u, %eu) : (memref<*xf32>, memref<*xf32>) -> i64
    call @printI64(%bad) : (i64) -> ()
    call @printNewline() : () -> ()

    %i8 = memref.alloc() : memref<3xi8>
    %ca = arith.constant 72 : i8
    %cb = arith.constant 105 : i8
    %cc = arith.constant 33 : i8
    memref.store %ca, %i8[%c0] : memref<3xi8>
    memref.store %cb, %i8[%c1] : memref<3xi8>
    memref.store %cc, %i8[%c2] : memref<3xi8>
    %i8u = memref.cast %i8 : memref<3xi8> to memref<*xi8>
    call @printMemrefI8(%i8u) : (memref<*xi8>) -> ()

    %i32 = memref.alloc() : memref<2xi32>
    %m7 = arith.constant -7 : i32
    memref.store %m7, %i32[%c0] : memref<2xi32>
    memref.store %m7, %i32[%c1] : memref<2xi32>
    %i32u = memref.cast %i32 : memref<2xi32> to memref<*xi32>
    call @printMemrefI32(%i32u) : (memref<*xi32>) -> ()
    %same = call @verifyMemRefI32(%i32u, %i32u) : (memref<*xi32>, memref<*xi32>) -> i64
    call @printI64(%same) : (i64) -> ()
    call @printNewline() : () -> ()

    %i64 = memref.alloc() : memref<2xi64>
    %big = arith.constant -5000000000 : i64
    memref.store %big, %i64[%c0] : memref<2xi64>
    memref.store %big, %i64[%c1] : memref<2xi64>
    %i64u = memref.cast %i64 : memref<2xi64> to memref<*xi64>
    call @printMemrefI64(%i64u) : (memref<*xi64>) -> ()
    %i64d = memref.cast %i64 : memref<2xi64> to memref<?xi64>
    call @printMemref1dI64(%i64d) : (memref<?xi64>) -> ()

    %f64 = memref.alloc() : memref<1xf64>
    %third = arith.constant 0.333333333333 : f64
    memref.store %third, %f64[%c0] : memref<1xf64>
    %f64u = memref.cast %f64 : memref<1xf64> to memref<*xf64>
    call @printMemrefF64(%f64u) : (memref<*xf64>) -> ()

    %ind = memref.alloc() : memref<2xindex>
    memref.store %c3, %ind[%c0] : memref<2xindex>
    memref.store %c2, %ind[%c1] : memref<2xindex>
    %indu = memref.cast %ind : memref<2xindex> to memref<*xindex>
    call @printMemrefInd(%indu) : (memref<*xindex>) -> ()

    %c32 = memref.alloc() : memref<1xcomplex<f32>>
    %re = arith.constant 1.5 : f32
    %im = arith.constant -2.0 : f32
    %z32 = complex.create %re, %im : complex<f32>
    memref.store %z32, %c32[%c0] : memref<1xcomplex<f32>>
    %c32u = memref.cast %c32 : memref<1xcomplex<f32>> to memref<*xcomplex<f32>>
    call @printMemrefC32(%c32u) : (memref<*xcomplex<f32>>) -> ()
    %c64 = memref.alloc() : memref<1xcomplex<f64>>
    %re64 = arith.constant 0.25 : f64
    %im64 = arith.constant 1.0e10 : f64
    %z64 = complex.create %re64, %im64 : complex<f64>
    memref.store %z64, %c64[%c0] : memref<1xcomplex<f64>>
    %c64u = memref.cast %c64 : memref<1xcomplex<f64>> to memref<*xcomplex<f64>>
    call @printMemrefC64(%c64u) : (memref<*xcomplex<f64>>) -> ()

    // vector.print: every scalar kind, vectors, strings and punctuation.
    %b1 = arith.constant true
    vector.print %b1 : i1
    %n8 = arith.constant -8 : i8
    vector.print %n8 : i8
    vector.print %c3 : index
    %h16 = arith.constant 1.5 : f16
    vector.print %h16 : f16
    %bf = arith.constant 3.140625 : bf16
    vector.print %bf : bf16
    %f8 = arith.constant 448.0 : f8E4M3FN
    vector.print %f8 : f8E4M3FN
    %f4 = arith.constant -6.0 : f4E2M1FN
    vector.print %f4 : f4E2M1FN
    %vd = arith.constant dense<[1.0e6, 7.14, -0.0]> : vector<3xf64>
    vector.print %vd : vector<3xf64>
    %v2 = arith.constant dense<[[1, 2], [3, 4]]> : vector<2x2xi32>
    vector.print %v2 : vector<2x2xi32>
    vector.print str "Correct Results :"
    %r = arith.constant 8192 : i32
    vector.print %r : i32
    vector.print punctuation <open>
    vector.print %r : i32 punctuation <no_punctuation>
    vector.print punctuation <comma>
    vector.print %r : i32 punctuation <no_punctuation>
    vector.print punctuation <close>
    vector.print punctuation <newline>

    // std::mt19937(42) and std::uniform_int_distribution / std::shuffle as libstdc++ draws.
    %seed = arith.constant 42 : i64
    %g = call @rtsrand(%seed) : (i64) -> !llvm.ptr
    %hundred = arith.constant 100 : i64
    %x0 = call @rtrand(%g, %zero0) : (!llvm.ptr, i64) -> i64
    %x1 = call @rtrand(%g, %one) : (!llvm.ptr, i64) -> i64
    %x2 = call @rtrand(%g, %six) : (!llvm.ptr, i64) -> i64
    %x3 = call @rtrand(%g, %hundred) : (!llvm.ptr, i64) -> i64
    %xs = vector.from_elements %x0, %x1, %x2, %x3 : vector<4xi64>
    vector.print %xs : vector<4xi64>
    %perm = memref.alloc() : memref<7xi64>
    %permd = memref.cast %perm : memref<7xi64> to memref<?xi64>
    %g7 = call @rtsrand(%seven) : (i64) -> !llvm.ptr
    call @shuffle(%permd, %g7) : (memref<?xi64>, !llvm.ptr) -> ()
    call @printMemref1dI64(%permd) : (memref<?xi64>) -> ()
    call @stdSortI64(%seven, %permd) : (i64, memref<?xi64>) -> ()
    call @printMemref1dI64(%permd) : (memref<?xi64>) -> ()
    call @rtdrand(%g7) : (!llvm.ptr) -> ()
    call @rtdrand(%g) : (!llvm.ptr) -> ()

    %t0 = call @rtclock() : () -> f64
    %n0 = call @nanoTime() : () -> i64
    %n1 = call @nanoTime() : () -> i64
    %dt = arith.subi %n1, %n0 : i64
    %zero = arith.constant 0 : i64
    %later = arith.cmpi sge, %dt, %zero : i64
    vector.print %later : i1
    %epoch = arith.constant 1.5e9 : f64
    %recent = arith.cmpf ogt, %t0, %epoch : f64
    vector.print %recent : i1
    return
  }
}
