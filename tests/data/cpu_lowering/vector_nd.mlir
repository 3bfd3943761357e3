// n-D vector ops that convert-to-llvm alone leaves: masks, broadcasts, shape casts,
// transposes, strided slices, n-D extract/insert and arithmetic, interleave.
func.func @main() {
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  %m = vector.constant_mask [2, 3] : vector<3x4xi1>
  vector.print %m : vector<3x4xi1>
  %dm = vector.create_mask %c2, %c3 : vector<4x4xi1>
  vector.print %dm : vector<4x4xi1>
  %f = arith.constant -2.5 : f32
  %b = vector.broadcast %f : f32 to vector<2x2x3xf32>
  vector.print %b : vector<2x2x3xf32>
  %row = arith.constant dense<[1.0, 2.0, 3.0]> : vector<3xf32>
  %b2 = vector.broadcast %row : vector<3xf32> to vector<2x3xf32>
  %col = arith.constant dense<[[10.0], [20.0]]> : vector<2x1xf32>
  %b3 = vector.broadcast %col : vector<2x1xf32> to vector<2x3xf32>
  %sum = arith.addf %b2, %b3 : vector<2x3xf32>
  vector.print %sum : vector<2x3xf32>
  %sc = vector.shape_cast %sum : vector<2x3xf32> to vector<3x2xf32>
  vector.print %sc : vector<3x2xf32>
  %t = vector.transpose %sum, [1, 0] : vector<2x3xf32> to vector<3x2xf32>
  vector.print %t : vector<3x2xf32>
  %i3 = arith.constant dense<[[[1, 2], [3, 4]], [[5, 6], [7, 8]]]> : vector<2x2x2xi32>
  %t3 = vector.transpose %i3, [2, 0, 1] : vector<2x2x2xi32> to vector<2x2x2xi32>
  vector.print %t3 : vector<2x2x2xi32>
  %e = vector.extract %i3[1, 0] : vector<2xi32> from vector<2x2x2xi32>
  vector.print %e : vector<2xi32>
  %ins = vector.insert %e, %i3[0, 1] : vector<2xi32> into vector<2x2x2xi32>
  vector.print %ins : vector<2x2x2xi32>
  %big = arith.constant dense<[[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]> : vector<3x4xi64>
  %ss = vector.extract_strided_slice %big {offsets = [1, 1], sizes = [2, 2], strides = [1, 1]}
      : vector<3x4xi64> to vector<2x2xi64>
  vector.print %ss : vector<2x2xi64>
  %small = arith.constant dense<[[-1, -2], [-3, -4]]> : vector<2x2xi64>
  %is = vector.insert_strided_slice %small, %big {offsets = [0, 2], strides = [1, 1]}
      : vector<2x2xi64> into vector<3x4xi64>
  vector.print %is : vector<3x4xi64>
  %m23 = vector.constant_mask [1, 2] : vector<2x3xi1>
  %sel = arith.select %m23, %b2, %b3 : vector<2x3xi1>, vector<2x3xf32>
  vector.print %sel : vector<2x3xf32>
  %a = arith.constant dense<[1, 2, 3]> : vector<3xi16>
  %z = arith.constant dense<[7, 8, 9]> : vector<3xi16>
  %il = vector.interleave %a, %z : vector<3xi16> -> vector<6xi16>
  vector.print %il : vector<6xi16>
  %fma = vector.fma %sum, %b2, %b3 : vector<2x3xf32>
  vector.print %fma : vector<2x3xf32>
  return
}
