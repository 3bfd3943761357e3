// linalg on memrefs (convert-linalg-to-loops): fill, matmul, a generic with a reduction,
// transpose; printed with printMemrefF32.
#id = affine_map<(i, j) -> (i, j)>
#row = affine_map<(i, j) -> (i)>
func.func private @printMemrefF32(memref<*xf32>)
func.func @main() {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %a = memref.alloc() : memref<2x3xf32>
  %b = memref.alloc() : memref<3x4xf32>
  %c = memref.alloc() : memref<2x4xf32>
  %one = arith.constant 1.5 : f32
  %two = arith.constant -0.5 : f32
  %zero = arith.constant 0.0 : f32
  linalg.fill ins(%one : f32) outs(%a : memref<2x3xf32>)
  linalg.fill ins(%two : f32) outs(%b : memref<3x4xf32>)
  %x = arith.constant 4.0 : f32
  memref.store %x, %a[%c1, %c0] : memref<2x3xf32>
  memref.store %x, %b[%c0, %c1] : memref<3x4xf32>
  linalg.fill ins(%zero : f32) outs(%c : memref<2x4xf32>)
  linalg.matmul ins(%a, %b : memref<2x3xf32>, memref<3x4xf32>) outs(%c : memref<2x4xf32>)
  %cu = memref.cast %c : memref<2x4xf32> to memref<*xf32>
  call @printMemrefF32(%cu) : (memref<*xf32>) -> ()
  %s = memref.alloc() : memref<2xf32>
  linalg.fill ins(%zero : f32) outs(%s : memref<2xf32>)
  linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
      ins(%c : memref<2x4xf32>) outs(%s : memref<2xf32>) {
  ^bb0(%in: f32, %acc: f32):
    %sq = arith.mulf %in, %in : f32
    %r = arith.addf %sq, %acc : f32
    linalg.yield %r : f32
  }
  %su = memref.cast %s : memref<2xf32> to memref<*xf32>
  call @printMemrefF32(%su) : (memref<*xf32>) -> ()
  %t = memref.alloc() : memref<4x2xf32>
  linalg.transpose ins(%c : memref<2x4xf32>) outs(%t : memref<4x2xf32>) permutation = [1, 0]
  %tu = memref.cast %t : memref<4x2xf32> to memref<*xf32>
  call @printMemrefF32(%tu) : (memref<*xf32>) -> ()
  memref.dealloc %a : memref<2x3xf32>
  memref.dealloc %b : memref<3x4xf32>
  memref.dealloc %c : memref<2x4xf32>
  memref.dealloc %s : memref<2xf32>
  memref.dealloc %t : memref<4x2xf32>
  return
}
