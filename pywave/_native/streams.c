/*
 * streams.c — the call's stream and device (part of the native.c unity build).
 *
 * The stream of a call is, in order: stream= (an int handle, an object with __cuda_stream__,
 * or one with .cuda_stream / .ptr; checked by wavert_stream_check before use); the DLPack
 * exchange API's current_work_stream of the first exchange-API tensor; CuPy's current stream
 * when a CuPy array is among the arguments (through CuPy's C API where it has one); the
 * legacy default stream (NULL). Device handles are cached per (device type, ordinal) on top
 * of libwavert's table, which saves its lookup on every call.
 */
#include "native.h"

static PyObject *cupy_get_current_stream; /* NULL: not looked up yet; Py_None: no CuPy */
static int cupy_stream_takes_device = -1; /* -1 unknown, 0 no, 1 yes */
static wavert_device *device_cache[3][DEVICE_CACHE_SIZE]; /* [0] CUDA, [1] ROCm, [2] CPU */

static int handle_from_int(PyObject *h, void **out) {
  if (!PyLong_Check(h) || PyBool_Check(h))
    return -1;
  unsigned long long u = PyLong_AsUnsignedLongLong(h);
  if (u == (unsigned long long)-1 && PyErr_Occurred()) {
    PyErr_Clear();
    return -1;
  }
  if (u > UINTPTR_MAX)
    return -1;
  *out = (void *)(uintptr_t)u;
  return 0;
}

static int bad_stream(PyObject *s) {
  PyObject *tn = type_name(Py_TYPE(s));
  if (!tn)
    return -1;
  PyErr_Format(ArgumentError,
               "argument 'stream' expects None, a stream handle (a non-negative int, 0 = the "
               "legacy default stream) or a stream object (__cuda_stream__, torch.cuda.Stream, "
               "cupy.cuda.Stream), got %U (%R)",
               tn, s);
  Py_DECREF(tn);
  return -1;
}

/* Reading attribute `name` of the stream object raised something other than AttributeError:
 * an ArgumentError chained to it (KeyboardInterrupt and other non-Exceptions pass through). */
static int stream_lookup_failed(PyObject *name) {
  if (!PyErr_ExceptionMatches(PyExc_Exception))
    return -1;
  PyObject *prefix = PyUnicode_FromFormat("argument 'stream': reading .%U failed", name);
  if (prefix) {
    raise_chained(ArgumentError, prefix);
    Py_DECREF(prefix);
  }
  return -1;
}

/* An explicit stream= value (not None) -> driver handle. */
static int parse_stream(PyObject *s, void **out) {
  if (PyLong_Check(s) && !PyBool_Check(s)) {
    if (handle_from_int(s, out) < 0)
      return bad_stream(s);
    return 0;
  }
  PyObject *a = PyObject_GetAttr(s, str_cuda_stream_prot);
  if (a) {
    PyObject *t = PyCallable_Check(a) ? PyObject_CallNoArgs(a) : (Py_INCREF(a), a);
    Py_DECREF(a);
    if (!t) {
      PyObject *prefix = PyUnicode_FromString("argument 'stream': __cuda_stream__() failed");
      if (prefix) {
        raise_chained(ArgumentError, prefix);
        Py_DECREF(prefix);
      }
      return -1;
    }
    int ok = PyTuple_Check(t) && PyTuple_GET_SIZE(t) == 2 &&
             handle_from_int(PyTuple_GET_ITEM(t, 1), out) == 0;
    if (!ok)
      PyErr_Format(ArgumentError,
                   "argument 'stream': __cuda_stream__() must return (version, handle), got %R",
                   t);
    Py_DECREF(t);
    return ok ? 0 : -1;
  }
  if (!PyErr_ExceptionMatches(PyExc_AttributeError))
    return stream_lookup_failed(str_cuda_stream_prot);
  PyErr_Clear();
  PyObject *names[2] = {str_cuda_stream, str_ptr};
  for (int i = 0; i < 2; i++) {
    a = PyObject_GetAttr(s, names[i]);
    if (a) {
      int r = handle_from_int(a, out);
      Py_DECREF(a);
      if (r < 0)
        return bad_stream(s);
      return 0;
    }
    if (!PyErr_ExceptionMatches(PyExc_AttributeError))
      return stream_lookup_failed(names[i]);
    PyErr_Clear();
  }
  return bad_stream(s);
}

/* CuPy's current stream on `device_id`: from CuPy's C API (>= 14.3), else
 * cupy.cuda.get_current_stream(device_id).ptr. 1 read into *out; 0 unknown (no CuPy, or one
 * whose get_current_stream takes no device: *out NULL, the legacy default); -1 error. */
static int cupy_current_stream(int32_t device_id, void **out) {
  *out = NULL;
  const int from_api = cupy_api_stream(device_id, out);
  if (from_api != 0)
    return from_api;
  if (!cupy_get_current_stream) {
    PyObject *mod = PyImport_ImportModule("cupy.cuda");
    if (mod) {
      cupy_get_current_stream = PyObject_GetAttrString(mod, "get_current_stream");
      Py_DECREF(mod);
    }
    if (!cupy_get_current_stream) {
      PyErr_Clear();
      Py_INCREF(Py_None);
      cupy_get_current_stream = Py_None;
    }
  }
  if (cupy_get_current_stream == Py_None || cupy_stream_takes_device == 0)
    return 0;
  PyObject *id = PyLong_FromLong(device_id);
  if (!id)
    return -1;
  PyObject *st = PyObject_CallOneArg(cupy_get_current_stream, id);
  Py_DECREF(id);
  if (!st) {
    if (cupy_stream_takes_device < 0 && PyErr_ExceptionMatches(PyExc_TypeError)) {
      PyErr_Clear();
      cupy_stream_takes_device = 0; /* old CuPy: legacy default stream from now on */
      return 0;
    }
    return -1;
  }
  cupy_stream_takes_device = 1;
  PyObject *ptr = PyObject_GetAttr(st, str_ptr);
  Py_DECREF(st);
  if (!ptr)
    return -1;
  int r = handle_from_int(ptr, out);
  Py_DECREF(ptr);
  if (r < 0)
    PyErr_SetString(DeviceError, "cupy.cuda.get_current_stream().ptr is not a stream handle");
  return r < 0 ? -1 : 1;
}

static wavert_status get_device(int32_t type, int32_t id, wavert_device **out) {
  const int t = type == kDLROCM ? 1 : type == kDLCPU ? 2 : 0; /* one row per backend */
  if (id >= 0 && id < DEVICE_CACHE_SIZE && device_cache[t][id]) {
    *out = device_cache[t][id];
    return WAVERT_OK;
  }
  wavert_status st = wavert_device_get(type, id, out);
  if (st == WAVERT_OK && id >= 0 && id < DEVICE_CACHE_SIZE)
    device_cache[t][id] = *out;
  return st;
}

/* An explicit stream is checked on the call's device before any producer or the driver sees
 * it (wavert_stream_check: special handles, alignment, readable memory, the driver's query).
 * Without the device the call fails later with "no device", so the check is left to it. */
static int check_stream(HostFunction *self, call_state *c) {
  wavert_device *device;
  if (get_device(self->device_type, c->dev_id, &device) != WAVERT_OK)
    return 0;
  const wavert_status st = wavert_stream_check(device, c->stream);
  if (st == WAVERT_OK)
    return 0;
  raise_status_fmt(st, "%U(): argument 'stream' on %s device %d", self->name,
                   device_kind(self->device_type), (int)c->dev_id);
  return -1;
}

/* Phase 2 of a call: the stream on the tensors' device c->dev_id, unless stream= gave one
 * (the order is in the file comment); a stream= is checked here. */
static int choose_stream(HostFunction *self, call_state *c) {
  const int32_t device_id = c->dev_id;
  c->cupy_stream = 0;
  if (self->device_type == kDLCPU) { /* the CPU device or a host program: no stream */
    if (c->explicit_stream) {
      if (self->cpu_device)
        PyErr_Format(ArgumentError,
                     "%U(): stream= was given, but the function runs its kernels on the CPU "
                     "device (target cpu), whose calls finish their work before they return: "
                     "pass no stream",
                     self->name);
      else
        PyErr_Format(ArgumentError,
                     "%U(): stream= was given, but the function belongs to a host program (no "
                     "GPU op; target host), whose calls run on no device: pass no stream",
                     self->name);
      return -1;
    }
    return 0;
  }
  if (c->explicit_stream)
    return check_stream(self, c);
  if (c->stream_api && c->stream_api->current_work_stream) {
    if (c->stream_api->current_work_stream((DLDeviceType)self->device_type, device_id,
                                           &c->stream) != 0) {
      if (!PyErr_Occurred())
        PyErr_SetString(PyExc_RuntimeError, "current_work_stream failed");
      PyObject *prefix = PyUnicode_FromFormat(
          "%U(): could not read the current stream of the DLPack exchange API", self->name);
      if (prefix) {
        raise_chained(DeviceError, prefix);
        Py_DECREF(prefix);
      }
      return -1;
    }
  } else if (c->any_cupy) {
    const int r = cupy_current_stream(device_id, &c->stream);
    c->cupy_stream = r > 0;
    if (r < 0) {
      PyObject *prefix =
          PyUnicode_FromFormat("%U(): could not read CuPy's current stream", self->name);
      if (prefix) {
        raise_chained(DeviceError, prefix);
        Py_DECREF(prefix);
      }
      return -1;
    }
  }
  return 0;
}
