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

/* The element type and rank against the memref type, and the rank within MAX_RANK. */
static wavert_status check_dtype_and_rank(const DLTensor *tensor, const wavert_memref_type *type) {
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
  return WAVERT_OK;
}

/* The shape: no negative size, the memref's static sizes, data unless empty (*out_empty: a
 * dimension of size 0). */
static wavert_status check_shape(const DLTensor *tensor, const wavert_memref_type *type,
                                 int *out_empty) {
  const int32_t rank = type->rank;
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
      char expected[256];
      char actual[256];
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
  *out_empty = empty;
  return WAVERT_OK;
}

/* Canonical row-major strides of `shape` into compact[rank] (written for identity layouts and
 * used when the tensor has no strides). A shape whose element count does not fit int64 has
 * none: the result is then the dimension whose stride overflowed (its compact entry and those
 * before it are 0), else -1. */
static int32_t compact_strides(const int64_t *shape, int32_t rank, int64_t *compact) {
  int32_t wrapped = -1;
  int64_t running = 1;
  for (int32_t i = rank - 1; i >= 0; --i) {
    compact[i] = wrapped >= 0 ? 0 : running;
    if (wrapped < 0 && i > 0 &&
        __builtin_mul_overflow(running, shape[i] > 0 ? shape[i] : 1, &running))
      wrapped = i - 1;
  }
  return wrapped;
}

/* The tensor's strides (`strides`: its own, or compact ones) against the layout: any the
 * strided layout allows, else compact row-major; size-1 dimensions and empty tensors pass. */
static wavert_status check_layout(const DLTensor *tensor, const wavert_memref_type *type,
                                  const int64_t *strides, const int64_t *compact, int32_t wrapped,
                                  int empty) {
  const int32_t rank = type->rank;
  const int strided = (type->flags & WAVERT_MEMREF_STRIDED) != 0;
  char expected[256];
  char actual[256];
  if (wrapped >= 0 && (tensor->strides == NULL || !strided)) {
    describe_list(tensor->shape, rank, actual, sizeof(actual));
    return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT,
                         "tensor of shape %s: the row-major stride of dimension %d overflows "
                         "int64 (limit %lld elements)",
                         actual, (int)wrapped, (long long)INT64_MAX);
  }
  if (strided && rank > 0 && type->strides == NULL)
    return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT,
                         "wavert_memref_from_dltensor: strided layout without strides");
  if (empty)
    return WAVERT_OK;
  for (int32_t i = 0; i < rank; ++i) {
    if (tensor->shape[i] == 1) continue;
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
  return WAVERT_OK;
}

/* The elements of a non-empty tensor span [low, high] (in elements from the first one); that
 * span in bytes must fit int64, as generated code indexes it with int64 arithmetic. */
static wavert_status check_extent(const int64_t *shape, const int64_t *strides, int32_t rank,
                                  uint64_t element_bits) {
  int64_t low = 0, high = 0, bytes = 0;
  int overflow = 0;
  for (int32_t i = 0; i < rank && !overflow; ++i) {
    int64_t reach = 0;
    overflow = __builtin_mul_overflow(shape[i] - 1, strides[i], &reach) ||
               __builtin_add_overflow(reach < 0 ? low : high, reach, reach < 0 ? &low : &high);
  }
  int64_t elements = 0;
  /* bytes = ceil(elements * element_bits / 8), without overflowing on the way. */
  overflow = overflow || __builtin_sub_overflow(high, low, &elements) ||
             __builtin_add_overflow(elements, 1, &elements) ||
             __builtin_mul_overflow(elements / 8, element_bits, &bytes) ||
             __builtin_add_overflow(bytes, ((uint64_t)(elements % 8) * element_bits + 7) / 8,
                                    &bytes);
  if (!overflow)
    return WAVERT_OK;
  char expected[256];
  char actual[256];
  describe_list(shape, rank, expected, sizeof(expected));
  describe_list(strides, rank, actual, sizeof(actual));
  return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT,
                       "tensor of shape %s and strides %s (%llu-bit elements): its byte "
                       "extent overflows int64 (limit %lld bytes)",
                       expected, actual, (unsigned long long)element_bits, (long long)INT64_MAX);
}

/* The descriptor's offset (the static one, or 0) and aligned pointer: data + byte_offset
 * less the static offset in bytes. The first element's address must not wrap; the base below
 * it may (NULL data of an empty tensor with a static offset): generated code adds the offset
 * back modulo 2^64, as the unchecked subtraction here. */
static wavert_status offset_and_aligned(const DLTensor *tensor, const wavert_memref_type *type,
                                        uint64_t element_bits, int64_t *out_offset,
                                        uint64_t *out_aligned) {
  int64_t offset = type->offset == WAVERT_DYNAMIC ? 0 : type->offset;
  int64_t offset_bits = 0;
  if (__builtin_mul_overflow(offset, element_bits, &offset_bits))
    return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT,
                         "static offset %lld of %llu-bit elements: its size in bits overflows "
                         "int64 (limit %lld)",
                         (long long)offset, (unsigned long long)element_bits, (long long)INT64_MAX);
  if (offset_bits % 8 != 0)
    return wavert__error(WAVERT_ERROR_UNSUPPORTED,
                         "static offset %lld of %llu-bit elements is not a whole byte",
                         (long long)offset, (unsigned long long)element_bits);
  uint64_t data = (uintptr_t)tensor->data;
  uint64_t first = 0;
  if (__builtin_add_overflow(data, tensor->byte_offset, &first))
    return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT,
                         "tensor data 0x%llx + byte_offset %llu overflows a 64-bit address",
                         (unsigned long long)data, (unsigned long long)tensor->byte_offset);
  *out_offset = offset;
  *out_aligned = first - (uint64_t)(offset_bits / 8);
  return WAVERT_OK;
}

wavert_status wavert_memref_from_dltensor(const DLTensor *tensor, const wavert_memref_type *type,
                                          int64_t *out_words) {
  if (tensor == NULL || type == NULL || out_words == NULL)
    return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT,
                         "wavert_memref_from_dltensor: tensor, type or out_words is NULL");
  int empty = 0;
  wavert_status status = check_dtype_and_rank(tensor, type);
  if (status == WAVERT_OK)
    status = check_shape(tensor, type, &empty);
  if (status != WAVERT_OK)
    return status;
  const int32_t rank = type->rank;
  int64_t compact[MAX_RANK];
  const int32_t wrapped = compact_strides(tensor->shape, rank, compact);
  const int64_t *strides = tensor->strides != NULL ? tensor->strides : compact;
  status = check_layout(tensor, type, strides, compact, wrapped, empty);
  const uint64_t element_bits = (uint64_t)tensor->dtype.bits * tensor->dtype.lanes;
  if (status == WAVERT_OK && !empty)
    status = check_extent(tensor->shape, strides, rank, element_bits);
  int64_t offset = 0;
  uint64_t aligned = 0;
  if (status == WAVERT_OK)
    status = offset_and_aligned(tensor, type, element_bits, &offset, &aligned);
  if (status != WAVERT_OK)
    return status;
  const int strided = (type->flags & WAVERT_MEMREF_STRIDED) != 0;
  out_words[0] = (int64_t)(uintptr_t)tensor->data;
  out_words[1] = (int64_t)aligned;
  out_words[2] = offset;
  for (int32_t i = 0; i < rank; ++i) {
    out_words[3 + i] = tensor->shape[i];
    int64_t stride = strides[i];
    if (!strided)
      stride = compact[i];
    else if (empty && type->strides[i] != WAVERT_DYNAMIC)
      stride = type->strides[i];
    out_words[3 + rank + i] = stride;
  }
  return WAVERT_OK;
}
