// Device buffers without a tensor framework: host functions that allocate GPU memory
// (gpu.alloc) and return it, and copy it back to host memory. pywave hands each returned
// memref to Python as a pywave Memref that owns its memory and exports it through DLPack:
// a device one can be passed to any compiled function, a host one read with
// numpy.from_dlpack. Used by examples/vector_add.py when no framework is installed.
module attributes {gpu.container_module} {
  gpu.module @fill {
    // m[i] = scale * i
    gpu.func @ramp(%m: memref<?xf32>, %scale: f32, %n: index) kernel {
      %bid = gpu.block_id x
      %bdim = gpu.block_dim x
      %tid = gpu.thread_id x
      %t0 = arith.muli %bid, %bdim : index
      %i = arith.addi %t0, %tid : index
      %in = arith.cmpi ult, %i, %n : index
      scf.if %in {
        %ii = arith.index_cast %i : index to i64
        %fi = arith.uitofp %ii : i64 to f32
        %v = arith.mulf %fi, %scale : f32
        memref.store %v, %m[%i] : memref<?xf32>
      }
      gpu.return
    }
  }
  // A new device buffer of n floats holding scale * i at index i.
  func.func @ramp(%n: index, %scale: f32) -> memref<?xf32> {
    %c1 = arith.constant 1 : index
    %c256 = arith.constant 256 : index
    %m = gpu.alloc (%n) : memref<?xf32>
    %g = arith.ceildivui %n, %c256 : index
    gpu.launch_func @fill::@ramp blocks in (%g, %c1, %c1) threads in (%c256, %c1, %c1)
        args(%m : memref<?xf32>, %scale : f32, %n : index)
    return %m : memref<?xf32>
  }
  // A new device buffer of n floats (contents undefined).
  func.func @empty(%n: index) -> memref<?xf32> {
    %m = gpu.alloc (%n) : memref<?xf32>
    return %m : memref<?xf32>
  }
  // A host copy of a device buffer (the copy waits for the work before it).
  func.func @to_host(%d: memref<?xf32>) -> memref<?xf32> {
    %c0 = arith.constant 0 : index
    %n = memref.dim %d, %c0 : memref<?xf32>
    %h = memref.alloc (%n) : memref<?xf32>
    gpu.memcpy %h, %d : memref<?xf32>, memref<?xf32>
    return %h : memref<?xf32>
  }
}
