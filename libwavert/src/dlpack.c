/*
 * dlpack.c — DLPack tensor -> MLIR memref descriptor, checking dtype, rank, static sizes and
 * layout against the memref type. Pure host code, no driver.
 */
#include <stdio.h>
#include <string.h>

#include "internal.h"

#define MAX_RANK 64

/* "float32 (code=2, bits=32, lanes=1)" into buf. */
static void describe_dtype(DLDataType dtype, char *buf, size_t size) {
  static const char *const names[] = {
      [kDLInt] = "int",
      [kDLUInt] = "uint",
      [kDLFloat] = "float",
      [kDLOpaqueHandle] = "handle",
      [kDLBfloat] = "bfloat",
      [kDLComplex] = "complex",
      [kDLBool] = "bool",
      [kDLFloat8_e3m4] = "float8_e3m4",
      [kDLFloat8_e4m3] = "float8_e4m3",
      [kDLFloat8_e4m3b11fnuz] = "float8_e4m3b11fnuz",
      [kDLFloat8_e4m3fn] = "float8_e4m3fn",
      [kDLFloat8_e4m3fnuz] = "float8_e4m3fnuz",
      [kDLFloat8_e5m2] = "float8_e5m2",
      [kDLFloat8_e5m2fnuz] = "float8_e5m2fnuz",
      [kDLFloat8_e8m0fnu] = "float8_e8m0fnu",
      [kDLFloat6_e2m3fn] = "float6_e2m3fn",
      [kDLFloat6_e3m2fn] = "float6_e3m2fn",
      [kDLFloat4_e2m1fn] = "float4_e2m1fn",
  };
  char name[48];
  if (dtype.code < sizeof(names) / sizeof(names[0])) {
    if (dtype.code <= kDLComplex) /* the bit width is part of the name */
      snprintf(name, sizeof(name), "%s%u", names[dtype.code], (unsigned)dtype.bits);
    else
      snprintf(name, sizeof(name), "%s", names[dtype.code]);
  } else {
    snprintf(name, sizeof(name), "unknown type code %u", (unsigned)dtype.code);
  }
  if (dtype.lanes != 1)
    snprintf(name + strlen(name), sizeof(name) - strlen(name), "x%u", (unsigned)dtype.lanes);
  snprintf(buf, size, "%s (code=%u, bits=%u, lanes=%u)", name, (unsigned)dtype.code,
           (unsigned)dtype.bits, (unsigned)dtype.lanes);
}

/* "[4, ?, 1]" into buf; WAVERT_DYNAMIC prints as '?'. */
static void describe_list(const int64_t *values, int32_t rank, char *buf, size_t size) {
  size_t used = 0;
  buf[0] = '\0';
  for (int32_t i = 0; i <= rank && used < size; ++i) {
    const char *prefix = i == 0 ? "[" : ", ";
    int n;
    if (i == rank)
      n = snprintf(buf + used, size - used, "%s]", i == 0 ? "[" : "");
    else if (values[i] == WAVERT_DYNAMIC)
      n = snprintf(buf + used, size - used, "%s?", prefix);
    else
      n = snprintf(buf + used, size - used, "%s%lld", prefix, (long long)values[i]);
    if (n < 0) break;
    used += (size_t)n;
  }
}

static int dtype_matches(DLDataType actual, const wavert_memref_type *type) {
  DLDataType expected = type->dtype;
  if (actual.bits != expected.bits || actual.lanes != expected.lanes) return 0;
  if (actual.code == expected.code) return 1;
  int actual_integer = actual.code == kDLInt || actual.code == kDLUInt;
  int expected_integer = expected.code == kDLInt || expected.code == kDLUInt;
  return (type->flags & WAVERT_MEMREF_SIGNLESS) && actual_integer && expected_integer;
}

wavert_status wavert_memref_from_dltensor(const DLTensor *tensor, const wavert_memref_type *type,
                                          int64_t *out_words) {
  if (tensor == NULL || type == NULL || out_words == NULL)
    return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT,
                         "wavert_memref_from_dltensor: tensor, type or out_words is NULL");
  char expected[256];
  char actual[256];
  if (!dtype_matches(tensor->dtype, type)) {
    describe_dtype(type->dtype, expected, sizeof(expected));
    describe_dtype(tensor->dtype, actual, sizeof(actual));
    return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT, "dtype mismatch: expected %s%s, got %s",
                         (type->flags & WAVERT_MEMREF_SIGNLESS) ? "signless " : "", expected,
                         actual);
  }
  int32_t rank = type->rank;
  if (tensor->ndim != rank)
    return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT, "rank mismatch: expected %d, got %d",
                         (int)rank, (int)tensor->ndim);
  if (rank < 0 || (rank > 0 && (tensor->shape == NULL || type->sizes == NULL)))
    return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT,
                         "wavert_memref_from_dltensor: negative rank or NULL shape/sizes");
  if (rank > MAX_RANK)
    return wavert__error(WAVERT_ERROR_UNSUPPORTED, "memref rank %d exceeds %d", (int)rank,
                         MAX_RANK);
  const int64_t *shape = tensor->shape;
  int empty = 0;
  for (int32_t i = 0; i < rank; ++i) {
    if (shape[i] < 0)
      return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT,
                           "tensor dimension %d has negative size %lld", (int)i,
                           (long long)shape[i]);
    empty |= shape[i] == 0;
  }
  for (int32_t i = 0; i < rank; ++i) {
    if (type->sizes[i] != WAVERT_DYNAMIC && type->sizes[i] != shape[i]) {
      describe_list(type->sizes, rank, expected, sizeof(expected));
      describe_list(shape, rank, actual, sizeof(actual));
      return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT,
                           "shape mismatch in dimension %d: expected %s, got %s", (int)i,
                           expected, actual);
    }
  }
  if (!empty && tensor->data == NULL)
    return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT,
                         "tensor data is NULL but the tensor is not empty");

  /* Canonical row-major strides, written for identity layouts and used when strides is NULL. */
  int64_t compact[MAX_RANK];
  for (int64_t i = rank - 1, running = 1; i >= 0; --i) {
    compact[i] = running;
    running *= shape[i] > 0 ? shape[i] : 1;
  }
  const int64_t *strides = tensor->strides != NULL ? tensor->strides : compact;
  int strided = (type->flags & WAVERT_MEMREF_STRIDED) != 0;
  if (strided && rank > 0 && type->strides == NULL)
    return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT,
                         "wavert_memref_from_dltensor: strided layout without strides");
  if (!empty) {
    for (int32_t i = 0; i < rank; ++i) {
      if (shape[i] == 1) continue;
      int64_t want = strided ? type->strides[i] : compact[i];
      if (want != WAVERT_DYNAMIC && strides[i] != want) {
        describe_list(strided ? type->strides : compact, rank, expected, sizeof(expected));
        describe_list(strides, rank, actual, sizeof(actual));
        return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT,
                             strided ? "layout mismatch in dimension %d: expected strides %s, got %s"
                                     : "layout mismatch in dimension %d: the memref needs a compact "
                                       "row-major tensor (strides %s), got strides %s",
                             (int)i, expected, actual);
      }
    }
  }

  int64_t offset = type->offset == WAVERT_DYNAMIC ? 0 : type->offset;
  uint64_t element_bits = (uint64_t)tensor->dtype.bits * tensor->dtype.lanes;
  if ((offset * (int64_t)element_bits) % 8 != 0)
    return wavert__error(WAVERT_ERROR_UNSUPPORTED,
                         "static offset %lld of %llu-bit elements is not a whole byte",
                         (long long)offset, (unsigned long long)element_bits);
  uintptr_t data = (uintptr_t)tensor->data;
  out_words[0] = (int64_t)data;
  uintptr_t offset_bytes = (uintptr_t)(offset * (int64_t)element_bits / 8);
  out_words[1] = (int64_t)(data + tensor->byte_offset - offset_bytes);
  out_words[2] = offset;
  for (int32_t i = 0; i < rank; ++i) {
    out_words[3 + i] = shape[i];
    int64_t stride = strides[i];
    if (!strided)
      stride = compact[i];
    else if (empty && type->strides[i] != WAVERT_DYNAMIC)
      stride = type->strides[i];
    out_words[3 + rank + i] = stride;
  }
  return WAVERT_OK;
}
