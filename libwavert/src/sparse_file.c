/*
 * sparse_file.c — MLIR's sparse tensor file reader (wavert_sparse_file.h): Matrix Market and
 * extended FROSTT files read into the coordinate and value buffers that the sparsifier's
 * `sparse_tensor.new` allocates. Written for hostile input: every number is parsed with an
 * overflow check, every size is bounded before generated code allocates from it (the NSE by
 * the file's size), and every failure is a recorded error (as the mgpu* functions record
 * theirs), never an exit, a crash or a read outside a buffer.
 */
#define _POSIX_C_SOURCE 200809L /* fileno, fstat */
#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <locale.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "mgpu_internal.h"
#include "sparse_internal.h"
#include "wavert_sparse_file.h"

#define MAX_RANK WAVERT__SPARSE_MAX_RANK
/* Exclusive. Generated code allocates a dense level's positions from a dimension size without
 * a check (a CSR's rows + 1 positions): 2^28 bounds that to 2 GiB and holds every matrix of
 * the SuiteSparse collection (the largest has about 2^27.8 rows). */
#define MAX_DIM_SIZE (UINT64_C(1) << 28)
#define LINE_CAPACITY 4096               /* a line of at most 4095 characters, and its NUL */

enum kind { KIND_PATTERN, KIND_REAL, KIND_INTEGER, KIND_COMPLEX, KIND_UNDEFINED };
static const char *const kind_names[] = {"pattern", "real", "integer", "complex",
                                         "FROSTT (no field)"};

typedef struct reader {
  FILE *file;    /* NULL once the entries are read (or reading failed) */
  int kind;      /* enum kind */
  bool symmetric;
  bool consumed; /* ReadToBuffers ran */
  uint64_t rank;
  uint64_t nse;
  uint64_t line_number; /* of the last line read */
  uint64_t dims[MAX_RANK];
  char line[LINE_CAPACITY];
  char filename[]; /* for messages */
} reader;

/* ---- errors ------------------------------------------------------------------------------ */

/* Report a failure as the mgpu* functions do: recorded as the host call's first error inside a
 * call; outside one, the thread's last error unless an earlier error is still pending. */
void wavert__sparse_fail(wavert_status status, const char *format, ...) {
  if (wavert__call_current(NULL) == NULL && wavert_last_status() != WAVERT_OK) return;
  char message[1024];
  va_list args;
  va_start(args, format);
  vsnprintf(message, sizeof(message), format, args);
  va_end(args);
  wavert__call_record(wavert__error(status, "%s", message));
}
#define fail wavert__sparse_fail

#define FAIL_AT(r, function, ...)                                                             \
  fail(WAVERT_ERROR_INVALID_ARGUMENT, "%s: %s line %" PRIu64 ": %s", (function),              \
       (r)->filename, (r)->line_number, (__VA_ARGS__))

/* A live reader, or NULL (error reported). */
static reader *live_reader(const char *function, void *handle) {
  if (handle == NULL || !wavert__handle_live(handle, WAVERT__HANDLE_SPARSE_READER)) {
    fail(WAVERT_ERROR_INVALID_ARGUMENT, "%s: %p is not a live sparse tensor reader", function,
         handle);
    return NULL;
  }
  return handle;
}

/* ---- lines and numbers ------------------------------------------------------------------ */

/* Read the next line into r->line without its line end: 1, or 0 at the end of the file, or -1
 * (error reported) for a line that is too long, holds a NUL byte, or cannot be read. */
static int read_line(reader *r, const char *function) {
  size_t length = 0;
  int c;
  while ((c = getc_unlocked(r->file)) != EOF && c != '\n') { /* one thread per reader */
    if (c == '\0') {
      r->line_number += 1;
      FAIL_AT(r, function, "the line holds a NUL byte");
      return -1;
    }
    if (length + 1 >= LINE_CAPACITY) {
      r->line_number += 1;
      fail(WAVERT_ERROR_INVALID_ARGUMENT, "%s: %s line %" PRIu64 ": longer than %d characters",
           function, r->filename, r->line_number, LINE_CAPACITY - 1);
      return -1;
    }
    r->line[length++] = (char)c;
  }
  if (c == EOF && ferror(r->file)) {
    fail(WAVERT_ERROR_INVALID_ARGUMENT, "%s: %s: read error after line %" PRIu64 ": %s",
         function, r->filename, r->line_number, strerror(errno));
    return -1;
  }
  if (c == EOF && length == 0) return 0;
  if (length > 0 && r->line[length - 1] == '\r') length -= 1; /* CRLF files */
  r->line[length] = '\0';
  r->line_number += 1;
  return 1;
}

static const char *skip_blanks(const char *p) {
  while (*p == ' ' || *p == '\t' || *p == '\f' || *p == '\v') ++p;
  return p;
}

static bool is_blank(const char *p) { return *skip_blanks(p) == '\0'; }

static bool ends_token(char c) {
  return c == '\0' || c == ' ' || c == '\t' || c == '\f' || c == '\v';
}

/* Parse an unsigned decimal integer (digits only: no sign, no base prefix) at *p after
 * blanks: 1 (advanced past it), 0 (no number there), -1 (it overflows uint64_t). */
static int parse_u64(const char **p, uint64_t *out) {
  const char *s = skip_blanks(*p);
  if (!isdigit((unsigned char)*s)) return 0;
  uint64_t value = 0;
  for (; isdigit((unsigned char)*s); ++s) {
    uint64_t digit = (uint64_t)(*s - '0');
    if (value > (UINT64_MAX - digit) / 10) return -1;
    value = value * 10 + digit;
  }
  if (!ends_token(*s)) return 0;
  *out = value;
  *p = s;
  return 1;
}

/* A signed decimal integer (an optional sign and digits) that fits int64_t: as parse_u64. */
static int parse_i64(const char **p, int64_t *out) {
  const char *s = skip_blanks(*p);
  bool negative = *s == '-';
  if (*s == '-' || *s == '+') ++s;
  uint64_t magnitude;
  int parsed = isdigit((unsigned char)*s) ? parse_u64(&s, &magnitude) : 0;
  if (parsed != 1) return parsed;
  if (magnitude > (negative ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX)) return -1;
  *out = negative ? (magnitude == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)magnitude)
                  : (int64_t)magnitude;
  *p = s;
  return 1;
}

/* A floating-point number in strtod's syntax at *p (out of range: +-HUGE_VAL or 0, as strtod
 * rounds): 1, or 0 when there is none. */
static int parse_double(const char **p, double *out) {
  const char *s = skip_blanks(*p);
  char *end;
  double value = strtod(s, &end);
  if (end == s || !ends_token(*end)) return 0;
  *out = value;
  *p = end;
  return 1;
}

/* The next whitespace-separated token of *p, lower-cased into `out` (of `capacity` bytes):
 * 1, or 0 when there is none or it does not fit. */
static int next_token(const char **p, char *out, size_t capacity) {
  const char *s = skip_blanks(*p);
  size_t n = 0;
  if (*s == '\0') return 0;
  for (; !ends_token(*s); ++s) {
    if (n + 1 >= capacity) return 0;
    out[n++] = (char)tolower((unsigned char)*s);
  }
  out[n] = '\0';
  *p = s;
  return 1;
}

/* ---- headers ----------------------------------------------------------------------------- */

/* The next line that is neither blank nor a comment (starting with `comment`): 1, or 0 / -1
 * as read_line (the end of the file reported as missing `what`). */
static int content_line(reader *r, const char *function, char comment, const char *what) {
  for (;;) {
    int got = read_line(r, function);
    if (got < 0) return -1;
    if (got == 0) {
      fail(WAVERT_ERROR_INVALID_ARGUMENT, "%s: %s: the file ends before %s", function,
           r->filename, what);
      return -1;
    }
    if (r->line[0] != comment && !is_blank(r->line)) return 1;
  }
}

static int read_mtx_header(reader *r, const char *function) {
  if (read_line(r, function) != 1) {
    if (!ferror(r->file) && r->line_number == 0)
      fail(WAVERT_ERROR_INVALID_ARGUMENT, "%s: %s: the file is empty", function, r->filename);
    return 0;
  }
  char words[5][32];
  const char *p = r->line;
  int count = 0;
  while (count < 5 && next_token(&p, words[count], sizeof(words[count]))) ++count;
  if (count != 5 || !is_blank(p) || strcmp(words[0], "%%matrixmarket") != 0) {
    FAIL_AT(r, function, "not a Matrix Market header (%MatrixMarket matrix coordinate "
                         "FIELD SYMMETRY)");
    return 0;
  }
  if (strcmp(words[1], "matrix") != 0 || strcmp(words[2], "coordinate") != 0) {
    fail(WAVERT_ERROR_INVALID_ARGUMENT,
         "%s: %s line 1: '%s %s' is not supported (only 'matrix coordinate')", function,
         r->filename, words[1], words[2]);
    return 0;
  }
  static const char *const fields[] = {"pattern", "real", "integer", "complex"};
  r->kind = -1;
  for (int k = 0; k < 4; ++k)
    if (strcmp(words[3], fields[k]) == 0) r->kind = k;
  if (r->kind < 0) {
    fail(WAVERT_ERROR_INVALID_ARGUMENT,
         "%s: %s line 1: field '%s' is not supported (real, integer, complex or pattern)",
         function, r->filename, words[3]);
    return 0;
  }
  if (strcmp(words[4], "general") != 0 && strcmp(words[4], "symmetric") != 0) {
    fail(WAVERT_ERROR_INVALID_ARGUMENT,
         "%s: %s line 1: symmetry '%s' is not supported (general or symmetric)", function,
         r->filename, words[4]);
    return 0;
  }
  r->symmetric = strcmp(words[4], "symmetric") == 0;
  r->rank = 2;
  if (content_line(r, function, '%', "the size line (ROWS COLS NSE)") != 1) return 0;
  p = r->line;
  if (parse_u64(&p, &r->dims[0]) != 1 || parse_u64(&p, &r->dims[1]) != 1 ||
      parse_u64(&p, &r->nse) != 1 || !is_blank(p)) {
    FAIL_AT(r, function, "expected the size line 'ROWS COLS NSE' (three integers)");
    return 0;
  }
  if (r->symmetric && r->dims[0] != r->dims[1]) {
    FAIL_AT(r, function, "a symmetric matrix must be square");
    return 0;
  }
  return 1;
}

static int read_tns_header(reader *r, const char *function) {
  if (content_line(r, function, '#', "the line 'RANK NSE'") != 1) return 0;
  const char *p = r->line;
  if (parse_u64(&p, &r->rank) != 1 || parse_u64(&p, &r->nse) != 1 || !is_blank(p)) {
    FAIL_AT(r, function, "expected the line 'RANK NSE' (two integers)");
    return 0;
  }
  if (r->rank < 1 || r->rank > MAX_RANK) {
    fail(WAVERT_ERROR_INVALID_ARGUMENT, "%s: %s line %" PRIu64 ": rank %" PRIu64
         " is not within 1..%d", function, r->filename, r->line_number, r->rank, MAX_RANK);
    return 0;
  }
  if (content_line(r, function, '#', "the line of dimension sizes") != 1) return 0;
  p = r->line;
  for (uint64_t d = 0; d < r->rank; ++d)
    if (parse_u64(&p, &r->dims[d]) != 1) {
      FAIL_AT(r, function, "expected one dimension size per rank");
      return 0;
    }
  if (!is_blank(p)) {
    FAIL_AT(r, function, "more dimension sizes than the rank");
    return 0;
  }
  r->kind = KIND_UNDEFINED;
  return 1;
}

/* Bound the sizes of a header just read: each dimension below MAX_DIM_SIZE, NSE at most the
 * product of the dimensions and at most what the rest of a regular file can hold. */
static int check_sizes(reader *r, const char *function) {
  uint64_t product = 1; /* saturating */
  for (uint64_t d = 0; d < r->rank; ++d) {
    if (r->dims[d] >= MAX_DIM_SIZE) {
      fail(WAVERT_ERROR_INVALID_ARGUMENT,
           "%s: %s: dimension %" PRIu64 " has size %" PRIu64 ", beyond libwavert's limit %"
           PRIu64, function, r->filename, d, r->dims[d], MAX_DIM_SIZE - 1);
      return 0;
    }
    product = r->dims[d] != 0 && product > UINT64_MAX / r->dims[d] ? UINT64_MAX
                                                                   : product * r->dims[d];
  }
  if (r->nse > product) {
    fail(WAVERT_ERROR_INVALID_ARGUMENT,
         "%s: %s: %" PRIu64 " stored entries do not fit %" PRIu64 " positions", function,
         r->filename, r->nse, product);
    return 0;
  }
  struct stat info;
  long at = ftell(r->file);
  if (fstat(fileno(r->file), &info) == 0 && S_ISREG(info.st_mode) && at >= 0) {
    uint64_t left = info.st_size > at ? (uint64_t)(info.st_size - at) : 0;
    uint64_t per_entry = 2 * r->rank; /* a digit and a separator per coordinate */
    if (r->nse > (left + 1) / per_entry) {
      fail(WAVERT_ERROR_INVALID_ARGUMENT,
           "%s: %s: the header announces %" PRIu64 " entries, but the %" PRIu64
           " bytes after it hold at most %" PRIu64, function, r->filename, r->nse, left,
           (left + 1) / per_entry);
      return 0;
    }
  }
  return 1;
}

/* ---- element types ----------------------------------------------------------------------- */

static bool is_float_type(uint32_t t) { return t >= WAVERT_SPARSE_F64 && t <= WAVERT_SPARSE_BF16; }
static bool is_int_type(uint32_t t) { return t >= WAVERT_SPARSE_I64 && t <= WAVERT_SPARSE_I8; }
static bool is_complex_type(uint32_t t) {
  return t == WAVERT_SPARSE_C64 || t == WAVERT_SPARSE_C32;
}

static const char *type_name(uint32_t t) {
  static const char *const names[] = {"?",   "f64", "f32", "f16", "bf16", "i64",
                                      "i32", "i16", "i8",  "c64", "c32"};
  return t <= WAVERT_SPARSE_C32 ? names[t] : "?";
}

/* Whether a file of `kind` can be read as elements of type `t` (MLIR's rule). */
static bool can_read_as(int kind, uint32_t t) {
  switch (kind) {
    case KIND_PATTERN: return t >= WAVERT_SPARSE_F64 && t <= WAVERT_SPARSE_C32;
    case KIND_REAL: return is_float_type(t);
    case KIND_COMPLEX: return is_complex_type(t);
    default: return is_float_type(t) || is_int_type(t); /* integer, FROSTT */
  }
}

static size_t type_size(uint32_t t) {
  static const size_t sizes[] = {0, 8, 4, 2, 2, 8, 4, 2, 1, 16, 8};
  return t <= WAVERT_SPARSE_C32 ? sizes[t] : 0;
}

size_t wavert__sparse_value_bytes(uint32_t value_type) { return type_size(value_type); }

/* The largest coordinate of an overhead type of `bytes` bytes (8: index and u64). */
static uint64_t overhead_max(size_t bytes) {
  return bytes >= 8 ? UINT64_MAX : (UINT64_C(1) << (8 * bytes)) - 1;
}

static float narrow_to_float(double d) {
  /* Values from FLT_MAX + half an ulp up round to infinity; a conversion of them is undefined. */
  if (fabs(d) >= 0x1.ffffffp127) return d > 0 ? INFINITY : -INFINITY;
  if (fabs(d) > FLT_MAX) return d > 0 ? FLT_MAX : -FLT_MAX;
  return (float)d;
}

/* One parsed value: a real or complex double, or an exact integer (integer files). */
typedef struct value {
  double re, im;
  int64_t integer;
  bool exact; /* `integer` holds it */
} value;

/* Store `v` as element `n` of `out` (type t); 0 when it does not fit an integer type. */
static int store_value(uint32_t t, const value *v, char *out, uint64_t n) {
  char *at = out + n * type_size(t);
  double d = v->exact ? (double)v->integer : v->re;
  switch (t) {
    case WAVERT_SPARSE_F64: memcpy(at, &d, 8); return 1;
    case WAVERT_SPARSE_F32: {
      float f = narrow_to_float(d);
      memcpy(at, &f, 4);
      return 1;
    }
    case WAVERT_SPARSE_F16: {
      uint16_t h = wavert_f16_from_f64(d);
      memcpy(at, &h, 2);
      return 1;
    }
    case WAVERT_SPARSE_BF16: {
      uint16_t h = wavert_bf16_from_f64(d);
      memcpy(at, &h, 2);
      return 1;
    }
    case WAVERT_SPARSE_C64: {
      double pair[2] = {v->re, v->im};
      memcpy(at, pair, 16);
      return 1;
    }
    case WAVERT_SPARSE_C32: {
      float pair[2] = {narrow_to_float(v->re), narrow_to_float(v->im)};
      memcpy(at, pair, 8);
      return 1;
    }
    default: break;
  }
  /* Integer types: the exact integer, or the double truncated toward zero (C's conversion),
   * when it is within the type's range. */
  static const int64_t lows[] = {INT64_MIN, INT32_MIN, INT16_MIN, INT8_MIN};
  static const int64_t highs[] = {INT64_MAX, INT32_MAX, INT16_MAX, INT8_MAX};
  int k = (int)(t - WAVERT_SPARSE_I64);
  int64_t i;
  if (v->exact) {
    i = v->integer;
  } else {
    /* -2^63 <= trunc(d) < 2^63 (NaN fails both). */
    if (!(d > -9223372036854775809.0 && d < 9223372036854775808.0)) return 0;
    i = (int64_t)d;
  }
  if (i < lows[k] || i > highs[k]) return 0;
  switch (t) {
    case WAVERT_SPARSE_I64: memcpy(at, &i, 8); break;
    case WAVERT_SPARSE_I32: { int32_t x = (int32_t)i; memcpy(at, &x, 4); break; }
    case WAVERT_SPARSE_I16: { int16_t x = (int16_t)i; memcpy(at, &x, 2); break; }
    default: { int8_t x = (int8_t)i; memcpy(at, &x, 1); break; }
  }
  return 1;
}

/* ---- memrefs ----------------------------------------------------------------------------- */

/* The address of element 0 of a 1-D memref of at least `needed` compact elements of `bytes`
 * bytes, or NULL (error reported; also for needed == 0 when the memref is malformed). */
static char *memref_data(const char *function, const char *what,
                         const wavert_memref_1d *m, uint64_t needed, size_t bytes,
                         bool *ok) {
  *ok = false;
  if (m == NULL) {
    fail(WAVERT_ERROR_INVALID_ARGUMENT, "%s: the %s memref is NULL", function, what);
    return NULL;
  }
  if (m->sizes[0] < 0 || (uint64_t)m->sizes[0] < needed) {
    fail(WAVERT_ERROR_INVALID_ARGUMENT,
         "%s: the %s memref has %" PRId64 " elements; %" PRIu64 " are needed", function, what,
         m->sizes[0], needed);
    return NULL;
  }
  if (needed == 0) {
    *ok = true;
    return NULL;
  }
  if (m->aligned == NULL || m->offset < 0 || (needed > 1 && m->strides[0] != 1)) {
    fail(WAVERT_ERROR_INVALID_ARGUMENT,
         "%s: the %s memref (data %p, offset %" PRId64 ", stride %" PRId64
         ") is not a compact buffer", function, what, m->aligned, m->offset, m->strides[0]);
    return NULL;
  }
  if ((uint64_t)m->offset > (uint64_t)PTRDIFF_MAX / bytes ||
      wavert__check_elements(function, (char *)m->aligned + (uint64_t)m->offset * bytes, bytes,
                             needed) != WAVERT_OK) {
    fail(WAVERT_ERROR_INVALID_ARGUMENT, "%s: the %s memref's offset %" PRId64
         " and %" PRIu64 " elements wrap around the address space", function, what, m->offset,
         needed);
    return NULL;
  }
  *ok = true;
  return (char *)m->aligned + (uint64_t)m->offset * bytes;
}

/* Element i of an index memref that memref_data accepted for `count` elements (any stride
 * when count is 1). */
static uint64_t index_at(const char *data, uint64_t i) {
  uint64_t v;
  memcpy(&v, data + i * sizeof(uint64_t), sizeof v);
  return v;
}

/* ---- the reader -------------------------------------------------------------------------- */

char *getTensorFilename(uint64_t id) {
  char name[32];
  snprintf(name, sizeof(name), "TENSOR%" PRIu64, id);
  char *value = getenv(name);
  if (value == NULL)
    fail(WAVERT_ERROR_INVALID_ARGUMENT,
         "getTensorFilename: environment variable %s (the file of tensor %" PRIu64
         ") is not set", name, id);
  return value;
}

static void free_reader(reader *r) {
  if (r->file != NULL) fclose(r->file);
  free(r);
}

void *_mlir_ciface_createCheckedSparseTensorReader(char *filename,
                                                   wavert_memref_1d *dim_shape,
                                                   uint32_t value_type) {
  static const char function[] = "createCheckedSparseTensorReader";
  if (filename == NULL) {
    fail(WAVERT_ERROR_INVALID_ARGUMENT, "%s: the file name is NULL", function);
    return NULL;
  }
  size_t name_length = strlen(filename);
  reader *r = calloc(1, sizeof(reader) + name_length + 1);
  if (r == NULL) {
    fail(WAVERT_ERROR_OUT_OF_MEMORY, "%s: out of host memory", function);
    return NULL;
  }
  memcpy(r->filename, filename, name_length + 1);
  bool mtx = strstr(filename, ".mtx") != NULL, tns = strstr(filename, ".tns") != NULL;
  if (!mtx && !tns) {
    fail(WAVERT_ERROR_INVALID_ARGUMENT,
         "%s: %s: unknown format (the name must contain .mtx, Matrix Market, or .tns, "
         "FROSTT)", function, filename);
    goto failed;
  }
  r->file = fopen(filename, "r");
  if (r->file == NULL) {
    fail(WAVERT_ERROR_INVALID_ARGUMENT, "%s: cannot open %s: %s", function, filename,
         strerror(errno));
    goto failed;
  }
  if (!(mtx ? read_mtx_header(r, function) : read_tns_header(r, function))) goto failed;
  if (!check_sizes(r, function)) goto failed;
  if (value_type < WAVERT_SPARSE_F64 || value_type > WAVERT_SPARSE_C32) {
    fail(WAVERT_ERROR_INVALID_ARGUMENT, "%s: value type %" PRIu32 " is not MLIR's PrimaryType",
         function, value_type);
    goto failed;
  }
  if (!can_read_as(r->kind, value_type)) {
    fail(WAVERT_ERROR_INVALID_ARGUMENT, "%s: %s holds %s values, which are not read as %s",
         function, filename, kind_names[r->kind], type_name(value_type));
    goto failed;
  }
  bool ok;
  const char *shape = memref_data(function, "dimension shape", dim_shape, 0, 8, &ok);
  if (!ok) goto failed;
  if ((uint64_t)dim_shape->sizes[0] != r->rank) {
    fail(WAVERT_ERROR_INVALID_ARGUMENT, "%s: %s has rank %" PRIu64 "; the tensor type has %"
         PRId64, function, filename, r->rank, dim_shape->sizes[0]);
    goto failed;
  }
  shape = memref_data(function, "dimension shape", dim_shape, r->rank, 8, &ok);
  if (!ok) goto failed;
  for (uint64_t d = 0; d < r->rank; ++d) {
    uint64_t expected = index_at(shape, d);
    if (expected != 0 && expected != r->dims[d]) {
      fail(WAVERT_ERROR_INVALID_ARGUMENT, "%s: %s: dimension %" PRIu64 " has size %" PRIu64
           "; the tensor type has %" PRIu64, function, filename, d, r->dims[d], expected);
      goto failed;
    }
  }
  if (wavert__handle_add(r, WAVERT__HANDLE_SPARSE_READER) != WAVERT_OK) {
    fail(WAVERT_ERROR_OUT_OF_MEMORY, "%s: out of host memory", function);
    goto failed;
  }
  return r;
failed:
  free_reader(r);
  return NULL;
}

void _mlir_ciface_getSparseTensorReaderDimSizes(wavert_memref_1d *out, void *handle) {
  /* Code that goes on after a failure (no early return, as under MLIR's ExecutionEngine)
   * reads the sizes of its static rank: zeros of the largest rank, never garbage. */
  static uint64_t no_sizes[MAX_RANK];
  if (out == NULL) {
    fail(WAVERT_ERROR_INVALID_ARGUMENT, "getSparseTensorReaderDimSizes: the result is NULL");
    return;
  }
  reader *r = live_reader("getSparseTensorReaderDimSizes", handle);
  uint64_t *sizes = r != NULL ? r->dims : no_sizes;
  out->allocated = sizes;
  out->aligned = sizes;
  out->offset = 0;
  out->sizes[0] = r != NULL ? (int64_t)r->rank : 0;
  out->strides[0] = 1;
}

uint64_t getSparseTensorReaderDimRank(void *handle) {
  reader *r = live_reader("getSparseTensorReaderDimRank", handle);
  return r != NULL ? r->rank : 0;
}

uint64_t getSparseTensorReaderNSE(void *handle) {
  reader *r = live_reader("getSparseTensorReaderNSE", handle);
  return r != NULL ? r->nse : 0;
}

bool getSparseTensorReaderIsSymmetric(void *handle) {
  reader *r = live_reader("getSparseTensorReaderIsSymmetric", handle);
  return r != NULL && r->symmetric;
}

void delSparseTensorReader(void *handle) {
  if (handle == NULL) return;
  if (wavert__handle_drop(handle, WAVERT__HANDLE_SPARSE_READER, NULL) != 1) {
    fail(WAVERT_ERROR_INVALID_ARGUMENT,
         "delSparseTensorReader: %p is not a live sparse tensor reader", handle);
    return;
  }
  free_reader(handle);
}

/* A decoded dim2lvl entry: level = dims[dim] (op 0), dims[dim] / c (op 1) or % c (op 2). */
typedef struct level_map {
  uint64_t dim, c;
  int op;
} level_map;

/* Parse the value(s) of an entry after its coordinates: 1, or 0 (error reported). */
static int parse_value(reader *r, const char *function, const char **p, value *v) {
  *v = (value){.re = 1.0};
  int parsed = 1;
  switch (r->kind) {
    case KIND_PATTERN: break;
    case KIND_INTEGER:
      v->exact = true;
      parsed = parse_i64(p, &v->integer);
      break;
    case KIND_COMPLEX:
      parsed = parse_double(p, &v->re) == 1 && parse_double(p, &v->im) == 1;
      break;
    default: parsed = parse_double(p, &v->re); break;
  }
  if (parsed != 1) {
    FAIL_AT(r, function, parsed < 0 ? "the integer value overflows 64 bits"
                                    : "expected the entry's value after its coordinates");
    return 0;
  }
  if (!is_blank(*p)) {
    FAIL_AT(r, function, "unexpected text after the entry's value");
    return 0;
  }
  return 1;
}

static int read_entries(reader *r, wavert_memref_1d *dim2lvl,
                        wavert_memref_1d *coordinates, wavert_memref_1d *values,
                        size_t crd_bytes, uint32_t value_type, const char *function);

/* 1 (the entries are sorted), 0 (read, not sorted) or -1 (error reported). The values are
 * read in the "C" locale's number syntax (a '.' decimal point), whatever locale the program
 * has set: this thread's locale is switched for the read. */
int wavert__sparse_reader_read(void *handle, wavert_memref_1d *dim2lvl,
                               wavert_memref_1d *coordinates,
                               wavert_memref_1d *values, size_t crd_bytes,
                               uint32_t value_type, const char *function) {
  reader *r = live_reader(function, handle);
  if (r == NULL) return -1;
  locale_t c_locale = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);
  locale_t saved = c_locale != (locale_t)0 ? uselocale(c_locale) : (locale_t)0;
  int sorted = read_entries(r, dim2lvl, coordinates, values, crd_bytes, value_type, function);
  if (c_locale != (locale_t)0) {
    uselocale(saved);
    freelocale(c_locale);
  }
  return sorted;
}

int wavert__sparse_reader_header(const char *function, void *handle, uint64_t *out_rank,
                                 const uint64_t **out_dims, uint64_t *out_nse) {
  reader *r = live_reader(function, handle);
  if (r == NULL) return 0;
  *out_rank = r->rank;
  *out_dims = r->dims;
  *out_nse = r->nse;
  return 1;
}

/* dim2lvl's codes (MLIR's encoding: the tag in the top 4 bits, a dimension, or its floordiv /
 * mod by a constant) as level maps; 1, or 0 with the error reported. */
static int read_level_map(const reader *r, wavert_memref_1d *dim2lvl, level_map *map,
                          uint64_t *out_lvl_rank, const char *function) {
  if (dim2lvl == NULL || dim2lvl->sizes[0] < 1 || dim2lvl->sizes[0] > MAX_RANK) {
    fail(WAVERT_ERROR_INVALID_ARGUMENT, "%s: the dim2lvl memref must have 1..%d elements",
         function, MAX_RANK);
    return 0;
  }
  const uint64_t lvl_rank = (uint64_t)dim2lvl->sizes[0];
  bool ok;
  const char *map_data = memref_data(function, "dim2lvl", dim2lvl, lvl_rank, 8, &ok);
  if (!ok) return 0;
  for (uint64_t l = 0; l < lvl_rank; ++l) {
    uint64_t code = index_at(map_data, l);
    uint64_t tag = code >> 60;
    map[l].op = (int)tag;
    map[l].dim = tag == 0 ? code : code & 0xfffff;
    map[l].c = (code >> 20) & 0xfffff;
    bool bad = tag > 2 || map[l].dim >= r->rank ||
               (tag != 0 && (map[l].c == 0 || ((code >> 40) & 0xfffff) != 0));
    if (bad) {
      fail(WAVERT_ERROR_INVALID_ARGUMENT,
           "%s: dim2lvl[%" PRIu64 "] = %#" PRIx64 " is not a level of a rank-%" PRIu64
           " tensor (a dimension, or its floordiv / mod by a constant)", function, l, code,
           r->rank);
      return 0;
    }
  }
  *out_lvl_rank = lvl_rank;
  return 1;
}

/* Entry n's dimension coordinates, 0-based and checked against the dimensions, with *p left
 * at its value; 1, or 0 with the error reported. */
static int read_entry_coordinates(reader *r, uint64_t n, uint64_t *dims, const char **p,
                                  const char *function) {
  int got;
  do got = read_line(r, function);
  while (got == 1 && is_blank(r->line));
  if (got < 0) return 0;
  if (got == 0) {
    fail(WAVERT_ERROR_INVALID_ARGUMENT, "%s: %s ends after %" PRIu64 " of its %" PRIu64
         " entries", function, r->filename, n, r->nse);
    return 0;
  }
  *p = r->line;
  for (uint64_t d = 0; d < r->rank; ++d) {
    uint64_t c;
    int parsed = parse_u64(p, &c);
    if (parsed != 1 || c == 0 || c > r->dims[d]) {
      char what[160];
      if (parsed != 1)
        snprintf(what, sizeof(what), "expected %" PRIu64 " coordinates (unsigned integers)",
                 r->rank);
      else
        snprintf(what, sizeof(what), "coordinate %" PRIu64 " is %" PRIu64 ", not within 1..%"
                 PRIu64 " (1-based)", d, c, r->dims[d]);
      FAIL_AT(r, function, what);
      return 0;
    }
    dims[d] = c - 1;
  }
  return 1;
}

/* The entry's level coordinates (lvl) from its dimension coordinates, stored at `at` as
 * crd_bytes-wide integers; 1, or 0 with the error reported (one the width cannot hold). */
static int store_level_coordinates(const reader *r, const level_map *map, uint64_t lvl_rank,
                                   const uint64_t *dims, uint64_t *lvl, char *at,
                                   size_t crd_bytes, const char *function) {
  const uint64_t crd_max = overhead_max(crd_bytes);
  for (uint64_t l = 0; l < lvl_rank; ++l, at += crd_bytes) {
    uint64_t x = dims[map[l].dim];
    lvl[l] = map[l].op == 0 ? x : map[l].op == 1 ? x / map[l].c : x % map[l].c;
    if (lvl[l] > crd_max) {
      char what[160];
      snprintf(what, sizeof(what), "level coordinate %" PRIu64 " does not fit %zu-byte "
               "coordinates", lvl[l], crd_bytes);
      FAIL_AT(r, function, what);
      return 0;
    }
    switch (crd_bytes) {
      case 8: memcpy(at, &lvl[l], 8); break;
      case 4: { uint32_t y = (uint32_t)lvl[l]; memcpy(at, &y, 4); break; }
      case 2: { uint16_t y = (uint16_t)lvl[l]; memcpy(at, &y, 2); break; }
      default: { uint8_t y = (uint8_t)lvl[l]; memcpy(at, &y, 1); break; }
    }
  }
  return 1;
}

/* Whether level coordinates `lvl` do not come before `previous` (lexicographic order). */
static bool in_order(const uint64_t *previous, const uint64_t *lvl, uint64_t lvl_rank) {
  for (uint64_t l = 0; l < lvl_rank; ++l)
    if (previous[l] != lvl[l]) return previous[l] < lvl[l];
  return true;
}

/* Nothing but blank and comment lines after the entries; 1, or 0 with the error reported. */
static int check_no_more_entries(reader *r, const char *function) {
  const char comment = r->kind == KIND_UNDEFINED ? '#' : '%';
  for (int got; (got = read_line(r, function)) != 0;) {
    if (got < 0) return 0;
    if (r->line[0] != comment && !is_blank(r->line)) {
      char what[160];
      snprintf(what, sizeof(what), "more entries than the %" PRIu64 " the header announces",
               r->nse);
      FAIL_AT(r, function, what);
      return 0;
    }
  }
  return 1;
}

/* The entries into the coordinates and values buffers: 1 (sorted), 0 (not sorted) or -1
 * (error reported; the checked buffers zeroed). One attempt per reader. */
static int read_entries(reader *r, wavert_memref_1d *dim2lvl,
                        wavert_memref_1d *coordinates, wavert_memref_1d *values,
                        size_t crd_bytes, uint32_t value_type, const char *function) {
  if (r->consumed) {
    fail(WAVERT_ERROR_INVALID_ARGUMENT, "%s: the entries of %s were read already", function,
         r->filename);
    return -1;
  }
  r->consumed = true; /* one attempt, successful or not */
  bool sorted = true, ok;
  char *crd = NULL, *val = NULL; /* the buffers, once checked */
  uint64_t lvl_rank = 0;
  level_map map[MAX_RANK];
  if (!can_read_as(r->kind, value_type)) {
    fail(WAVERT_ERROR_INVALID_ARGUMENT, "%s: %s holds %s values, which are not read as %s",
         function, r->filename, kind_names[r->kind], type_name(value_type));
    goto failed;
  }
  if (!read_level_map(r, dim2lvl, map, &lvl_rank, function)) goto failed;
  if (r->nse > UINT64_MAX / lvl_rank) {
    fail(WAVERT_ERROR_INVALID_ARGUMENT, "%s: NSE times the level rank overflows", function);
    goto failed;
  }
  char *checked_crd = memref_data(function, "coordinates", coordinates, r->nse * lvl_rank,
                                  crd_bytes, &ok);
  if (!ok) goto failed;
  char *checked_val = memref_data(function, "values", values, r->nse, type_size(value_type),
                                  &ok);
  if (!ok) goto failed;
  crd = checked_crd;
  val = checked_val;
  uint64_t previous[MAX_RANK], dims[MAX_RANK], lvl[MAX_RANK];
  for (uint64_t n = 0; n < r->nse; ++n) {
    const char *p;
    value v;
    if (!read_entry_coordinates(r, n, dims, &p, function) ||
        !parse_value(r, function, &p, &v) ||
        !store_level_coordinates(r, map, lvl_rank, dims, lvl,
                                 crd + n * lvl_rank * crd_bytes, crd_bytes, function))
      goto failed;
    if (!store_value(value_type, &v, val, n)) {
      char what[160];
      snprintf(what, sizeof(what), "the value does not fit %s", type_name(value_type));
      FAIL_AT(r, function, what);
      goto failed;
    }
    sorted = sorted && (n == 0 || in_order(previous, lvl, lvl_rank));
    memcpy(previous, lvl, lvl_rank * sizeof(uint64_t));
  }
  if (!check_no_more_entries(r, function)) goto failed;
  fclose(r->file);
  r->file = NULL;
  return sorted ? 1 : 0;
failed:
  if (r->file != NULL) fclose(r->file);
  r->file = NULL;
  /* Code that goes on without an early return (MLIR's ExecutionEngine convention) sorts and
   * indexes with these entries: zeros are coordinates within every level. */
  if (crd != NULL && val != NULL) {
    memset(crd, 0, (size_t)(r->nse * lvl_rank) * crd_bytes);
    memset(val, 0, (size_t)r->nse * type_size(value_type));
  }
  return -1;
}

#define READ_TO_BUFFERS(C, V, CBYTES)                                                         \
  bool _mlir_ciface_getSparseTensorReaderReadToBuffers##C##V(                                 \
      void *reader, wavert_memref_1d *dim2lvl, wavert_memref_1d *lvl2dim,      \
      wavert_memref_1d *coordinates, wavert_memref_1d *values) {               \
    (void)lvl2dim;                                                                            \
    return wavert__sparse_reader_read(reader, dim2lvl, coordinates, values, CBYTES,         \
                                      WAVERT_SPARSE_##V,                                      \
                                      "getSparseTensorReaderReadToBuffers" #C #V) == 1;       \
  }
#define READ_TO_BUFFERS_V(C, CBYTES)                                                          \
  READ_TO_BUFFERS(C, F64, CBYTES) READ_TO_BUFFERS(C, F32, CBYTES)                             \
  READ_TO_BUFFERS(C, F16, CBYTES) READ_TO_BUFFERS(C, BF16, CBYTES)                            \
  READ_TO_BUFFERS(C, I64, CBYTES) READ_TO_BUFFERS(C, I32, CBYTES)                             \
  READ_TO_BUFFERS(C, I16, CBYTES) READ_TO_BUFFERS(C, I8, CBYTES)                              \
  READ_TO_BUFFERS(C, C64, CBYTES) READ_TO_BUFFERS(C, C32, CBYTES)
READ_TO_BUFFERS_V(0, 8)
READ_TO_BUFFERS_V(64, 8)
READ_TO_BUFFERS_V(32, 4)
READ_TO_BUFFERS_V(16, 2)
READ_TO_BUFFERS_V(8, 1)
