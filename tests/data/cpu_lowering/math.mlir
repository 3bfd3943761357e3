// math ops with an LLVM intrinsic, with a libm function (scalars and vectors, f32 and f64)
// and with neither (integer powers), as upstream lowers them on a CPU.
func.func @main() {
  %x = arith.constant 0.75 : f32
  %y = arith.constant -2.0 : f32
  %d = arith.constant 1.25 : f64
  %e0 = math.exp %x : f32
  %e1 = math.log1p %x : f32
  %e2 = math.sqrt %d : f64
  %e3 = math.powf %x, %y : f32
  %e4 = math.fma %x, %y, %x : f32
  %e5 = math.copysign %x, %y : f32
  %e6 = math.floor %y : f32
  %e7 = math.roundeven %d : f64
  vector.print %e0 : f32
  vector.print %e1 : f32
  vector.print %e2 : f64
  vector.print %e3 : f32
  vector.print %e4 : f32
  vector.print %e5 : f32
  vector.print %e6 : f32
  vector.print %e7 : f64
  %l0 = math.tan %x : f32
  %l1 = math.atan2 %x, %y : f32
  %l2 = math.erf %d : f64
  %l3 = math.cbrt %y : f32
  %l4 = math.tanh %d : f64
  %l5 = math.acos %x : f32
  %l6 = math.sinh %d : f64
  %l7 = math.atan %y : f32
  vector.print %l0 : f32
  vector.print %l1 : f32
  vector.print %l2 : f64
  vector.print %l3 : f32
  vector.print %l4 : f64
  vector.print %l5 : f32
  vector.print %l6 : f64
  vector.print %l7 : f32
  %v = arith.constant dense<[0.1, 0.5, 1.0, 2.0]> : vector<4xf32>
  %vt = math.tan %v : vector<4xf32>
  %ve = math.erf %v : vector<4xf32>
  %vs = math.sin %v : vector<4xf32>
  %v2 = arith.constant dense<[[0.1, 0.2], [0.3, 0.4]]> : vector<2x2xf64>
  %vc = math.cosh %v2 : vector<2x2xf64>
  vector.print %vt : vector<4xf32>
  vector.print %ve : vector<4xf32>
  vector.print %vs : vector<4xf32>
  vector.print %vc : vector<2x2xf64>
  %b = arith.constant 3 : i32
  %n = arith.constant 5 : i32
  %ip = math.ipowi %b, %n : i32
  %neg = arith.constant -2 : i64
  %n3 = arith.constant 3 : i64
  %ip2 = math.ipowi %neg, %n3 : i64
  %fp = math.fpowi %d, %n : f64, i32
  %cl = math.ctlz %b : i32
  %ct = math.cttz %neg : i64
  %cp = math.ctpop %neg : i64
  %ab = math.absi %neg : i64
  vector.print %ip : i32
  vector.print %ip2 : i64
  vector.print %fp : f64
  vector.print %cl : i32
  vector.print %ct : i64
  vector.print %cp : i64
  vector.print %ab : i64
  %vi = arith.constant dense<[2, 3, -1]> : vector<3xi32>
  %ve2 = arith.constant dense<[10, 3, 7]> : vector<3xi32>
  %vip = math.ipowi %vi, %ve2 : vector<3xi32>
  vector.print %vip : vector<3xi32>
  return
}
