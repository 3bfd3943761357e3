/*
 * sparse_storage.c — the tensor storage of MLIR's sparse runtime (wavert_sparse_storage.h),
 * which the sparsifier calls with enable-runtime-library=true: tensors of dense and compressed
 * levels, made empty (then filled by lexInsert and finished by endLexInsert) or from a file
 * reader, and read through positions / coordinates / values buffers. A loose compressed level
 * is a compressed one whose positions are a (start, end) pair per parent position instead of
 * shared boundaries, so its segments may leave holes in its coordinates and the values.
 *
 * Entries are gathered as level coordinates and values, sorted (a stable merge sort), and
 * the levels are built from them: a dense level of size n gives each parent position n
 * positions; a compressed level appends each distinct coordinate under its parent and ends
 * the parent's segment in its positions. Every count and every product of sizes is checked,
 * and the buffers are bounded (MAX_ELEMENTS); each error is recorded as the reader's are.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "sparse_internal.h"
#include "wavert_sparse_storage.h"

#define MAX_RANK WAVERT__SPARSE_MAX_RANK
#define MAX_ELEMENTS (UINT64_C(1) << 31) /* per buffer */
#define fail wavert__sparse_fail

/* MLIR 22's LevelType formats (bits 16-31; 0x20000 is batch, 0x100000 loose compressed,
 * 0x200000 n:m); bit 0 = non-unique, bit 1 = non-ordered, bit 2 = SoA (a singleton level of
 * a COO whose coordinates are kept apart from the other levels': as every level here). */
enum {
  LEVEL_DENSE = 0x10000,
  LEVEL_COMPRESSED = 0x40000,
  LEVEL_SINGLETON = 0x80000,
  LEVEL_LOOSE = 0x100000
};
#define LEVEL_FORMAT(type) ((type) & ~UINT64_C(0xffff))
#define LEVEL_NONUNIQUE(type) (((type) & 1) != 0)
#define LEVEL_SOA(type) (((type) & 4) != 0)
/* A level with positions: compressed or loose compressed. */
#define LEVEL_POSITIONED(type) (LEVEL_FORMAT(type) == LEVEL_COMPRESSED || \
                                LEVEL_FORMAT(type) == LEVEL_LOOSE)
/* The positions a level with them has under `parents` parent positions (no overflow: parents
 * is at most MAX_ELEMENTS). */
#define LEVEL_POSITIONS(type, parents) \
  (LEVEL_FORMAT(type) == LEVEL_LOOSE ? 2 * (parents) : (parents) + 1)
/* MLIR 22's Action (mlir/ExecutionEngine/SparseTensor/Enums.h): every one. */
enum { ACTION_EMPTY = 0, ACTION_FROM_READER = 1, ACTION_PACK = 2, ACTION_SORT_COO_IN_PLACE = 3 };

/* A growable array of `size`-byte elements. */
typedef struct buffer {
  char *data;
  uint64_t count, capacity;
} buffer;

typedef struct tensor {
  uint64_t dim_rank, lvl_rank;
  uint64_t dim_sizes[MAX_RANK], lvl_sizes[MAX_RANK], lvl_types[MAX_RANK];
  size_t pos_bytes, crd_bytes, val_bytes;
  uint32_t value_type;
  bool built;          /* the levels hold the entries; no more insertions */
  buffer pending_crd;  /* lexInsert's entries: lvl_rank uint64_t coordinates each */
  buffer pending_val;  /* and their values */
  buffer positions[MAX_RANK], coordinates[MAX_RANK], values;
  buffer coo_coordinates; /* sparseCoordinatesBuffer's copy: a trailing COO's, interleaved */
} tensor;

/* ---- buffers ----------------------------------------------------------------------------- */

/* Room for `count` elements of `size` bytes: 1, or 0 (error reported by `function`). */
static int reserve(buffer *b, uint64_t count, size_t size, const char *function) {
  if (count <= b->capacity) return 1;
  if (count > MAX_ELEMENTS) {
    fail(WAVERT_ERROR_INVALID_ARGUMENT, "%s: %" PRIu64 " elements exceed libwavert's limit of %"
         PRIu64 " per sparse tensor buffer", function, count, MAX_ELEMENTS);
    return 0;
  }
  uint64_t capacity = b->capacity < 16 ? 16 : b->capacity;
  while (capacity < count) capacity *= 2; /* <= 2^32: no overflow */
  char *data = realloc(b->data, (size_t)capacity * size);
  if (data == NULL) {
    fail(WAVERT_ERROR_OUT_OF_MEMORY, "%s: out of host memory (%" PRIu64 " bytes)", function,
         capacity * (uint64_t)size);
    return 0;
  }
  b->data = data;
  b->capacity = capacity;
  return 1;
}

static int push(buffer *b, const void *element, size_t size, const char *function) {
  if (!reserve(b, b->count + 1, size, function)) return 0;
  memcpy(b->data + b->count * size, element, size);
  b->count += 1;
  return 1;
}

/* Grow to `count` elements, the new ones zero. */
static int grow_zero(buffer *b, uint64_t count, size_t size, const char *function) {
  if (count <= b->count) return 1;
  if (!reserve(b, count, size, function)) return 0;
  memset(b->data + b->count * size, 0, (size_t)(count - b->count) * size);
  b->count = count;
  return 1;
}

/* An unsigned integer of `bytes` bytes. */
static void put_uint(char *at, size_t bytes, uint64_t value) {
  switch (bytes) {
    case 8: memcpy(at, &value, 8); break;
    case 4: { uint32_t v = (uint32_t)value; memcpy(at, &v, 4); break; }
    case 2: { uint16_t v = (uint16_t)value; memcpy(at, &v, 2); break; }
    default: { uint8_t v = (uint8_t)value; memcpy(at, &v, 1); break; }
  }
}

/* The unsigned integer of `bytes` bytes at `at`. */
static uint64_t get_uint(const char *at, size_t bytes) {
  switch (bytes) {
    case 8: { uint64_t v; memcpy(&v, at, 8); return v; }
    case 4: { uint32_t v; memcpy(&v, at, 4); return v; }
    case 2: { uint16_t v; memcpy(&v, at, 2); return v; }
    default: return (uint8_t)*at;
  }
}

static uint64_t width_max(size_t bytes) {
  return bytes >= 8 ? UINT64_MAX : (UINT64_C(1) << (8 * bytes)) - 1;
}

/* Append the overhead value `value` (positions or coordinates of `bytes` bytes). */
static int push_uint(buffer *b, size_t bytes, uint64_t value, const char *what,
                     const char *function) {
  if (value > width_max(bytes)) {
    fail(WAVERT_ERROR_INVALID_ARGUMENT, "%s: %s %" PRIu64 " does not fit the tensor's %zu-byte "
         "%s", function, what, value, bytes, what);
    return 0;
  }
  char element[8];
  put_uint(element, bytes, value);
  return push(b, element, bytes, function);
}

static void free_tensor(tensor *t) {
  free(t->pending_crd.data);
  free(t->pending_val.data);
  for (uint64_t l = 0; l < MAX_RANK; ++l) {
    free(t->positions[l].data);
    free(t->coordinates[l].data);
  }
  free(t->values.data);
  free(t->coo_coordinates.data);
  free(t);
}

/* ---- memrefs ----------------------------------------------------------------------------- */

/* `count` index elements of a 1-D memref (any stride), copied into out[], after checking its
 * size is `count`: 1, or 0 (error reported). */
static int read_index_memref(const char *function, const char *what,
                             const wavert_memref_1d *m, uint64_t count, uint64_t *out) {
  if (m == NULL || m->sizes[0] < 0 || (uint64_t)m->sizes[0] != count ||
      (count > 0 && (m->aligned == NULL || m->offset < 0))) {
    fail(WAVERT_ERROR_INVALID_ARGUMENT, "%s: the %s memref is not %" PRIu64 " index elements",
         function, what, count);
    return 0;
  }
  const uint64_t *data = (const uint64_t *)m->aligned + m->offset;
  for (uint64_t i = 0; i < count; ++i) memcpy(&out[i], data + (int64_t)i * m->strides[0], 8);
  return 1;
}

/* The rank a memref's size gives, if within 1..MAX_RANK; else 0 (error reported). */
static uint64_t rank_of(const char *function, const char *what,
                        const wavert_memref_1d *m) {
  if (m == NULL || m->sizes[0] < 1 || m->sizes[0] > MAX_RANK) {
    fail(WAVERT_ERROR_INVALID_ARGUMENT, "%s: the %s memref must have 1..%d elements", function,
         what, MAX_RANK);
    return 0;
  }
  return (uint64_t)m->sizes[0];
}

static size_t overhead_bytes(uint32_t type) {
  static const size_t bytes[] = {8, 8, 4, 2, 1}; /* index, u64, u32, u16, u8 */
  return type <= 4 ? bytes[type] : 0;
}

/* ---- building the levels ----------------------------------------------------------------- */

typedef struct builder {
  tensor *t;
  const uint64_t *crd; /* entries' level coordinates */
  const char *val;     /* entries' values */
  const uint64_t *order;
  const char *function;
} builder;

/* Entries order[lo..hi) share their coordinates of the levels above `l` and sit at position
 * `parent` of level l - 1 (0 for the root). */
static int build_level(const builder *b, uint64_t lo, uint64_t hi, uint64_t l, uint64_t parent) {
  tensor *t = b->t;
  if (l == t->lvl_rank) {
    if (hi - lo > 1) {
      fail(WAVERT_ERROR_INVALID_ARGUMENT, "%s: %" PRIu64 " entries at the same coordinates",
           b->function, hi - lo);
      return 0;
    }
    if (!grow_zero(&t->values, parent + 1, t->val_bytes, b->function)) return 0;
    memcpy(t->values.data + parent * t->val_bytes, b->val + b->order[lo] * t->val_bytes,
           t->val_bytes);
    return 1;
  }
  const uint64_t format = LEVEL_FORMAT(t->lvl_types[l]);
  const bool dense = format == LEVEL_DENSE, compressed = format == LEVEL_COMPRESSED;
  const bool loose = format == LEVEL_LOOSE;
  buffer *positions = &t->positions[l], *coordinates = &t->coordinates[l];
  if (compressed || loose) { /* the segments of the parents before this one are empty */
    /* Compressed: positions[p] starts parent p's segment; loose: positions[2p], and this
     * parent's start is pushed here too. */
    while (positions->count < (loose ? 2 * parent + 1 : parent + 1))
      if (!push_uint(positions, t->pos_bytes, coordinates->count, "position", b->function))
        return 0;
  } else if (!dense && hi - lo > 1 && !LEVEL_NONUNIQUE(t->lvl_types[l])) {
    fail(WAVERT_ERROR_INVALID_ARGUMENT, "%s: %" PRIu64 " entries under one position of "
         "singleton level %" PRIu64, b->function, hi - lo, l);
    return 0;
  }
  for (uint64_t a = lo; a < hi;) {
    const uint64_t c = b->crd[b->order[a] * t->lvl_rank + l];
    uint64_t e = a + 1;
    /* A unique level stores each coordinate once; a non-unique one each entry. */
    if (!LEVEL_NONUNIQUE(t->lvl_types[l]))
      while (e < hi && b->crd[b->order[e] * t->lvl_rank + l] == c) ++e;
    if (c >= t->lvl_sizes[l]) {
      fail(WAVERT_ERROR_INVALID_ARGUMENT, "%s: coordinate %" PRIu64 " of level %" PRIu64
           " is not below its size %" PRIu64, b->function, c, l, t->lvl_sizes[l]);
      return 0;
    }
    uint64_t position;
    if (dense) {
      if (__builtin_mul_overflow(parent, t->lvl_sizes[l], &position) ||
          __builtin_add_overflow(position, c, &position) || position >= MAX_ELEMENTS) {
        fail(WAVERT_ERROR_INVALID_ARGUMENT, "%s: level %" PRIu64 " has more than %" PRIu64
             " positions", b->function, l, MAX_ELEMENTS);
        return 0;
      }
    } else {
      if (!push_uint(coordinates, t->crd_bytes, c, "coordinate", b->function)) return 0;
      position = coordinates->count - 1;
    }
    if (!build_level(b, a, e, l + 1, position)) return 0;
    a = e;
  }
  if ((compressed || loose) &&
      !push_uint(positions, t->pos_bytes, coordinates->count, "position", b->function))
    return 0;
  return 1;
}

/* Stable merge sort of order[0..n) by the entries' level coordinates (scratch: n more). */
static void sort_entries(const tensor *t, const uint64_t *crd, uint64_t *order, uint64_t *scratch,
                         uint64_t n) {
  for (uint64_t width = 1; width < n; width *= 2) {
    for (uint64_t lo = 0; lo < n; lo += 2 * width) {
      uint64_t mid = lo + width < n ? lo + width : n, hi = lo + 2 * width < n ? lo + 2 * width : n;
      uint64_t i = lo, j = mid, k = lo;
      while (i < mid && j < hi) {
        const uint64_t *x = crd + order[i] * t->lvl_rank, *y = crd + order[j] * t->lvl_rank;
        int before = 1; /* x <= y: take x (stable) */
        for (uint64_t l = 0; l < t->lvl_rank; ++l)
          if (x[l] != y[l]) {
            before = x[l] < y[l];
            break;
          }
        scratch[k++] = before ? order[i++] : order[j++];
      }
      while (i < mid) scratch[k++] = order[i++];
      while (j < hi) scratch[k++] = order[j++];
    }
    memcpy(order, scratch, (size_t)n * sizeof(uint64_t));
  }
}

/* Build the levels from `n` entries (crd: lvl_rank coordinates each; val: values), then give
 * every level and the values their full length. 1, or 0 (error reported). */
static int build(tensor *t, const uint64_t *crd, const char *val, uint64_t n,
                 const char *function) {
  uint64_t *order = n > 0 ? malloc((size_t)n * 2 * sizeof(uint64_t)) : NULL;
  if (n > 0 && order == NULL) {
    fail(WAVERT_ERROR_OUT_OF_MEMORY, "%s: out of host memory", function);
    return 0;
  }
  for (uint64_t i = 0; i < n; ++i) order[i] = i;
  sort_entries(t, crd, order, order + n, n);
  const builder b = {t, crd, val, order, function};
  int ok = n == 0 || build_level(&b, 0, n, 0, 0);
  free(order);
  if (!ok) return 0;
  uint64_t count = 1; /* positions of the level above */
  for (uint64_t l = 0; l < t->lvl_rank; ++l) {
    if (LEVEL_FORMAT(t->lvl_types[l]) == LEVEL_SINGLETON) {
      count = t->coordinates[l].count; /* one per position above */
    } else if (t->lvl_types[l] == LEVEL_DENSE) {
      if (t->lvl_sizes[l] != 0 && count > MAX_ELEMENTS / t->lvl_sizes[l]) {
        fail(WAVERT_ERROR_INVALID_ARGUMENT, "%s: level %" PRIu64 " has more than %" PRIu64
             " positions", function, l, MAX_ELEMENTS);
        return 0;
      }
      count *= t->lvl_sizes[l];
    } else {
      buffer *positions = &t->positions[l];
      while (positions->count < LEVEL_POSITIONS(t->lvl_types[l], count))
        if (!push_uint(positions, t->pos_bytes, t->coordinates[l].count, "position", function))
          return 0;
      count = t->coordinates[l].count;
    }
  }
  if (!grow_zero(&t->values, count, t->val_bytes, function)) return 0;
  t->built = true;
  return 1;
}

/* ---- the ABI ----------------------------------------------------------------------------- */

static tensor *live_tensor(const char *function, void *handle) {
  if (handle == NULL || !wavert__handle_live(handle, WAVERT__HANDLE_SPARSE_TENSOR)) {
    fail(WAVERT_ERROR_INVALID_ARGUMENT, "%s: %p is not a live sparse tensor", function, handle);
    return NULL;
  }
  return handle;
}

/* A live tensor whose levels are built (building them from pending insertions first). When
 * that fails (error reported), the tensor is made empty, with its positions still of full
 * length, for code that reads on without an early return; NULL. */
static tensor *built_tensor(const char *function, void *handle) {
  tensor *t = live_tensor(function, handle);
  if (t == NULL || t->built) return t;
  if (build(t, (const uint64_t *)t->pending_crd.data, t->pending_val.data,
            t->pending_val.count, function))
    return t;
  for (uint64_t l = 0; l < t->lvl_rank; ++l) t->positions[l].count = t->coordinates[l].count = 0;
  t->values.count = t->pending_val.count = t->pending_crd.count = 0;
  (void)build(t, NULL, NULL, 0, function); /* sizes checked again; a second error is not kept */
  return NULL;
}

static int from_reader(tensor *t, void *reader, const wavert_memref_1d *dim2lvl_ref,
                       const char *function) {
  uint64_t rank, nse;
  const uint64_t *dims;
  if (!wavert__sparse_reader_header(function, reader, &rank, &dims, &nse)) return 0;
  if (rank != t->dim_rank) {
    fail(WAVERT_ERROR_INVALID_ARGUMENT, "%s: the file has rank %" PRIu64 "; the tensor %" PRIu64,
         function, rank, t->dim_rank);
    return 0;
  }
  for (uint64_t d = 0; d < rank; ++d)
    if (dims[d] != t->dim_sizes[d]) {
      fail(WAVERT_ERROR_INVALID_ARGUMENT, "%s: dimension %" PRIu64 " of the file has size %"
           PRIu64 "; the tensor %" PRIu64, function, d, dims[d], t->dim_sizes[d]);
      return 0;
    }
  /* nse is at most the file's size over 2 * rank (the reader's header check). */
  uint64_t crd_count = nse * t->lvl_rank;
  if (nse > MAX_ELEMENTS || crd_count > MAX_ELEMENTS) {
    fail(WAVERT_ERROR_INVALID_ARGUMENT, "%s: %" PRIu64 " entries exceed libwavert's limit",
         function, nse);
    return 0;
  }
  buffer crd = {0}, val = {0};
  int ok = reserve(&crd, crd_count ? crd_count : 1, 8, function) &&
           reserve(&val, nse ? nse : 1, t->val_bytes, function);
  if (ok) {
    wavert_memref_1d c = {crd.data, crd.data, 0, {(int64_t)crd_count}, {1}};
    wavert_memref_1d v = {val.data, val.data, 0, {(int64_t)nse}, {1}};
    wavert_memref_1d map = *dim2lvl_ref;
    ok = wavert__sparse_reader_read(reader, &map, &c, &v, 8, t->value_type, function) >= 0 &&
         build(t, (const uint64_t *)crd.data, val.data, nse, function);
  }
  free(crd.data);
  free(val.data);
  return ok;
}

/* Copy `count` elements of `size` bytes from `data` into `b` (its old content dropped). */
static int copy_in(buffer *b, const void *data, uint64_t count, size_t size,
                   const char *function) {
  b->count = 0;
  if (count == 0) return 1;
  if (!reserve(b, count, size, function)) return 0;
  memcpy(b->data, data, (size_t)count * size);
  b->count = count;
  return 1;
}

/* Action kPack (sparse_tensor.assemble): the levels and values copied from the caller's
 * buffers, as upstream's SparseTensorStorage constructor from level buffers reads them.
 * `buffers` holds one pointer per buffer, in order: for each compressed level its positions
 * then its coordinates; for a trailing COO (a non-unique compressed level followed by
 * singleton levels to the last) its positions and one array of structures of coordinates
 * (each entry's coordinates of those levels together); then the values. Dense levels take
 * no buffer. A compressed level of a parent of size n has n + 1 positions, a loose compressed
 * level 2n (a start and an end per parent position); in both the last position is the
 * level's number of coordinates; the values are as many as the last level's size. Unlike
 * upstream, which trusts them, compressed positions must not decrease, a loose segment must
 * not end before it starts or past the last position, and every coordinate must be below its
 * level's size. 1, or 0 (error reported). */
static int from_buffers(tensor *t, const intptr_t *buffers, const char *function) {
  if (buffers == NULL) {
    fail(WAVERT_ERROR_INVALID_ARGUMENT, "%s: action 2 (assemble) needs the level buffers; got "
         "NULL", function);
    return 0;
  }
  uint64_t parent = 1, next = 0; /* the size of the level above; the next buffer */
  for (uint64_t l = 0; l < t->lvl_rank; ++l) {
    const uint64_t type = t->lvl_types[l], format = LEVEL_FORMAT(type);
    if (format == LEVEL_DENSE) {
      if (t->lvl_sizes[l] != 0 && parent > MAX_ELEMENTS / t->lvl_sizes[l]) {
        fail(WAVERT_ERROR_INVALID_ARGUMENT, "%s: level %" PRIu64 " has more than %" PRIu64
             " positions", function, l, MAX_ELEMENTS);
        return 0;
      }
      parent *= t->lvl_sizes[l];
      continue;
    }
    if (format == LEVEL_SINGLETON) {
      fail(WAVERT_ERROR_UNSUPPORTED, "%s: assembling singleton level %" PRIu64 ", which does "
           "not follow a non-unique compressed level (upstream supports singleton levels only "
           "in a trailing COO)", function, l);
      return 0;
    }
    /* (Loose) compressed: a trailing COO when non-unique (the levels below: singletons). */
    const uint64_t width = LEVEL_NONUNIQUE(type) ? t->lvl_rank - l : 1;
    for (uint64_t k = l + 1; k < l + width; ++k)
      if (LEVEL_FORMAT(t->lvl_types[k]) != LEVEL_SINGLETON || LEVEL_SOA(t->lvl_types[k])) {
        fail(WAVERT_ERROR_UNSUPPORTED, "%s: level %" PRIu64 " follows the non-unique compressed "
             "level %" PRIu64 " but is not a singleton level of an array-of-structures COO (a "
             "trailing COO; singleton(soa) levels are not assembled)", function, k, l);
        return 0;
      }
    const char *pos = (const char *)buffers[next++], *crd = (const char *)buffers[next++];
    const bool loose = format == LEVEL_LOOSE;
    if (pos == NULL || parent + 1 > MAX_ELEMENTS / 2) {
      fail(WAVERT_ERROR_INVALID_ARGUMENT, "%s: the positions of level %" PRIu64 " are %s",
           function, l, pos == NULL ? "NULL" : "too many");
      return 0;
    }
    const uint64_t npos = LEVEL_POSITIONS(type, parent);
    buffer *positions = &t->positions[l];
    if (!copy_in(positions, pos, npos, t->pos_bytes, function)) return 0;
#define POSITION(p) get_uint(positions->data + (p) * t->pos_bytes, t->pos_bytes)
    const uint64_t count = npos > 0 ? POSITION(npos - 1) : 0; /* loose under no parent: 0 */
    for (uint64_t p = 1; p < npos; ++p) {
      /* Loose: the pair (2q, 2q + 1) is one segment within [0, count]; the segments need not
       * follow each other. Compressed: the boundaries do not decrease. */
      const bool below = (!loose || p % 2 == 1) && POSITION(p) < POSITION(p - 1);
      if (below || (loose && POSITION(p) > count)) {
        fail(WAVERT_ERROR_INVALID_ARGUMENT, "%s: position %" PRIu64 " of level %" PRIu64 " is "
             "%s", function, p, l, below ? "below the one before it"
             : "past the level's last position");
        return 0;
      }
    }
#undef POSITION
    if (count > MAX_ELEMENTS / width || (count > 0 && crd == NULL)) {
      fail(WAVERT_ERROR_INVALID_ARGUMENT, "%s: level %" PRIu64 " has %" PRIu64 " coordinates%s",
           function, l, count, crd == NULL ? " and a NULL buffer" : ", more than the limit");
      return 0;
    }
    for (uint64_t k = 0; k < width; ++k) {
      buffer *coordinates = &t->coordinates[l + k];
      coordinates->count = 0;
      if (!reserve(coordinates, count ? count : 1, t->crd_bytes, function)) return 0;
      for (uint64_t n = 0; n < count; ++n) {
        const char *at = crd + (n * width + k) * t->crd_bytes;
        const uint64_t c = get_uint(at, t->crd_bytes);
        if (c >= t->lvl_sizes[l + k]) {
          fail(WAVERT_ERROR_INVALID_ARGUMENT, "%s: coordinate %" PRIu64 " of level %" PRIu64
               " (entry %" PRIu64 ") is not below its size %" PRIu64, function, c, l + k, n,
               t->lvl_sizes[l + k]);
          return 0;
        }
        memcpy(coordinates->data + n * t->crd_bytes, at, t->crd_bytes);
      }
      coordinates->count = count;
    }
    parent = count;
    l += width - 1;
  }
  const char *values = (const char *)buffers[next];
  if (parent > 0 && values == NULL) {
    fail(WAVERT_ERROR_INVALID_ARGUMENT, "%s: the values buffer is NULL", function);
    return 0;
  }
  if (!copy_in(&t->values, values, parent, t->val_bytes, function)) return 0;
  t->built = true;
  return 1;
}

void *_mlir_ciface_newSparseTensor(wavert_memref_1d *dim_sizes,
                                   wavert_memref_1d *lvl_sizes,
                                   wavert_memref_1d *lvl_types,
                                   wavert_memref_1d *dim2lvl,
                                   wavert_memref_1d *lvl2dim, uint32_t pos_type,
                                   uint32_t crd_type, uint32_t value_type, uint32_t action,
                                   void *ptr) {
  static const char function[] = "newSparseTensor";
  (void)lvl2dim;
  tensor *t = calloc(1, sizeof(tensor));
  if (t == NULL) {
    fail(WAVERT_ERROR_OUT_OF_MEMORY, "%s: out of host memory", function);
    return NULL;
  }
  t->dim_rank = rank_of(function, "dimension sizes", dim_sizes);
  t->lvl_rank = t->dim_rank ? rank_of(function, "level sizes", lvl_sizes) : 0;
  if (t->lvl_rank == 0 ||
      !read_index_memref(function, "dimension sizes", dim_sizes, t->dim_rank, t->dim_sizes) ||
      !read_index_memref(function, "level sizes", lvl_sizes, t->lvl_rank, t->lvl_sizes) ||
      !read_index_memref(function, "level types", lvl_types, t->lvl_rank, t->lvl_types) ||
      !read_index_memref(function, "dim2lvl", dim2lvl, t->lvl_rank, (uint64_t[MAX_RANK]){0}))
    goto failed;
  for (uint64_t l = 0; l < t->lvl_rank; ++l) {
    const uint64_t type = t->lvl_types[l], format = LEVEL_FORMAT(type);
    const uint64_t properties = type - format; /* SoA: singleton levels only */
    if (!(type == LEVEL_DENSE ||
          ((format == LEVEL_COMPRESSED || format == LEVEL_LOOSE) && properties <= 3) ||
          (format == LEVEL_SINGLETON && properties <= 7))) {
      fail(WAVERT_ERROR_UNSUPPORTED, "%s: level %" PRIu64 " has level type %#" PRIx64
           ", which libwavert's sparse tensor storage does not support (dense, compressed, "
           "loose compressed and singleton levels only)", function, l, type);
      goto failed;
    }
  }
  t->pos_bytes = overhead_bytes(pos_type);
  t->crd_bytes = overhead_bytes(crd_type);
  t->val_bytes = wavert__sparse_value_bytes(value_type);
  t->value_type = value_type;
  if (t->pos_bytes == 0 || t->crd_bytes == 0 || t->val_bytes == 0) {
    fail(WAVERT_ERROR_INVALID_ARGUMENT, "%s: position type %" PRIu32 ", coordinate type %" PRIu32
         " or value type %" PRIu32 " is not one of MLIR's", function, pos_type, crd_type,
         value_type);
    goto failed;
  }
  if (action == ACTION_SORT_COO_IN_PLACE) {
    /* The tensor `ptr` is returned: its levels are built from sorted entries already. */
    tensor *coo = built_tensor(function, ptr);
    if (coo == NULL) goto failed;
    bool same = coo->lvl_rank == t->lvl_rank && coo->value_type == value_type &&
                coo->pos_bytes == t->pos_bytes && coo->crd_bytes == t->crd_bytes;
    for (uint64_t l = 0; same && l < t->lvl_rank; ++l) /* ordered or not: it is sorted */
      same = (coo->lvl_types[l] | 2) == (t->lvl_types[l] | 2);
    if (!same) {
      fail(WAVERT_ERROR_INVALID_ARGUMENT, "%s: the tensor to sort has other levels or values",
           function);
      goto failed;
    }
    memcpy(coo->lvl_types, t->lvl_types, sizeof(coo->lvl_types));
    free_tensor(t);
    return coo;
  }
  if (action == ACTION_FROM_READER) {
    if (!from_reader(t, ptr, dim2lvl, function)) goto failed;
  } else if (action == ACTION_PACK) {
    if (!from_buffers(t, ptr, function)) goto failed;
  } else if (action != ACTION_EMPTY) {
    fail(WAVERT_ERROR_INVALID_ARGUMENT, "%s: action %" PRIu32 " is not one of MLIR's (empty 0, "
         "from a reader 1, assemble from buffers 2, sort a COO in place 3)", function, action);
    goto failed;
  }
  if (wavert__handle_add(t, WAVERT__HANDLE_SPARSE_TENSOR) != WAVERT_OK) {
    fail(WAVERT_ERROR_OUT_OF_MEMORY, "%s: out of host memory", function);
    goto failed;
  }
  return t;
failed:
  free_tensor(t);
  return NULL;
}

/* Size `i` of a live tensor's levels (level) or dimensions; 0 with the error reported for a
 * dead handle or an index past the rank. */
static uint64_t size_at(const char *function, void *handle, uint64_t i, bool level) {
  tensor *t = live_tensor(function, handle);
  if (t == NULL) return 0;
  const uint64_t rank = level ? t->lvl_rank : t->dim_rank;
  if (i >= rank) {
    fail(WAVERT_ERROR_INVALID_ARGUMENT, "%s: %s %" PRIu64 " of %" PRIu64, function,
         level ? "level" : "dimension", i, rank);
    return 0;
  }
  return level ? t->lvl_sizes[i] : t->dim_sizes[i];
}

uint64_t sparseLvlSize(void *handle, uint64_t l) {
  return size_at("sparseLvlSize", handle, l, true);
}

uint64_t sparseDimSize(void *handle, uint64_t d) {
  return size_at("sparseDimSize", handle, d, false);
}

void endLexInsert(void *handle) { (void)built_tensor("endLexInsert", handle); }

void delSparseTensor(void *handle) {
  if (handle == NULL) return;
  if (wavert__handle_drop(handle, WAVERT__HANDLE_SPARSE_TENSOR, NULL) != 1) {
    fail(WAVERT_ERROR_INVALID_ARGUMENT, "delSparseTensor: %p is not a live sparse tensor",
         handle);
    return;
  }
  free_tensor(handle);
}

/* Write a memref over `count` elements at `data` to `out` (an empty one on failure). */
static void alias(wavert_memref_1d *out, void *data, uint64_t count) {
  static uint64_t nothing[1];
  out->allocated = data != NULL ? data : nothing;
  out->aligned = out->allocated;
  out->offset = 0;
  out->sizes[0] = (int64_t)count;
  out->strides[0] = 1;
}

/* The built tensor behind `handle`, with `out` first set to an empty memref; NULL (error
 * reported) for a NULL result or a dead or unbuilt handle. */
static tensor *result_tensor(wavert_memref_1d *out, void *handle, const char *function) {
  if (out == NULL) {
    fail(WAVERT_ERROR_INVALID_ARGUMENT, "%s: the result is NULL", function);
    return NULL;
  }
  alias(out, NULL, 0);
  return built_tensor(function, handle);
}

/* The positions (`positions`) or coordinates of level `l` of `bytes`-byte elements. */
static void level_buffer(wavert_memref_1d *out, void *handle, uint64_t l, size_t bytes,
                         bool positions, const char *function) {
  tensor *t = result_tensor(out, handle, function);
  if (t == NULL) return;
  const uint64_t type = l < t->lvl_rank ? t->lvl_types[l] : 0;
  if (!LEVEL_POSITIONED(type) && (positions || LEVEL_FORMAT(type) != LEVEL_SINGLETON)) {
    fail(WAVERT_ERROR_INVALID_ARGUMENT, "%s: level %" PRIu64 " is not a %s level", function, l,
         positions ? "(loose) compressed" : "(loose) compressed or singleton");
    return;
  }
  if ((positions ? t->pos_bytes : t->crd_bytes) != bytes) {
    fail(WAVERT_ERROR_INVALID_ARGUMENT, "%s: the tensor's %s are %zu-byte", function,
         positions ? "positions" : "coordinates", positions ? t->pos_bytes : t->crd_bytes);
    return;
  }
  buffer *b = positions ? &t->positions[l] : &t->coordinates[l];
  alias(out, b->data, b->count);
}

/* sparseCoordinatesBuffer: the coordinates of levels l..lvl_rank-1, which must be a (loose)
 * compressed level and singleton levels only (a trailing COO, or the last level alone),
 * interleaved as an array of structures (entry n's coordinates of those levels together), the
 * layout sparse_tensor.assemble takes; a copy the tensor owns, rewritten by the next call. */
static void coo_buffer(wavert_memref_1d *out, void *handle, uint64_t l, size_t bytes,
                       const char *function) {
  tensor *t = result_tensor(out, handle, function);
  if (t == NULL) return;
  bool coo = l < t->lvl_rank && LEVEL_POSITIONED(t->lvl_types[l]);
  for (uint64_t k = l + 1; coo && k < t->lvl_rank; ++k)
    coo = LEVEL_FORMAT(t->lvl_types[k]) == LEVEL_SINGLETON;
  if (!coo) {
    fail(WAVERT_ERROR_INVALID_ARGUMENT, "%s: level %" PRIu64 " does not start a trailing COO "
         "(a (loose) compressed level followed by singleton levels only)", function, l);
    return;
  }
  if (t->crd_bytes != bytes) {
    fail(WAVERT_ERROR_INVALID_ARGUMENT, "%s: the tensor's coordinates are %zu-byte", function,
         t->crd_bytes);
    return;
  }
  const uint64_t width = t->lvl_rank - l, count = t->coordinates[l].count;
  buffer *b = &t->coo_coordinates;
  b->count = 0; /* count * width <= MAX_ELEMENTS: from_buffers and build check it */
  if (!reserve(b, count > 0 ? count * width : 1, bytes, function)) return;
  for (uint64_t n = 0; n < count; ++n)
    for (uint64_t k = 0; k < width; ++k)
      memcpy(b->data + (n * width + k) * bytes, t->coordinates[l + k].data + n * bytes, bytes);
  b->count = count * width;
  alias(out, b->data, b->count);
}

#define OVERHEAD_ACCESSORS(P, BYTES)                                                          \
  void _mlir_ciface_sparsePositions##P(wavert_memref_1d *out, void *tensor,            \
                                       uint64_t l) {                                          \
    level_buffer(out, tensor, l, BYTES, true, "sparsePositions" #P);                          \
  }                                                                                           \
  void _mlir_ciface_sparseCoordinates##P(wavert_memref_1d *out, void *tensor,          \
                                         uint64_t l) {                                        \
    level_buffer(out, tensor, l, BYTES, false, "sparseCoordinates" #P);                       \
  }                                                                                           \
  void _mlir_ciface_sparseCoordinatesBuffer##P(wavert_memref_1d *out, void *tensor,    \
                                               uint64_t l) {                                  \
    coo_buffer(out, tensor, l, BYTES, "sparseCoordinatesBuffer" #P);                          \
  }
OVERHEAD_ACCESSORS(0, 8)
OVERHEAD_ACCESSORS(64, 8)
OVERHEAD_ACCESSORS(32, 4)
OVERHEAD_ACCESSORS(16, 2)
OVERHEAD_ACCESSORS(8, 1)

static void values_of(wavert_memref_1d *out, void *handle, uint32_t value_type,
                      const char *function) {
  tensor *t = result_tensor(out, handle, function);
  if (t == NULL) return;
  if (t->value_type != value_type) {
    fail(WAVERT_ERROR_INVALID_ARGUMENT, "%s: the tensor's values are of type %" PRIu32,
         function, t->value_type);
    return;
  }
  alias(out, t->values.data, t->values.count);
}

static void lex_insert(void *handle, wavert_memref_1d *lvl_coords,
                       const wavert_sparse_memref_0d *value, uint32_t value_type,
                       const char *function) {
  tensor *t = live_tensor(function, handle);
  if (t == NULL) return;
  if (t->built) {
    fail(WAVERT_ERROR_INVALID_ARGUMENT, "%s: the tensor is finished (endLexInsert)", function);
    return;
  }
  if (t->value_type != value_type) {
    fail(WAVERT_ERROR_INVALID_ARGUMENT, "%s: the tensor's values are of type %" PRIu32,
         function, t->value_type);
    return;
  }
  uint64_t coords[MAX_RANK];
  if (!read_index_memref(function, "level coordinates", lvl_coords, t->lvl_rank, coords)) return;
  if (value == NULL || value->aligned == NULL || value->offset < 0) {
    fail(WAVERT_ERROR_INVALID_ARGUMENT, "%s: the value memref is not a value", function);
    return;
  }
  for (uint64_t l = 0; l < t->lvl_rank; ++l)
    if (coords[l] >= t->lvl_sizes[l]) {
      fail(WAVERT_ERROR_INVALID_ARGUMENT, "%s: coordinate %" PRIu64 " of level %" PRIu64
           " is not below its size %" PRIu64, function, coords[l], l, t->lvl_sizes[l]);
      return;
    }
  if (!reserve(&t->pending_crd, (t->pending_val.count + 1) * t->lvl_rank, 8, function) ||
      !reserve(&t->pending_val, t->pending_val.count + 1, t->val_bytes, function))
    return;
  memcpy(t->pending_crd.data + t->pending_val.count * t->lvl_rank * 8, coords,
         (size_t)t->lvl_rank * 8);
  memcpy(t->pending_val.data + t->pending_val.count * t->val_bytes,
         (const char *)value->aligned + (uint64_t)value->offset * t->val_bytes, t->val_bytes);
  t->pending_val.count += 1;
}

#define VALUE_ACCESSORS(V)                                                                    \
  void _mlir_ciface_sparseValues##V(wavert_memref_1d *out, void *tensor) {             \
    values_of(out, tensor, WAVERT_SPARSE_##V, "sparseValues" #V);                             \
  }                                                                                           \
  void _mlir_ciface_lexInsert##V(void *tensor, wavert_memref_1d *lvl_coords,           \
                                 wavert_sparse_memref_0d *value) {                            \
    lex_insert(tensor, lvl_coords, value, WAVERT_SPARSE_##V, "lexInsert" #V);                 \
  }
VALUE_ACCESSORS(F64)
VALUE_ACCESSORS(F32)
VALUE_ACCESSORS(F16)
VALUE_ACCESSORS(BF16)
VALUE_ACCESSORS(I64)
VALUE_ACCESSORS(I32)
VALUE_ACCESSORS(I16)
VALUE_ACCESSORS(I8)
VALUE_ACCESSORS(C64)
VALUE_ACCESSORS(C32)
