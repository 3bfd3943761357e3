/* Ranked memref descriptors in MLIR's layout (allocated and aligned pointers, offset, sizes,
 * strides; sizes and strides in elements), for tests that build them by hand. */
#ifndef WAVERT_TEST_MEMREF_TYPES_H
#define WAVERT_TEST_MEMREF_TYPES_H

#include <stdint.h>

typedef struct {
  void *allocated, *aligned;
  int64_t offset, sizes[1], strides[1];
} memref1;
typedef struct {
  void *allocated, *aligned;
  int64_t offset, sizes[2], strides[2];
} memref2;
typedef struct {
  void *allocated, *aligned;
  int64_t offset, sizes[3], strides[3];
} memref3;

#endif
