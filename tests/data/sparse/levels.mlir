// Loose compressed levels, and a trailing COO's coordinates as one array of structures or as
// one array per level (singleton(soa)), printed with sparse_tensor.print
// (tests/libwavert/test_sparse_levels.py). With enable-runtime-library=true the loose level
// is built by libwavert's storage from lexInsert entries (the conversion) and from buffers
// (assemble), and the COO's print reads sparseCoordinatesBuffer.
#Loose = #sparse_tensor.encoding<{ map = (i, j) -> (i : dense, j : loose_compressed) }>
#AoS = #sparse_tensor.encoding<{ map = (i, j) -> (i : compressed(nonunique), j : singleton) }>
#SoA = #sparse_tensor.encoding<{ map = (i, j) -> (i : compressed(nonunique), j : singleton(soa)) }>
func.func @main() {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %f0 = arith.constant 0.0 : f64
  %x = arith.constant dense<[[0.0, 7.0, 0.0, 0.0, 1.0],
                             [0.0, 0.0, 0.0, 0.0, 0.0],
                             [2.0, 0.0, 0.0, 3.0, 0.0]]> : tensor<3x5xf64>
  %loose = sparse_tensor.convert %x : tensor<3x5xf64> to tensor<3x5xf64, #Loose>
  sparse_tensor.print %loose : tensor<3x5xf64, #Loose>
  %aos = sparse_tensor.convert %x : tensor<3x5xf64> to tensor<3x5xf64, #AoS>
  sparse_tensor.print %aos : tensor<3x5xf64, #AoS>
  %soa = sparse_tensor.convert %x : tensor<3x5xf64> to tensor<3x5xf64, #SoA>
  sparse_tensor.print %soa : tensor<3x5xf64, #SoA>

  // Row 0 is the segment [4, 6), row 1 [0, 1), row 2 empty; entries 1..3 are a hole.
  %pos = arith.constant dense<[4, 6, 0, 1, 6, 6]> : tensor<6xindex>
  %crd = arith.constant dense<[4, 1, 1, 1, 0, 2]> : tensor<6xindex>
  %val = arith.constant dense<[5.0, -1.0, -1.0, -1.0, 6.0, 8.0]> : tensor<6xf64>
  %s = sparse_tensor.assemble (%pos, %crd), %val : (tensor<6xindex>, tensor<6xindex>), tensor<6xf64> to tensor<3x5xf64, #Loose>
  %n = sparse_tensor.number_of_entries %s : tensor<3x5xf64, #Loose>
  vector.print %n : index
  %sum = sparse_tensor.foreach in %s init(%f0) : tensor<3x5xf64, #Loose>, f64 -> f64 do {
  ^bb0(%i: index, %j: index, %v: f64, %acc: f64):
    vector.print %i : index
    vector.print %j : index
    vector.print %v : f64
    %next = arith.addf %acc, %v : f64
    sparse_tensor.yield %next : f64
  }
  vector.print %sum : f64
  %d = sparse_tensor.convert %s : tensor<3x5xf64, #Loose> to tensor<3x5xf64>
  %r = vector.transfer_read %d[%c0, %c0], %f0 : tensor<3x5xf64>, vector<3x5xf64>
  vector.print %r : vector<3x5xf64>
  return
}
