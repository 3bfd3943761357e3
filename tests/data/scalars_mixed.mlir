// every scalar of mixed sizes into one kernel (forces parameter padding):
// x = x * a + k;  y = y * b + (flag ? m : 0).  x and y have the same length.
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @mix(%x: memref<?xf32>, %y: memref<?xf64>, %a: f32, %b: f64, %k: i8, %m: i16,
                  %flag: i1, %n: index) kernel {
      %bid = gpu.block_id x
      %bdim = gpu.block_dim x
      %tid = gpu.thread_id x
      %t0 = arith.muli %bid, %bdim : index
      %i = arith.addi %t0, %tid : index
      %in = arith.cmpi ult, %i, %n : index
      scf.if %in {
        %xv = memref.load %x[%i] : memref<?xf32>
        %xa = arith.mulf %xv, %a : f32
        %kf = arith.sitofp %k : i8 to f32
        %xn = arith.addf %xa, %kf : f32
        memref.store %xn, %x[%i] : memref<?xf32>
        %yv = memref.load %y[%i] : memref<?xf64>
        %yb = arith.mulf %yv, %b : f64
        %mf = arith.sitofp %m : i16 to f64
        %zero = arith.constant 0.0 : f64
        %add = arith.select %flag, %mf, %zero : f64
        %yn = arith.addf %yb, %add : f64
        memref.store %yn, %y[%i] : memref<?xf64>
      }
      gpu.return
    }
  }
  func.func @main(%x: memref<?xf32>, %y: memref<?xf64>, %a: f32, %b: f64, %k: i8, %m: i16,
                  %flag: i1) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c256 = arith.constant 256 : index
    %n = memref.dim %x, %c0 : memref<?xf32>
    %g = arith.ceildivui %n, %c256 : index
    gpu.launch_func @kernels::@mix blocks in (%g, %c1, %c1) threads in (%c256, %c1, %c1)
        args(%x : memref<?xf32>, %y : memref<?xf64>, %a : f32, %b : f64, %k : i8, %m : i16,
             %flag : i1, %n : index)
    return
  }
}
