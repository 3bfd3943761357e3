/*
 * scalars.c — Python numbers -> slot words (part of the native.c unity build).
 *
 * A scalar argument becomes one 64-bit slot holding its bits in the low bytes, the rest zero.
 * Integers are range-checked against their MLIR type's signed range (index is 64-bit); i1
 * takes bools (Python or NumPy) or 0/1; floats are rounded to nearest even, and a finite value
 * that overflows the type is an error, not infinity.
 */
#include "native.h"

#include <math.h>
#include <string.h>

/* Round `d` to f16 (ebits 5) or bf16 (ebits 8) with libwavert's round-to-nearest-even
 * conversion, written as its bit pattern. Returns -1 when a finite `d` overflows the format;
 * inf and nan map to inf and a quiet nan. */
static int narrow_float(double d, int ebits, uint16_t *out) {
  const uint16_t h = ebits == 5 ? wavert_f16_from_f64(d) : wavert_bf16_from_f64(d);
  const uint16_t exp_mask = ebits == 5 ? 0x7c00 : 0x7f80;
  if (isfinite(d) && (h & 0x7fff) == exp_mask)
    return -1;
  *out = h;
  return 0;
}

static int is_numpy_bool(PyObject *v) {
  const char *n = Py_TYPE(v)->tp_name;
  return strcmp(n, "numpy.bool") == 0 || strcmp(n, "numpy.bool_") == 0;
}

static int scalar_type_error(PyObject *name, Py_ssize_t index, scalar_kind kind, PyObject *v,
                             const char *expected) {
  PyObject *tn = type_name(Py_TYPE(v));
  if (!tn)
    return -1;
  raise_arg(name, index, "expects %s for %s, got %U (%R)", expected, scalar_kind_names[kind], tn,
            v);
  Py_DECREF(tn);
  return -1;
}

/* `v` (an integer: __index__) as a long long in [lo, hi] into *out: 0, or -1 with the error
 * set (out of range: ArgumentError naming the argument, the value, `kind` and the range, then
 * `hint`). */
static int index_in_range(PyObject *v, scalar_kind kind, long long lo, long long hi,
                          const char *hint, long long *out, PyObject *name, Py_ssize_t index) {
  PyObject *iv = PyNumber_Index(v);
  if (!iv)
    return -1;
  int overflow;
  const long long x = PyLong_AsLongLongAndOverflow(iv, &overflow);
  if (x == -1 && PyErr_Occurred()) {
    Py_DECREF(iv);
    return -1;
  }
  if (overflow || x < lo || x > hi) {
    raise_arg(name, index, "%R is out of range for %s [%lld, %lld]%s", iv,
              scalar_kind_names[kind], lo, hi, hint);
    Py_DECREF(iv);
    return -1;
  }
  Py_DECREF(iv);
  *out = x;
  return 0;
}

/* i1: a bool (Python or NumPy) or an integer 0 / 1. */
static int pack_bool(PyObject *v, uint64_t *out, PyObject *name, Py_ssize_t index) {
  if (v == Py_True || v == Py_False) {
    *out = v == Py_True;
    return 0;
  }
  if (is_numpy_bool(v)) {
    int t = PyObject_IsTrue(v);
    if (t < 0)
      return -1;
    *out = (uint64_t)t;
    return 0;
  }
  if (PyFloat_Check(v) || !PyIndex_Check(v))
    return scalar_type_error(name, index, SK_I1, v, "a bool");
  long long x;
  if (index_in_range(v, SK_I1, 0, 1, " (pass a bool)", &x, name, index) < 0)
    return -1;
  *out = (uint64_t)x;
  return 0;
}

/* i8 .. i64 and index: an integer (__index__, not a float) in the type's signed range. */
static int pack_int(scalar_kind kind, PyObject *v, uint64_t *out, PyObject *name,
                    Py_ssize_t index) {
  if (PyFloat_Check(v) || !PyIndex_Check(v))
    return scalar_type_error(name, index, kind, v, "an integer");
  const int bits = kind == SK_I8 ? 8 : kind == SK_I16 ? 16 : kind == SK_I32 ? 32 : 64;
  const long long hi = bits == 64 ? INT64_MAX : (long long)((INT64_C(1) << (bits - 1)) - 1);
  long long x;
  if (index_in_range(v, kind, -hi - 1, hi, "", &x, name, index) < 0)
    return -1;
  *out = bits == 64 ? (uint64_t)x : ((uint64_t)x & ((UINT64_C(1) << bits) - 1));
  return 0;
}

/* A float argument's value as a double: a float, or any number with __float__ / __index__
 * (an integer beyond a double's range is out of range for `kind`). */
static int read_double(scalar_kind kind, PyObject *v, double *out, PyObject *name,
                       Py_ssize_t index) {
  if (PyFloat_Check(v)) {
    *out = PyFloat_AS_DOUBLE(v);
    return 0;
  }
  const PyNumberMethods *nb = Py_TYPE(v)->tp_as_number;
  if (!nb || (!nb->nb_float && !nb->nb_index))
    return scalar_type_error(name, index, kind, v, "a number");
  double d;
  if (nb->nb_float) {
    d = PyFloat_AsDouble(v);
  } else {
    PyObject *iv = PyNumber_Index(v);
    if (!iv)
      return -1;
    d = PyLong_AsDouble(iv);
    Py_DECREF(iv);
  }
  if (d == -1.0 && PyErr_Occurred()) {
    if (PyErr_ExceptionMatches(PyExc_OverflowError)) {
      PyErr_Clear();
      raise_arg(name, index, "%R is out of range for %s", v, scalar_kind_names[kind]);
    } else if (PyErr_ExceptionMatches(PyExc_TypeError)) {
      PyErr_Clear();
      return scalar_type_error(name, index, kind, v, "a number");
    }
    return -1;
  }
  *out = d;
  return 0;
}

/* f16, bf16, f32, f64: rounded to nearest even; a finite value that overflows is an error. */
static int pack_float(scalar_kind kind, PyObject *v, uint64_t *out, PyObject *name,
                      Py_ssize_t index) {
  double d;
  if (read_double(kind, v, &d, name, index) < 0)
    return -1;
  if (kind == SK_F64) {
    memcpy(out, &d, sizeof d);
    return 0;
  }
  if (kind == SK_F32) {
    float f = (float)d;
    if (isinf(f) && isfinite(d)) {
      raise_arg(name, index,
                "%R is out of range for f32 (largest finite value 3.4028234663852886e+38)", v);
      return -1;
    }
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    *out = u;
    return 0;
  }
  uint16_t h;
  const int f16 = kind == SK_F16;
  if (narrow_float(d, f16 ? 5 : 8, &h) < 0) {
    raise_arg(name, index, "%R is out of range for %s (largest finite value %s)", v,
              scalar_kind_names[kind], f16 ? "65504.0" : "3.3895313892515355e+38");
    return -1;
  }
  *out = h;
  return 0;
}

/* Pack `v` as a `kind` scalar into *out (bits in the low bytes, the rest zero). Errors name
 * the argument (or only the value when name is NULL). */
static int pack_scalar(scalar_kind kind, PyObject *v, uint64_t *out, PyObject *name,
                       Py_ssize_t index) {
  switch (kind) {
  case SK_I1: return pack_bool(v, out, name, index);
  case SK_I8:
  case SK_I16:
  case SK_I32:
  case SK_I64:
  case SK_INDEX: return pack_int(kind, v, out, name, index);
  case SK_F16:
  case SK_BF16:
  case SK_F32:
  case SK_F64: return pack_float(kind, v, out, name, index);
  default:
    PyErr_SetString(PyExc_SystemError, "pywave._native: bad scalar kind");
    return -1;
  }
}
