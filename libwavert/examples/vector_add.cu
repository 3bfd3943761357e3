// Source of vector_add.ptx: nvcc -arch=sm_90 -ptx vector_add.cu -o vector_add.ptx
extern "C" __global__ void vector_add(const float *a, const float *b, float *c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}
