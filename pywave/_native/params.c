/*
 * params.c — parameter objects -> param_t, once per host function (part of the native.c
 * unity build).
 *
 * A parameter object is read by attribute name (pywave's Param record; any object with these
 * attributes will do):
 *   name     str      the argument's name, used in messages
 *   kind     str      "memref", "scalar" or "object" (Wave's convention: any Python object)
 *   scalar   str      scalars: the MLIR type, one of scalar_kind_names
 *   dtype    (code, bits, lanes) ints: memrefs: the DLPack dtype of an element
 *   flags    int      memrefs: WAVERT_MEMREF_SIGNLESS | WAVERT_MEMREF_STRIDED
 *   sizes    tuple    memrefs: one int per dimension, WAVERT_DYNAMIC for `?`
 *   strides  tuple or None  memrefs: the strided layout's strides (None: identity layout)
 *   offset   int      memrefs: the strided layout's offset in elements, or WAVERT_DYNAMIC
 *   written  bool     memrefs: the function writes the tensor (read-only tensors are refused)
 *   memory   str      optional, results: "device" when the memory space says device memory
 * Scalars need only name, kind and scalar. The type text in messages ("memref<?xf32>") is
 * derived from the compact form, so it always states what is checked.
 */
#include "native.h"

/* "f32", "i1", "bf16", "si8", "vector<4xf32>" for a DLPack dtype: its MLIR name (dtype_rows;
 * "dlpack(code, bits)" for a dtype without one) (new reference). */
static PyObject *element_str(unsigned code, unsigned bits, unsigned lanes, unsigned flags) {
  const dtype_row *r = find_dtype(code, bits, flags & WAVERT_MEMREF_SIGNLESS);
  PyObject *e =
      r ? PyUnicode_FromString(r->mlir) : PyUnicode_FromFormat("dlpack(%u, %u)", code, bits);
  if (e && lanes != 1) {
    PyObject *v = PyUnicode_FromFormat("vector<%ux%U>", lanes, e);
    Py_DECREF(e);
    e = v;
  }
  return e;
}

static int append(PyObject *list, PyObject *item /* stolen */) {
  if (!item)
    return -1;
  int r = PyList_Append(list, item);
  Py_DECREF(item);
  return r;
}

static PyObject *dim_str(int64_t v) {
  if (v == WAVERT_DYNAMIC)
    return PyUnicode_FromString("?");
  return PyUnicode_FromFormat("%lld", (long long)v);
}

/* "memref<?x4xf32>", "memref<?xf32, strided<[?], offset: ?>>" (new reference). */
static PyObject *memref_str(const param_t *p) {
  const wavert_memref_type *m = &p->mtype;
  PyObject *parts = PyList_New(0), *r = NULL, *sep = NULL, *joined = NULL;
  if (!parts)
    return NULL;
  for (int32_t d = 0; d < m->rank; d++)
    if (append(parts, dim_str(m->sizes[d])) < 0)
      goto out;
  if (append(parts, element_str(m->dtype.code, m->dtype.bits, m->dtype.lanes, m->flags)) < 0)
    goto out;
  sep = PyUnicode_FromString("x");
  if (!sep || !(joined = PyUnicode_Join(sep, parts)))
    goto out;
  if (m->flags & WAVERT_MEMREF_STRIDED) {
    PyObject *sp = PyList_New(0);
    if (!sp)
      goto out;
    for (int32_t d = 0; d < m->rank; d++)
      if (append(sp, dim_str(m->strides[d])) < 0) {
        Py_DECREF(sp);
        goto out;
      }
    PyObject *comma = PyUnicode_FromString(", ");
    PyObject *sj = comma ? PyUnicode_Join(comma, sp) : NULL;
    PyObject *off = dim_str(m->offset);
    if (sj && off)
      r = PyUnicode_FromFormat("memref<%U, strided<[%U], offset: %U>>", joined, sj, off);
    Py_XDECREF(comma);
    Py_XDECREF(sj);
    Py_XDECREF(off);
    Py_DECREF(sp);
  } else {
    r = PyUnicode_FromFormat("memref<%U>", joined);
  }
out:
  Py_DECREF(parts);
  Py_XDECREF(sep);
  Py_XDECREF(joined);
  return r;
}

/* Attribute `field` of parameter object `obj` (new reference); TypeError naming the field
 * when it is missing. */
static PyObject *field(PyObject *obj, Py_ssize_t index, const char *attr) {
  PyObject *v = PyObject_GetAttrString(obj, attr);
  if (!v && PyErr_ExceptionMatches(PyExc_AttributeError)) {
    PyErr_Clear();
    PyErr_Format(PyExc_TypeError,
                 "HostFunction: params[%zd] has no field '%s' (a parameter has name, kind, "
                 "scalar, dtype, flags, sizes, strides, offset, written), got %R",
                 index, attr, obj);
  }
  return v;
}

static int as_int64(PyObject *o, const char *what, PyObject *pname, int64_t *out) {
  if (!PyLong_Check(o) || PyBool_Check(o)) {
    PyErr_Format(PyExc_TypeError, "HostFunction: parameter '%U': %s must be an int, got %R",
                 pname, what, o);
    return -1;
  }
  long long v = PyLong_AsLongLong(o);
  if (v == -1 && PyErr_Occurred())
    return -1;
  *out = v;
  return 0;
}

/* An int field of a memref parameter. */
static int int_field(PyObject *obj, Py_ssize_t index, PyObject *pname, const char *name,
                     int64_t *out) {
  PyObject *v = field(obj, index, name);
  if (!v)
    return -1;
  int r = as_int64(v, name, pname, out);
  Py_DECREF(v);
  return r;
}

/* The `scalar` field: the scalar's kind. */
static int parse_scalar(PyObject *obj, Py_ssize_t index, param_t *p) {
  PyObject *k = field(obj, index, "scalar");
  if (!k)
    return -1;
  for (int i = 0; i < SK_COUNT; i++) {
    if (PyUnicode_Check(k) && PyUnicode_CompareWithASCIIString(k, scalar_kind_names[i]) == 0) {
      p->kind = (uint8_t)i;
      p->type_str = k; /* the reference from field() */
      return 0;
    }
  }
  char kinds[128]; /* "i1, i8, ..., f64" from scalar_kind_names */
  size_t used = 0;
  for (int i = 0; i < SK_COUNT && used < sizeof(kinds); i++) {
    int n = snprintf(kinds + used, sizeof(kinds) - used, "%s%s", i ? ", " : "",
                     scalar_kind_names[i]);
    used += n > 0 ? (size_t)n : sizeof(kinds);
  }
  PyErr_Format(PyExc_ValueError,
               "HostFunction: parameter '%U': field 'scalar' must be one of %s, got %R", p->name,
               kinds, k);
  Py_DECREF(k);
  return -1;
}

/* The `dtype` field: (code, bits, lanes) in DLDataType's ranges. */
static int parse_dtype(PyObject *obj, Py_ssize_t index, param_t *p) {
  PyObject *d = field(obj, index, "dtype");
  if (!d)
    return -1;
  int64_t v[3];
  static const char *const what[3] = {"dtype code", "dtype bits", "dtype lanes"};
  int ok = PyTuple_Check(d) && PyTuple_GET_SIZE(d) == 3;
  if (!ok)
    PyErr_Format(PyExc_TypeError,
                 "HostFunction: parameter '%U': field 'dtype' must be a (code, bits, lanes) "
                 "tuple, got %R",
                 p->name, d);
  for (int i = 0; ok && i < 3; i++)
    ok = as_int64(PyTuple_GET_ITEM(d, i), what[i], p->name, &v[i]) == 0;
  Py_DECREF(d);
  if (!ok)
    return -1;
  if (v[0] < 0 || v[0] > 255 || v[1] < 1 || v[1] > 255 || v[2] < 1 || v[2] > 65535) {
    PyErr_Format(PyExc_ValueError,
                 "HostFunction: parameter '%U': field 'dtype' is not a DLPack dtype (code=%lld, "
                 "bits=%lld, lanes=%lld)",
                 p->name, (long long)v[0], (long long)v[1], (long long)v[2]);
    return -1;
  }
  p->mtype.dtype.code = (uint8_t)v[0];
  p->mtype.dtype.bits = (uint8_t)v[1];
  p->mtype.dtype.lanes = (uint16_t)v[2];
  return 0;
}

/* The `sizes` and `strides` fields into p->layout (sizes[rank] then strides[rank]; the
 * descriptor memo's words follow). */
static int parse_layout(PyObject *sizes, PyObject *strides, param_t *p) {
  if (!PyTuple_Check(sizes) || PyTuple_GET_SIZE(sizes) > 1024) {
    PyErr_Format(PyExc_TypeError,
                 "HostFunction: parameter '%U': field 'sizes' must be a tuple of at most 1024 "
                 "ints, got %R",
                 p->name, sizes);
    return -1;
  }
  Py_ssize_t rank = PyTuple_GET_SIZE(sizes);
  if (strides != Py_None && (!PyTuple_Check(strides) || PyTuple_GET_SIZE(strides) != rank)) {
    PyErr_Format(PyExc_ValueError,
                 "HostFunction: parameter '%U': field 'strides' must be None or a tuple of %zd "
                 "ints, got %R",
                 p->name, rank, strides);
    return -1;
  }
  if ((p->mtype.flags & WAVERT_MEMREF_STRIDED) && strides == Py_None) {
    PyErr_Format(PyExc_ValueError,
                 "HostFunction: parameter '%U': a strided layout (flags) needs field 'strides'",
                 p->name);
    return -1;
  }
  p->layout = PyMem_Malloc(sizeof(int64_t) * (size_t)(6 * rank + 1));
  if (!p->layout) {
    PyErr_NoMemory();
    return -1;
  }
  for (Py_ssize_t d = 0; d < rank; d++) {
    if (as_int64(PyTuple_GET_ITEM(sizes, d), "a size", p->name, &p->layout[d]) < 0)
      return -1;
    if (p->layout[d] < 0 && p->layout[d] != WAVERT_DYNAMIC) {
      PyErr_Format(PyExc_ValueError, "HostFunction: parameter '%U': field 'sizes' has the "
                   "negative size %lld", p->name, (long long)p->layout[d]);
      return -1;
    }
    if (strides == Py_None)
      p->layout[rank + d] = WAVERT_DYNAMIC;
    else if (as_int64(PyTuple_GET_ITEM(strides, d), "a stride", p->name, &p->layout[rank + d]) < 0)
      return -1;
  }
  p->mtype.rank = (int32_t)rank;
  p->mtype.sizes = p->layout;
  p->mtype.strides = p->layout + rank;
  p->memo_key = p->layout + 2 * rank;
  return 0;
}

/* The memref fields: dtype, flags, sizes, strides, offset, written. */
static int parse_memref(PyObject *obj, Py_ssize_t index, param_t *p) {
  p->is_memref = 1;
  int64_t flags, offset;
  if (parse_dtype(obj, index, p) < 0 || int_field(obj, index, p->name, "flags", &flags) < 0 ||
      int_field(obj, index, p->name, "offset", &offset) < 0)
    return -1;
  if (flags & ~(int64_t)(WAVERT_MEMREF_SIGNLESS | WAVERT_MEMREF_STRIDED)) {
    PyErr_Format(PyExc_ValueError, "HostFunction: parameter '%U': field 'flags' has unknown "
                 "bits %lld", p->name, (long long)flags);
    return -1;
  }
  p->mtype.flags = (uint32_t)flags;
  p->mtype.offset = offset;
  PyObject *sizes = field(obj, index, "sizes");
  PyObject *strides = sizes ? field(obj, index, "strides") : NULL;
  int r = strides ? parse_layout(sizes, strides, p) : -1;
  Py_XDECREF(sizes);
  Py_XDECREF(strides);
  if (r < 0)
    return -1;
  PyObject *w = field(obj, index, "written");
  int written = w ? PyObject_IsTrue(w) : -1;
  Py_XDECREF(w);
  if (written < 0)
    return -1;
  p->written = (uint8_t)written;
  PyObject *memory = PyObject_GetAttrString(obj, "memory"); /* optional: results only */
  if (!memory) {
    if (!PyErr_ExceptionMatches(PyExc_AttributeError))
      return -1;
    PyErr_Clear();
  } else {
    int device = PyUnicode_Check(memory) && PyUnicode_CompareWithASCIIString(memory, "device") == 0;
    int host = PyUnicode_Check(memory) && PyUnicode_GET_LENGTH(memory) == 0;
    if (!device && !host)
      PyErr_Format(PyExc_ValueError, "HostFunction: parameter '%U': field 'memory' must be "
                   "\"device\" or \"\", got %R", p->name, memory);
    Py_DECREF(memory);
    if (!device && !host)
      return -1;
    p->memory_device = (uint8_t)device;
  }
  p->type_str = memref_str(p);
  return p->type_str ? 0 : -1;
}

/* An object of Wave's convention: `dtype` (0, 0, 0) leaves a tensor's dtype unchecked, else
 * it is the element type the host code views the buffer as (`flags`: SIGNLESS); `written`:
 * the host code may write the tensor (read-only ones are refused). */
static int parse_object(PyObject *obj, Py_ssize_t index, param_t *p) {
  p->is_object = 1;
  PyObject *w = field(obj, index, "written"); /* the host code may write the tensor */
  int written = w ? PyObject_IsTrue(w) : -1;
  Py_XDECREF(w);
  if (written < 0)
    return -1;
  p->written = (uint8_t)written;
  PyObject *d = field(obj, index, "dtype");
  if (!d)
    return -1;
  PyObject *none = Py_BuildValue("(iii)", 0, 0, 0);
  int unchecked = none ? PyObject_RichCompareBool(d, none, Py_EQ) : -1;
  Py_XDECREF(none);
  Py_DECREF(d);
  int64_t flags = 0;
  if (unchecked < 0 || (!unchecked && (parse_dtype(obj, index, p) < 0 ||
                                       int_field(obj, index, p->name, "flags", &flags) < 0)))
    return -1;
  p->mtype.flags = (uint32_t)(flags & WAVERT_MEMREF_SIGNLESS);
  if (unchecked) {
    p->type_str = PyUnicode_FromString("object");
  } else {
    PyObject *e = element_str(p->mtype.dtype.code, p->mtype.dtype.bits, p->mtype.dtype.lanes,
                              p->mtype.flags);
    p->type_str = e ? PyUnicode_FromFormat("object (%U tensor)", e) : NULL;
    Py_XDECREF(e);
  }
  return p->type_str ? 0 : -1;
}

/* Read parameter object `obj` (params[index]) into *p (zeroed by the caller; free_params
 * frees a partly filled one). */
static int parse_param(PyObject *obj, Py_ssize_t index, param_t *p) {
  p->name = field(obj, index, "name");
  if (!p->name)
    return -1;
  if (!PyUnicode_Check(p->name)) {
    PyErr_Format(PyExc_TypeError, "HostFunction: params[%zd]: field 'name' must be a str, got %R",
                 index, p->name);
    return -1;
  }
  PyObject *kind = field(obj, index, "kind");
  if (!kind)
    return -1;
  int memref = PyUnicode_Check(kind) && PyUnicode_CompareWithASCIIString(kind, "memref") == 0;
  int scalar = PyUnicode_Check(kind) && PyUnicode_CompareWithASCIIString(kind, "scalar") == 0;
  int object = PyUnicode_Check(kind) && PyUnicode_CompareWithASCIIString(kind, "object") == 0;
  if (!memref && !scalar && !object)
    PyErr_Format(PyExc_ValueError,
                 "HostFunction: parameter '%U': field 'kind' must be \"memref\", \"scalar\" or "
                 "\"object\", got %R",
                 p->name, kind);
  Py_DECREF(kind);
  if (memref)
    return parse_memref(obj, index, p);
  if (object)
    return parse_object(obj, index, p);
  return scalar ? parse_scalar(obj, index, p) : -1;
}

static void free_params(param_t *p, Py_ssize_t n) {
  if (!p)
    return;
  for (Py_ssize_t i = 0; i < n; i++) {
    Py_XDECREF(p[i].name);
    Py_XDECREF(p[i].type_str);
    PyMem_Free(p[i].layout);
  }
  PyMem_Free(p);
}

/* The module's SCALAR_KINDS (scalar_kind_names, in enum order) and DTYPES (dtype_rows as
 * (mlir, code, bits, signless, NumPy type string or None) tuples), for the Python side to
 * read and for tests to compare with pywave.program.DTYPES. */
static int add_tables(PyObject *module) {
  PyObject *kinds = PyTuple_New(SK_COUNT);
  for (int i = 0; kinds && i < SK_COUNT; i++) {
    PyObject *k = PyUnicode_FromString(scalar_kind_names[i]);
    if (!k)
      Py_CLEAR(kinds);
    else
      PyTuple_SET_ITEM(kinds, i, k);
  }
  if (add_owned(module, "SCALAR_KINDS", kinds) < 0)
    return -1;
  PyObject *rows = PyTuple_New(DTYPE_ROWS);
  for (int i = 0; rows && i < DTYPE_ROWS; i++) {
    const dtype_row *r = &dtype_rows[i];
    char ts[8];
    DLDataType d = {r->code, r->bits, 1};
    const char *typestr = numpy_typestr(d, ts) ? ts : NULL;
    PyObject *row = Py_BuildValue("(siiNz)", r->mlir, (int)r->code, (int)r->bits,
                                  PyBool_FromLong(r->signless), typestr);
    if (!row)
      Py_CLEAR(rows);
    else
      PyTuple_SET_ITEM(rows, i, row);
  }
  return add_owned(module, "DTYPES", rows);
}
