/*
 * vector_add.c — load a PTX or cubin file with libwavert, launch its `vector_add` kernel
 * (c[i] = a[i] + b[i], see vector_add.cu) on data it allocates, check the result, print PASS.
 * Without a GPU it prints libwavert's message and exits 77.
 *
 * Build against the installed library (see Makefile):
 *   cc -std=c11 vector_add.c $(pkg-config --cflags --libs libwavert) \
 *      -Wl,-rpath,$(pkg-config --variable=libdir_wavert libwavert) -o vector_add
 * Run:
 *   ./vector_add vector_add.ptx
 */
#include <stdio.h>
#include <stdlib.h>

#include <wavert.h>

#define N (1 << 20)

static int fail(const char *what) {
  fprintf(stderr, "%s: %s: %s\n", what, wavert_status_string(wavert_last_status()),
          wavert_last_error());
  return 1;
}

/* The whole file in a malloc'd buffer. */
static char *read_file(const char *path, size_t *out_size) {
  FILE *file = fopen(path, "rb");
  if (file == NULL) return NULL;
  char *data = NULL;
  if (fseek(file, 0, SEEK_END) == 0) {
    long size = ftell(file);
    if (size > 0 && fseek(file, 0, SEEK_SET) == 0 && (data = malloc((size_t)size)) != NULL &&
        fread(data, 1, (size_t)size, file) != (size_t)size) {
      free(data);
      data = NULL;
    }
    *out_size = (size_t)size;
  }
  fclose(file);
  return data;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s vector_add.ptx|vector_add.cubin\n", argv[0]);
    return 2;
  }
  wavert_device *device = NULL;
  if (wavert_device_get(kDLCUDA, 0, &device) != WAVERT_OK) {
    printf("no GPU: %s\n", wavert_last_error());
    return 77;
  }
  size_t size = 0;
  char *image = read_file(argv[1], &size);
  if (image == NULL) {
    perror(argv[1]);
    return 2;
  }
  wavert_module *module = NULL;
  wavert_function *kernel = NULL;
  if (wavert_module_load(device, image, size, &module) != WAVERT_OK) return fail("load");
  free(image);
  if (wavert_module_get_function(module, "vector_add", &kernel) != WAVERT_OK)
    return fail("get function");

  float *a = malloc(N * sizeof(float)), *b = malloc(N * sizeof(float)), *c = malloc(N * sizeof(float));
  if (a == NULL || b == NULL || c == NULL) return 2;
  for (int i = 0; i < N; ++i) a[i] = (float)i, b[i] = 0.5f * (float)i;
  void *da = NULL, *db = NULL, *dc = NULL;
  if (wavert_memory_alloc(device, N * sizeof(float), &da) != WAVERT_OK ||
      wavert_memory_alloc(device, N * sizeof(float), &db) != WAVERT_OK ||
      wavert_memory_alloc(device, N * sizeof(float), &dc) != WAVERT_OK)
    return fail("alloc");
  if (wavert_memory_copy(device, da, a, N * sizeof(float), NULL) != WAVERT_OK ||
      wavert_memory_copy(device, db, b, N * sizeof(float), NULL) != WAVERT_OK)
    return fail("copy to device");
  int32_t n = N;
  void *params[] = {&da, &db, &dc, &n};
  if (wavert_function_launch(kernel, (N + 255) / 256, 1, 1, 256, 1, 1, 0, NULL, params) != WAVERT_OK)
    return fail("launch");
  if (wavert_memory_copy(device, c, dc, N * sizeof(float), NULL) != WAVERT_OK)
    return fail("copy to host");
  for (int i = 0; i < N; ++i) {
    if (c[i] != a[i] + b[i]) {
      printf("FAIL: c[%d] = %g, expected %g\n", i, c[i], a[i] + b[i]);
      return 1;
    }
  }
  wavert_memory_free(device, da);
  wavert_memory_free(device, db);
  wavert_memory_free(device, dc);
  wavert_module_release(module);
  free(a);
  free(b);
  free(c);
  printf("PASS (%d elements)\n", N);
  return 0;
}
