// complex ops (f32 and f64) lowered through convert-complex-to-standard, printed as re, im.
func.func private @show32(%z: complex<f32>) {
  %re = complex.re %z : complex<f32>
  %im = complex.im %z : complex<f32>
  vector.print %re : f32
  vector.print %im : f32
  return
}
func.func private @show64(%z: complex<f64>) {
  %re = complex.re %z : complex<f64>
  %im = complex.im %z : complex<f64>
  vector.print %re : f64
  vector.print %im : f64
  return
}
func.func @main() {
  %a = complex.constant [1.5 : f32, -2.0 : f32] : complex<f32>
  %b = complex.constant [0.5 : f32, 0.25 : f32] : complex<f32>
  %add = complex.add %a, %b : complex<f32>
  %mul = complex.mul %a, %b : complex<f32>
  %div = complex.div %a, %b : complex<f32>
  %sqrt = complex.sqrt %a : complex<f32>
  %exp = complex.exp %b : complex<f32>
  %log = complex.log %a : complex<f32>
  %pow = complex.pow %a, %b : complex<f32>
  %tanh = complex.tanh %b : complex<f32>
  %conj = complex.conj %a : complex<f32>
  %neg = complex.neg %b : complex<f32>
  %rsqrt = complex.rsqrt %b : complex<f32>
  %sign = complex.sign %a : complex<f32>
  func.call @show32(%add) : (complex<f32>) -> ()
  func.call @show32(%mul) : (complex<f32>) -> ()
  func.call @show32(%div) : (complex<f32>) -> ()
  func.call @show32(%sqrt) : (complex<f32>) -> ()
  func.call @show32(%exp) : (complex<f32>) -> ()
  func.call @show32(%log) : (complex<f32>) -> ()
  func.call @show32(%pow) : (complex<f32>) -> ()
  func.call @show32(%tanh) : (complex<f32>) -> ()
  func.call @show32(%conj) : (complex<f32>) -> ()
  func.call @show32(%neg) : (complex<f32>) -> ()
  func.call @show32(%rsqrt) : (complex<f32>) -> ()
  func.call @show32(%sign) : (complex<f32>) -> ()
  %abs = complex.abs %a : complex<f32>
  %angle = complex.angle %a : complex<f32>
  vector.print %abs : f32
  vector.print %angle : f32
  %re = arith.constant -3.0 : f64
  %im = arith.constant 4.0 : f64
  %c = complex.create %re, %im : complex<f64>
  %c2 = complex.sin %c : complex<f64>
  %c3 = complex.cos %c : complex<f64>
  %c4 = complex.expm1 %c : complex<f64>
  %c5 = complex.log1p %c : complex<f64>
  %c6 = complex.tan %c : complex<f64>
  func.call @show64(%c2) : (complex<f64>) -> ()
  func.call @show64(%c3) : (complex<f64>) -> ()
  func.call @show64(%c4) : (complex<f64>) -> ()
  func.call @show64(%c5) : (complex<f64>) -> ()
  func.call @show64(%c6) : (complex<f64>) -> ()
  %abs64 = complex.abs %c : complex<f64>
  vector.print %abs64 : f64
  %eq = complex.eq %a, %a : complex<f32>
  %ne = complex.neq %a, %b : complex<f32>
  vector.print %eq : i1
  vector.print %ne : i1
  return
}
