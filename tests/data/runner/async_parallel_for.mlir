// scf.parallel loops for MLIR's async-parallel-for (tests/libwavert/test_async_runtime.py runs it with
// the pass's options through --pass-pipeline, and through pywave's own lowering): a strided
// 1-D loop, a 2-D loop with steps (2, 3), reductions into memory with memref.atomic_rmw (i32
// and f32), and an scf.reduce loop (left sequential by the pass). Bounds come from @id so
// nothing folds.
func.func private @printMemrefI32(memref<*xi32>)
func.func private @printMemrefF32(memref<*xf32>)

func.func @id(%x: index) -> index {
  return %x : index
}

func.func @main() {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  %c4 = arith.constant 4 : index
  %c37 = arith.constant 37 : index
  %zero = arith.constant 0 : i32
  %minus1 = arith.constant -1 : i32
  %five = arith.constant 5 : i32
  %ten = arith.constant 10 : i32
  %fzero = arith.constant 0.0 : f32
  %half = arith.constant 0.5 : f32
  %n = call @id(%c37) : (index) -> index
  %rows = call @id(%c4) : (index) -> index
  %c5 = arith.constant 5 : index
  %c6 = arith.constant 6 : index
  %c7 = arith.constant 7 : index
  %c9 = arith.constant 9 : index
  %cols = call @id(%c7) : (index) -> index

  // 1-D: A[i] = i * i - 5 for i = 3, 5, ..., 35; the rest 0.
  %A = memref.alloc(%n) : memref<?xi32>
  scf.parallel (%i) = (%c0) to (%n) step (%c1) {
    memref.store %zero, %A[%i] : memref<?xi32>
  }
  scf.parallel (%i) = (%c3) to (%n) step (%c2) {
    %v = arith.index_cast %i : index to i32
    %sq = arith.muli %v, %v : i32
    %w = arith.subi %sq, %five : i32
    memref.store %w, %A[%i] : memref<?xi32>
  }
  %uA = memref.cast %A : memref<?xi32> to memref<*xi32>
  call @printMemrefI32(%uA) : (memref<*xi32>) -> ()

  // 2-D: B[i][j] = 10 * i + j for i = 1, 3 and j = 0, 3, 6; the rest -1.
  %B = memref.alloc(%rows, %cols) : memref<?x?xi32>
  scf.parallel (%i, %j) = (%c0, %c0) to (%rows, %cols) step (%c1, %c1) {
    memref.store %minus1, %B[%i, %j] : memref<?x?xi32>
  }
  scf.parallel (%i, %j) = (%c1, %c0) to (%rows, %cols) step (%c2, %c3) {
    %vi = arith.index_cast %i : index to i32
    %vj = arith.index_cast %j : index to i32
    %t = arith.muli %vi, %ten : i32
    %w = arith.addi %t, %vj : i32
    memref.store %w, %B[%i, %j] : memref<?x?xi32>
  }
  %uB = memref.cast %B : memref<?x?xi32> to memref<*xi32>
  call @printMemrefI32(%uB) : (memref<*xi32>) -> ()

  // Reduction into memory: S[k] = the sum of i < 37 with i mod 4 = k.
  %S = memref.alloc() : memref<4xi32>
  scf.parallel (%k) = (%c0) to (%c4) step (%c1) {
    memref.store %zero, %S[%k] : memref<4xi32>
  }
  scf.parallel (%i) = (%c0) to (%n) step (%c1) {
    %k = arith.remui %i, %c4 : index
    %v = arith.index_cast %i : index to i32
    %old = memref.atomic_rmw addi %v, %S[%k] : (i32, memref<4xi32>) -> i32
  }
  %uS = memref.cast %S : memref<4xi32> to memref<*xi32>
  call @printMemrefI32(%uS) : (memref<*xi32>) -> ()

  // 2-D reduction into memory: R[i] = the sum over j < 9 of i * j / 2.
  %R = memref.alloc() : memref<6xf32>
  scf.parallel (%i) = (%c0) to (%c6) step (%c1) {
    memref.store %fzero, %R[%i] : memref<6xf32>
  }
  scf.parallel (%i, %j) = (%c0, %c0) to (%c6, %c9) step (%c1, %c1) {
    %p = arith.muli %i, %j : index
    %pv = arith.index_cast %p : index to i32
    %pf = arith.sitofp %pv : i32 to f32
    %h = arith.mulf %pf, %half : f32
    %old = memref.atomic_rmw addf %h, %R[%i] : (f32, memref<6xf32>) -> f32
  }
  %uR = memref.cast %R : memref<6xf32> to memref<*xf32>
  call @printMemrefF32(%uR) : (memref<*xf32>) -> ()

  // scf.reduce: the sum of A (async-parallel-for leaves loops with results alone).
  %sum = scf.parallel (%i) = (%c0) to (%n) step (%c1) init (%zero) -> i32 {
    %v = memref.load %A[%i] : memref<?xi32>
    scf.reduce(%v : i32) {
    ^bb0(%l: i32, %r: i32):
      %s = arith.addi %l, %r : i32
      scf.reduce.return %s : i32
    }
  }
  %T = memref.alloc() : memref<1xi32>
  memref.store %sum, %T[%c0] : memref<1xi32>
  %uT = memref.cast %T : memref<1xi32> to memref<*xi32>
  call @printMemrefI32(%uT) : (memref<*xi32>) -> ()

  memref.dealloc %A : memref<?xi32>
  memref.dealloc %B : memref<?x?xi32>
  memref.dealloc %S : memref<4xi32>
  memref.dealloc %R : memref<6xf32>
  memref.dealloc %T : memref<1xi32>
  return
}
