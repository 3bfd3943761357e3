/*
 * objects.c — the Python objects of a host function in Wave's convention (part of the
 * native.c unity build).
 *
 * Wave's host code takes (stream, object, ...) and reads each object only through its helpers
 * (wave_get_buffer, wave_get_dim, wave_get_int64, wave_get_float64). Those run inside the
 * generated code without the GIL, so each object is read here first, in phase 1, into a
 * wavert_object (libwavert's wavert_jit.h): an int (PyLong, or __index__), a float (PyFloat,
 * or __float__), a tensor (a DLPack producer or capsule: taken in phase 3 like a memref
 * argument, its device checked, read-only ones refused, its dtype checked when the host code
 * states one by viewing the buffer), or anything else, kept as its type and repr. The slot of
 * each object holds the address of its record, which wavert_call_set_objects registers for
 * the call; the helpers check what the host code asks
 * for against the record and record a typed error in the call instead of raising.
 */
#include "native.h"

#include <string.h>

/* `text` <- repr(v), truncated with "..." (never fails: an unprintable object says so). */
static void object_text(wavert_object *o, PyObject *v) {
  const size_t room = sizeof o->text;
  PyObject *r = PyObject_Repr(v);
  const char *s = r ? PyUnicode_AsUTF8(r) : NULL;
  if (!s) {
    PyErr_Clear();
    s = "<unprintable>";
  }
  size_t n = strlen(s);
  if (n < room) {
    memcpy(o->text, s, n + 1);
  } else {
    size_t keep = room - 4;
    while (keep > 0 && (s[keep] & 0xC0) == 0x80) /* cut between UTF-8 characters */
      keep--;
    memcpy(o->text, s, keep);
    memcpy(o->text + keep, "...", 4);
  }
  Py_XDECREF(r);
}

/* An int object (a PyLong): its value when it fits in int64, else its text. */
static int object_int(wavert_object *o, PyObject *n) {
  int overflow = 0;
  long long x = PyLong_AsLongLongAndOverflow(n, &overflow);
  if (x == -1 && PyErr_Occurred())
    return -1;
  o->kind = WAVERT_OBJECT_INT;
  o->int_fits = !overflow;
  if (overflow)
    object_text(o, n);
  else
    o->int_value = x;
  return 0;
}

/* Whether `v` is taken as a tensor: a raw DLPack capsule, or its type has the DLPack C
 * exchange API or __dlpack__ / __dlpack_device__ (tensors.c's per-type cache). */
static int object_is_tensor(PyObject *v) {
  if (PyCapsule_CheckExact(v))
    return 1;
  type_info miss;
  const type_info *ti;
  if (type_info_get(Py_TYPE(v), &miss, &ti) < 0)
    return -1;
  return ti->route != ROUTE_NONE;
}

/* Phase 1 for object argument `i`: its record, and for a tensor its route and device (checked
 * as for a memref argument). */
static int classify_object(HostFunction *self, call_state *c, Py_ssize_t i, PyObject *v) {
  param_t *p = &self->p[i];
  wavert_object *o = &c->objects[p->tensor_index];
  tensor_state *t = &c->ts[p->tensor_index];
  memset(o, 0, sizeof *o);
  memset(t, 0, sizeof *t);
  c->nstate = p->tensor_index + 1;
  c->slots[p->slot] = (uint64_t)(uintptr_t)o;
  o->position = (int32_t)i;
  o->name = PyUnicode_AsUTF8(p->name); /* cached in the str, which the function holds */
  o->type_name = Py_TYPE(v)->tp_name;
  if (!o->name)
    return -1;
  if (PyLong_Check(v)) {
    if (object_int(o, v) < 0) {
      raise_chained_arg(ArgumentError, p->name, i, NULL);
      return -1;
    }
    return 0;
  }
  if (PyFloat_Check(v)) {
    o->kind = WAVERT_OBJECT_FLOAT;
    o->float_value = PyFloat_AS_DOUBLE(v);
    return 0;
  }
  int tensor = object_is_tensor(v);
  if (tensor < 0) {
    raise_chained_arg(ArgumentError, p->name, i, NULL);
    return -1;
  }
  if (tensor) {
    o->kind = WAVERT_OBJECT_TENSOR;
    return classify_tensor(self, c, i, v);
  }
  PyNumberMethods *nb = Py_TYPE(v)->tp_as_number;
  if (PyIndex_Check(v)) { /* NumPy integers */
    PyObject *n = PyNumber_Index(v);
    int r = n ? object_int(o, n) : -1;
    Py_XDECREF(n);
    if (r < 0)
      raise_chained_arg(ArgumentError, p->name, i, "__index__() failed");
    return r;
  }
  if (nb && nb->nb_float) { /* NumPy floats */
    double d = PyFloat_AsDouble(v);
    if (d == -1.0 && PyErr_Occurred()) {
      raise_chained_arg(ArgumentError, p->name, i, "__float__() failed");
      return -1;
    }
    o->kind = WAVERT_OBJECT_FLOAT;
    o->float_value = d;
    return 0;
  }
  o->kind = WAVERT_OBJECT_OTHER; /* an error only if a helper asks for it */
  object_text(o, v);
  return 0;
}

/* Whether a tensor of `dtype` fits the element type the host code views object `p` as: the
 * same code, bits and lanes; a signless integer type takes signed and unsigned. */
static int object_dtype_fits(const param_t *p, DLDataType dtype) {
  const DLDataType want = p->mtype.dtype;
  if (dtype.bits != want.bits || dtype.lanes != want.lanes)
    return 0;
  if (dtype.code == want.code)
    return 1;
  return (p->mtype.flags & WAVERT_MEMREF_SIGNLESS) &&
         (dtype.code == kDLInt || dtype.code == kDLUInt);
}

static int object_dtype_error(const param_t *p, Py_ssize_t i, DLDataType dtype) {
  PyObject *want = element_str(p->mtype.dtype.code, p->mtype.dtype.bits, p->mtype.dtype.lanes,
                               p->mtype.flags);
  PyObject *got = element_str(dtype.code, dtype.bits, dtype.lanes, 0);
  if (want && got)
    raise_arg(p->name, i, "the host code views it as %U elements (memref.view of "
              "wave_get_buffer), got a tensor of %U", want, got);
  Py_XDECREF(want);
  Py_XDECREF(got);
  return -1;
}
