/*
 * exchange_floor.c — the producer's share of a tensor argument: a C loop of DLPack C exchange
 * API conversions (dltensor_from_py_object_no_sync, the route torch tensors take into pywave),
 * called by bench/launch.py through ctypes in the benchmark's own process and thread, so that
 * its rounds interleave with the launchers'. Any consumer of torch tensors through the exchange
 * API pays this per tensor; what pywave adds on top is its own (argument-count curve).
 *
 * Build:  cc -std=c11 -O2 -shared -fPIC $(python3-config --includes) -Ilibwavert/include \
 *         -Ipywave/_native bench/exchange_floor.c -o libexchange_floor.so
 * Loaded with ctypes.PyDLL: its function takes Python objects and sets a Python exception on
 * failure, so it needs the GIL, which the caller holds.
 *
 * API:
 *   int exchange_floor_run(PyObject *tensors, long long calls, double *seconds)
 *       `tensors`: a tuple of objects of one type publishing __dlpack_c_exchange_api__ (a
 *       capsule "dlpack_exchange_api", DLPack 1.x). Converts each tensor `calls` times, tensor
 *       by tensor per call as pywave does, into one DLTensor per tensor; `seconds`: the
 *       CLOCK_MONOTONIC time of the loop. Returns 0, or -1 with a Python exception set (not a
 *       tuple, no exchange API, a conversion failing).
 */
#define _POSIX_C_SOURCE 200809L
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <time.h>

#include "dlpack_exchange.h"

#if defined(__GNUC__)
#define EXPORT __attribute__((visibility("default")))
#else
#define EXPORT
#endif

/* The exchange API of `type`, or NULL with a Python exception set. */
static const DLPackExchangeAPI *exchange_api(PyTypeObject *type) {
  PyObject *capsule = PyObject_GetAttrString((PyObject *)type, "__dlpack_c_exchange_api__");
  if (capsule == NULL) return NULL;
  const DLPackExchangeAPI *api = PyCapsule_GetPointer(capsule, "dlpack_exchange_api");
  Py_DECREF(capsule); /* valid for the life of the type, which the tensors hold */
  if (api == NULL) return NULL;
  if (api->header.version.major != DLPACK_MAJOR_VERSION ||
      api->dltensor_from_py_object_no_sync == NULL) {
    PyErr_Format(PyExc_TypeError, "%s: exchange API of DLPack %u.%u without "
                 "dltensor_from_py_object_no_sync", type->tp_name,
                 (unsigned)api->header.version.major, (unsigned)api->header.version.minor);
    return NULL;
  }
  return api;
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

EXPORT int exchange_floor_run(PyObject *tensors, long long calls, double *seconds) {
  if (!PyTuple_Check(tensors) || PyTuple_GET_SIZE(tensors) == 0 || calls < 0 ||
      seconds == NULL) {
    PyErr_SetString(PyExc_ValueError, "exchange_floor_run(non-empty tuple, calls >= 0, "
                    "seconds pointer)");
    return -1;
  }
  const Py_ssize_t n = PyTuple_GET_SIZE(tensors);
  PyTypeObject *type = Py_TYPE(PyTuple_GET_ITEM(tensors, 0));
  for (Py_ssize_t i = 1; i < n; i++)
    if (Py_TYPE(PyTuple_GET_ITEM(tensors, i)) != type) {
      PyErr_SetString(PyExc_TypeError, "exchange_floor_run: tensors of one type only");
      return -1;
    }
  const DLPackExchangeAPI *api = exchange_api(type);
  if (api == NULL) return -1;
  DLTensor *views = PyMem_Calloc((size_t)n, sizeof *views);
  if (views == NULL) {
    PyErr_NoMemory();
    return -1;
  }
  int rc = 0;
  const double start = now();
  for (long long c = 0; c < calls && rc == 0; c++)
    for (Py_ssize_t i = 0; i < n; i++)
      if (api->dltensor_from_py_object_no_sync(PyTuple_GET_ITEM(tensors, i), &views[i]) != 0) {
        rc = -1;
        break;
      }
  *seconds = now() - start; /* the conversions are calls through a pointer: none elided */
  PyMem_Free(views);
  if (rc != 0 && !PyErr_Occurred())
    PyErr_SetString(PyExc_RuntimeError, "dltensor_from_py_object_no_sync failed");
  return rc;
}
