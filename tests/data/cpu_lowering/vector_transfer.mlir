// Transfers (n-D, out of bounds with padding, masked, permuted, broadcast) and the masked,
// gathered and compressed memory ops, on a memref this program fills.
func.func @main() {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  %c4 = arith.constant 4 : index
  %c5 = arith.constant 5 : index
  %m = memref.alloc() : memref<4x5xf32>
  scf.for %i = %c0 to %c4 step %c1 {
    scf.for %j = %c0 to %c5 step %c1 {
      %i64 = arith.index_cast %i : index to i64
      %j64 = arith.index_cast %j : index to i64
      %ten = arith.constant 10 : i64
      %t = arith.muli %i64, %ten : i64
      %v = arith.addi %t, %j64 : i64
      %f = arith.sitofp %v : i64 to f32
      memref.store %f, %m[%i, %j] : memref<4x5xf32>
    }
  }
  %pad = arith.constant -1.0 : f32
  %r2 = vector.transfer_read %m[%c1, %c2], %pad : memref<4x5xf32>, vector<2x3xf32>
  vector.print %r2 : vector<2x3xf32>
  %oob = vector.transfer_read %m[%c2, %c3], %pad : memref<4x5xf32>, vector<3x4xf32>
  vector.print %oob : vector<3x4xf32>
  %perm = vector.transfer_read %m[%c0, %c1], %pad
      {permutation_map = affine_map<(d0, d1) -> (d1, d0)>} : memref<4x5xf32>, vector<3x2xf32>
  vector.print %perm : vector<3x2xf32>
  %bc = vector.transfer_read %m[%c3, %c0], %pad
      {permutation_map = affine_map<(d0, d1) -> (0, d1)>, in_bounds = [true, false]}
      : memref<4x5xf32>, vector<2x6xf32>
  vector.print %bc : vector<2x6xf32>
  %mask = vector.create_mask %c2, %c1 : vector<3x3xi1>
  %mr = vector.transfer_read %m[%c0, %c0], %pad, %mask : memref<4x5xf32>, vector<3x3xf32>
  vector.print %mr : vector<3x3xf32>
  %w = arith.constant dense<[[0.5, 1.5, 2.5], [3.5, 4.5, 5.5]]> : vector<2x3xf32>
  %wm = vector.constant_mask [2, 2] : vector<2x3xi1>
  vector.transfer_write %w, %m[%c2, %c3], %wm : vector<2x3xf32>, memref<4x5xf32>
  %after = vector.transfer_read %m[%c0, %c0], %pad : memref<4x5xf32>, vector<4x5xf32>
  vector.print %after : vector<4x5xf32>
  %flat = memref.alloc() : memref<8xi32>
  %iota = arith.constant dense<[0, 1, 2, 3, 4, 5, 6, 7]> : vector<8xi32>
  vector.store %iota, %flat[%c0] : memref<8xi32>, vector<8xi32>
  %ld = vector.load %flat[%c2] : memref<8xi32>, vector<4xi32>
  vector.print %ld : vector<4xi32>
  %lm = arith.constant dense<[true, false, true, false]> : vector<4xi1>
  %passthru = arith.constant dense<-7> : vector<4xi32>
  %ml = vector.maskedload %flat[%c3], %lm, %passthru : memref<8xi32>, vector<4xi1>, vector<4xi32> into vector<4xi32>
  vector.print %ml : vector<4xi32>
  %idx = arith.constant dense<[7, 0, 5, 5]> : vector<4xi32>
  %all = arith.constant dense<true> : vector<4xi1>
  %g = vector.gather %flat[%c0][%idx], %all, %passthru : memref<8xi32>, vector<4xi32>, vector<4xi1>, vector<4xi32> into vector<4xi32>
  vector.print %g : vector<4xi32>
  %neg = arith.constant dense<[-10, -20, -30, -40]> : vector<4xi32>
  %sidx = arith.constant dense<[1, 3, 5, 6]> : vector<4xi32>
  vector.scatter %flat[%c0][%sidx], %lm, %neg : memref<8xi32>, vector<4xi32>, vector<4xi1>, vector<4xi32>
  vector.compressstore %flat[%c4], %lm, %neg : memref<8xi32>, vector<4xi1>, vector<4xi32>
  %iota4 = arith.constant dense<[100, 101, 102, 103]> : vector<4xi32>
  vector.maskedstore %flat[%c0], %lm, %iota4 : memref<8xi32>, vector<4xi1>, vector<4xi32>
  %final = vector.load %flat[%c0] : memref<8xi32>, vector<8xi32>
  vector.print %final : vector<8xi32>
  %ex = vector.expandload %flat[%c1], %lm, %passthru : memref<8xi32>, vector<4xi1>, vector<4xi32> into vector<4xi32>
  vector.print %ex : vector<4xi32>
  memref.dealloc %m : memref<4x5xf32>
  memref.dealloc %flat : memref<8xi32>
  return
}
