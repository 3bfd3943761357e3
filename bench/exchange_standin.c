/*
 * exchange_standin.c — a DLPack C exchange API (the route torch >= 2.10 tensors take into
 * pywave) implemented in C, for counting the instructions of pywave's per-call path with
 * callgrind without torch or a GPU (bench/launch_instructions.py). Not a producer to use.
 *
 * The Python side (launch_instructions.py) makes a class with
 * `__dlpack_c_exchange_api__ = standin_exchange_api_capsule()` and `__slots__ = ("dl",)`;
 * `dl` holds the address of a DLTensor (ctypes memory that outlives the calls).
 * dltensor_from_py_object_no_sync copies that DLTensor (one attribute read: about what torch's
 * unpacking of a tensor costs); current_work_stream answers 0, the legacy default stream,
 * as torch does on its default stream.
 *
 * Build: cc -std=c11 -O2 -shared -fPIC $(python3-config --includes) -Ilibwavert/include \
 *        -Ipywave/_native bench/exchange_standin.c -o libexchange_standin.so
 * Loaded with ctypes.PyDLL (its functions need the GIL, which the caller holds).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#include "dlpack_exchange.h"

static PyObject *name_dl;

static int from_py(void *py_object, DLTensor *out) {
  PyObject *address = PyObject_GetAttr((PyObject *)py_object, name_dl);
  if (address == NULL) return -1;
  void *tensor = PyLong_AsVoidPtr(address);
  Py_DECREF(address);
  if (tensor == NULL) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "dl is 0");
    return -1;
  }
  memcpy(out, tensor, sizeof(*out));
  return 0;
}

static int work_stream(DLDeviceType device_type, int32_t device_id, void **out) {
  (void)device_type, (void)device_id;
  *out = NULL;
  return 0;
}

static DLPackExchangeAPI api = {
    .header = {.version = {1, 3}, .prev_api = NULL},
    .dltensor_from_py_object_no_sync = from_py,
    .current_work_stream = work_stream,
};

/* A new capsule "dlpack_exchange_api" of the static table (NULL with an exception set). */
PyObject *standin_exchange_api_capsule(void) {
  if (name_dl == NULL && (name_dl = PyUnicode_InternFromString("dl")) == NULL) return NULL;
  return PyCapsule_New(&api, "dlpack_exchange_api", NULL);
}
