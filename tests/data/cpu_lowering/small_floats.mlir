// Float types without an LLVM type (f4E2M1FN, f8E8M0FNU) extended and truncated, and bf16 /
// f16 arithmetic and conversions.
func.func @main() {
  %all = arith.constant dense<[0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                               -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]> : vector<16xf4E2M1FN>
  %wide = arith.extf %all : vector<16xf4E2M1FN> to vector<16xf32>
  vector.print %wide : vector<16xf32>
  %f16 = arith.extf %all : vector<16xf4E2M1FN> to vector<16xf16>
  vector.print %f16 : vector<16xf16>
  %s = arith.constant dense<[0.2, 0.3, 0.76, 1.25, 1.75, 2.5, 3.5, 5.0, 7.0, 100.0, -0.26, -5.5]> : vector<12xf32>
  %n = arith.truncf %s : vector<12xf32> to vector<12xf4E2M1FN>
  %back = arith.extf %n : vector<12xf4E2M1FN> to vector<12xf32>
  vector.print %back : vector<12xf32>
  %one = arith.constant 3.0 : f4E2M1FN
  %onew = arith.extf %one : f4E2M1FN to f64
  vector.print %onew : f64
  %e8 = arith.constant dense<[1.0, 2.0, 0.25, 1024.0]> : vector<4xf8E8M0FNU>
  %e8w = arith.extf %e8 : vector<4xf8E8M0FNU> to vector<4xf32>
  vector.print %e8w : vector<4xf32>
  %e8s = arith.constant dense<[4.0, 0.125, 4096.0]> : vector<3xf32>
  %e8n = arith.truncf %e8s : vector<3xf32> to vector<3xf8E8M0FNU>
  %e8b = arith.extf %e8n : vector<3xf8E8M0FNU> to vector<3xf32>
  vector.print %e8b : vector<3xf32>
  %h = arith.constant dense<[1.0, 2.5, -3.75]> : vector<3xbf16>
  %h2 = arith.mulf %h, %h : vector<3xbf16>
  vector.print %h2 : vector<3xbf16>
  %hw = arith.extf %h2 : vector<3xbf16> to vector<3xf32>
  vector.print %hw : vector<3xf32>
  %p = arith.constant 1.0009765625 : f16
  %q = arith.constant 3.0 : f16
  %pq = arith.divf %p, %q : f16
  vector.print %pq : f16
  %pt = arith.truncf %s : vector<12xf32> to vector<12xbf16>
  vector.print %pt : vector<12xbf16>
  return
}
