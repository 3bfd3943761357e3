/*
 * errors.c — the exceptions of pywave._native (part of the native.c unity build).
 *
 * ArgumentError for anything about the arguments (including launch-configuration limits
 * reported by generated code); for a libwavert status, always the class that set_exceptions
 * mapped it to (pywave.runtime.STATUS_ERRORS, the one table; raise_status, raise_status_fmt),
 * DeviceError for a status missing from it: no other part chooses a class for a status.
 * Messages name the argument, its position, the value and what was expected.
 */
#include "native.h"

#include <stdarg.h>

/* Raise `type` with "<prefix>: <message of the current exception>", chained from it. */
static void raise_chained(PyObject *type, PyObject *prefix /* borrowed str */) {
  PyObject *et, *ev, *tb;
  PyErr_Fetch(&et, &ev, &tb);
  if (!et) {
    PyErr_SetObject(type, prefix);
    return;
  }
  PyErr_NormalizeException(&et, &ev, &tb);
  if (tb && ev)
    PyException_SetTraceback(ev, tb);
  PyObject *msg = ev ? PyObject_Str(ev) : NULL;
  if (!msg) {
    PyErr_Clear();
    msg = PyUnicode_FromString("unknown error");
  }
  if (msg && PyUnicode_GET_LENGTH(msg) == 0) {
    Py_DECREF(msg);
    msg = PyObject_GetAttrString(et, "__name__");
    if (!msg)
      PyErr_Clear();
  }
  if (msg)
    PyErr_Format(type, "%U: %U", prefix, msg);
  else
    PyErr_SetObject(type, prefix);
  Py_XDECREF(msg);
  if (ev) {
    PyObject *nt, *nv, *ntb;
    PyErr_Fetch(&nt, &nv, &ntb);
    PyErr_NormalizeException(&nt, &nv, &ntb);
    if (nv) {
      Py_INCREF(ev);
      PyException_SetCause(nv, ev);   /* steals */
      Py_INCREF(ev);
      PyException_SetContext(nv, ev); /* steals */
    }
    PyErr_Restore(nt, nv, ntb);
  }
  Py_XDECREF(et);
  Py_XDECREF(ev);
  Py_XDECREF(tb);
}

static void raise_chained_arg(PyObject *type, PyObject *name, Py_ssize_t index,
                              const char *what) {
  PyObject *prefix = what ? PyUnicode_FromFormat("argument '%U' (#%zd): %s", name, index, what)
                          : PyUnicode_FromFormat("argument '%U' (#%zd)", name, index);
  if (!prefix)
    return; /* MemoryError replaces the original */
  raise_chained(type, prefix);
  Py_DECREF(prefix);
}

/* "argument 'a' (#0): <formatted>" (or just <formatted> when name is NULL). */
static void raise_arg(PyObject *name, Py_ssize_t index, const char *fmt, ...) {
  va_list va;
  va_start(va, fmt);
  PyObject *msg = PyUnicode_FromFormatV(fmt, va);
  va_end(va);
  if (!msg)
    return;
  if (name)
    PyErr_Format(ArgumentError, "argument '%U' (#%zd): %U", name, index, msg);
  else
    PyErr_SetObject(ArgumentError, msg);
  Py_DECREF(msg);
}

/* The class set_exceptions mapped `st` to (borrowed): pywave.runtime.STATUS_ERRORS, the one
 * table; DeviceError for a status missing from it. NULL with an exception set on failure. */
static PyObject *status_class(wavert_status st) {
  PyObject *key = PyLong_FromLong((long)st);
  if (!key)
    return NULL;
  PyObject *mapped = status_errors ? PyDict_GetItemWithError(status_errors, key) : NULL;
  Py_DECREF(key);
  if (mapped)
    return mapped; /* borrowed from the table */
  return PyErr_Occurred() ? NULL : DeviceError;
}

/* libwavert's message for this thread, or the status's text when there is none. */
static const char *status_message(wavert_status st) {
  const char *msg = wavert_last_error();
  return msg && *msg ? msg : wavert_status_string(st);
}

/* Raise status_class(st) with libwavert's message for this thread. */
static void raise_status(wavert_status st) {
  PyObject *type = status_class(st);
  if (type)
    PyErr_SetString(type, status_message(st));
}

/* Raise status_class(st) with "<formatted prefix>: <libwavert's message>". The message is
 * copied before the prefix is formatted (formatting may call back into libwavert). */
static void raise_status_fmt(wavert_status st, const char *fmt, ...) {
  PyObject *type = status_class(st);
  PyObject *msg = type ? PyUnicode_FromString(status_message(st)) : NULL;
  if (!msg)
    return;
  va_list va;
  va_start(va, fmt);
  PyObject *prefix = PyUnicode_FromFormatV(fmt, va);
  va_end(va);
  if (prefix)
    PyErr_Format(type, "%U: %U", prefix, msg);
  Py_XDECREF(prefix);
  Py_DECREF(msg);
}

/* "numpy.ndarray", "int" (new reference, never fails silently). */
static PyObject *type_name(PyTypeObject *tp) {
  PyObject *mod = PyObject_GetAttr((PyObject *)tp, str_module);
  PyObject *qual = PyObject_GetAttr((PyObject *)tp, str_qualname);
  PyObject *r = NULL;
  if (!mod || !qual || !PyUnicode_Check(qual)) {
    PyErr_Clear();
    r = PyUnicode_FromString(tp->tp_name);
  } else if (PyUnicode_Check(mod) && PyUnicode_CompareWithASCIIString(mod, "builtins") != 0) {
    r = PyUnicode_FromFormat("%U.%U", mod, qual);
  } else {
    Py_INCREF(qual);
    r = qual;
  }
  Py_XDECREF(mod);
  Py_XDECREF(qual);
  return r;
}

static const char *device_kind(int32_t type) {
  switch (type) {
  case kDLCPU: return "cpu";
  case kDLCUDA: return "cuda";
  case kDLCUDAHost: return "cuda_host";
  case kDLOpenCL: return "opencl";
  case kDLVulkan: return "vulkan";
  case kDLMetal: return "metal";
  case kDLROCM: return "rocm";
  case kDLROCMHost: return "rocm_host";
  case kDLCUDAManaged: return "cuda_managed";
  case kDLOneAPI: return "oneapi";
  default: return NULL;
  }
}

/* "cuda:1", "device type 99:0" (new reference). */
static PyObject *device_str(int32_t type, int32_t id) {
  const char *k = device_kind(type);
  if (k)
    return PyUnicode_FromFormat("%s:%d", k, (int)id);
  return PyUnicode_FromFormat("device type %d:%d", (int)type, (int)id);
}

static int wrong_device(HostFunction *self, param_t *p, Py_ssize_t index, PyObject *obj,
                        int32_t type, int32_t id) {
  PyObject *tn = PyCapsule_CheckExact(obj) ? PyUnicode_FromString("DLPack capsule")
                                           : type_name(Py_TYPE(obj));
  if (!tn)
    return -1;
  if (self->device_type == kDLCPU) { /* the CPU device's kernels, or a host program */
    const char *runs = self->cpu_device ? "runs its kernels on the CPU device (target cpu)"
                                        : "belongs to a host program (no GPU op; target host)";
    PyObject *ds = device_str(type, id);
    if (ds) {
      PyErr_Format(ArgumentError,
                   "argument '%U' (#%zd) is on %U (%U), but %U() %s: pass a CPU tensor "
                   "(DLPack kDLCPU, or pinned host memory)",
                   p->name, index, ds, tn, self->name, runs);
      Py_DECREF(ds);
    }
  } else if (type == kDLCPU) {
    PyErr_Format(ArgumentError,
                 "argument '%U' (#%zd) is on the CPU (%U); pass a GPU tensor on %s", p->name,
                 index, tn, device_kind(self->device_type));
  } else {
    PyObject *ds = device_str(type, id);
    if (ds) {
      PyErr_Format(ArgumentError, "argument '%U' (#%zd) is on %U (%U); pass a GPU tensor on %s",
                   p->name, index, ds, tn, device_kind(self->device_type));
      Py_DECREF(ds);
    }
  }
  Py_DECREF(tn);
  return -1;
}

static int read_only_error(param_t *p, Py_ssize_t index, const char *why) {
  if (p->is_object) /* Wave's convention: what the host code does with it is not known */
    PyErr_Format(ArgumentError,
                 "argument '%U' (#%zd) is read-only (%s) but Wave's host code may write it; "
                 "pass a writable tensor",
                 p->name, index, why);
  else
    PyErr_Format(ArgumentError,
                 "argument '%U' (#%zd) is read-only (%s) but %U writes it; pass a writable tensor",
                 p->name, index, why, p->type_str);
  return -1;
}
