// Contractions, outer products and reductions (vector-to-llvm's lowering patterns).
#mk = affine_map<(m, n, k) -> (m, k)>
#kn = affine_map<(m, n, k) -> (k, n)>
#mn = affine_map<(m, n, k) -> (m, n)>
#dot_a = affine_map<(i) -> (i)>
#dot_r = affine_map<(i) -> ()>
func.func @main() {
  %a = arith.constant dense<[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]> : vector<2x3xf32>
  %b = arith.constant dense<[[1.0, 0.5], [-1.0, 2.0], [0.25, 3.0]]> : vector<3x2xf32>
  %acc = arith.constant dense<[[100.0, 200.0], [300.0, 400.0]]> : vector<2x2xf32>
  %mm = vector.contract {indexing_maps = [#mk, #kn, #mn],
                         iterator_types = ["parallel", "parallel", "reduction"],
                         kind = #vector.kind<add>} %a, %b, %acc
      : vector<2x3xf32>, vector<3x2xf32> into vector<2x2xf32>
  vector.print %mm : vector<2x2xf32>
  %ia = arith.constant dense<[3, -4, 5, 6]> : vector<4xi32>
  %ib = arith.constant dense<[2, 7, -1, 10]> : vector<4xi32>
  %z = arith.constant 1000 : i32
  %dot = vector.contract {indexing_maps = [#dot_a, #dot_a, #dot_r],
                          iterator_types = ["reduction"], kind = #vector.kind<add>}
      %ia, %ib, %z : vector<4xi32>, vector<4xi32> into i32
  vector.print %dot : i32
  %x = arith.constant dense<[1.5, -2.0]> : vector<2xf64>
  %y = arith.constant dense<[2.0, 4.0, 8.0]> : vector<3xf64>
  %op = vector.outerproduct %x, %y : vector<2xf64>, vector<3xf64>
  vector.print %op : vector<2x3xf64>
  %opacc = vector.outerproduct %x, %y, %op {kind = #vector.kind<maxnumf>} : vector<2xf64>, vector<3xf64>
  vector.print %opacc : vector<2x3xf64>
  %s = arith.constant 3.0 : f64
  %axpy = vector.outerproduct %x, %s : vector<2xf64>, f64
  vector.print %axpy : vector<2xf64>
  %r = vector.reduction <add>, %ia : vector<4xi32> into i32
  vector.print %r : i32
  %rmax = vector.reduction <maxsi>, %ib : vector<4xi32> into i32
  vector.print %rmax : i32
  %rmul = vector.reduction <mul>, %y : vector<3xf64> into f64
  vector.print %rmul : f64
  %row0 = arith.constant dense<[0.5, -0.5]> : vector<2xf32>
  %col0 = arith.constant dense<[2.0, 2.0, 2.0]> : vector<3xf32>
  %mr = vector.multi_reduction <add>, %a, %row0 [1] : vector<2x3xf32> to vector<2xf32>
  vector.print %mr : vector<2xf32>
  %mr0 = vector.multi_reduction <minimumf>, %a, %col0 [0] : vector<2x3xf32> to vector<3xf32>
  vector.print %mr0 : vector<3xf32>
  return
}
