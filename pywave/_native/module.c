/*
 * module.c — the module pywave._native (part of the native.c unity build): its functions
 * (set_exceptions, result_frees, _pack_scalar), interned names and types.
 */
#include "native.h"

static PyObject *set_exceptions(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
  (void)mod;
  if (nargs != 3 || !PyExceptionClass_Check(args[0]) || !PyExceptionClass_Check(args[1]) ||
      !PyDict_Check(args[2])) {
    PyErr_SetString(PyExc_TypeError,
                    "set_exceptions(ArgumentError, DeviceError, status_errors) takes two "
                    "exception classes and a dict {libwavert status: exception class}");
    return NULL;
  }
  Py_ssize_t pos = 0;
  PyObject *key, *value;
  while (PyDict_Next(args[2], &pos, &key, &value)) {
    if (!PyLong_Check(key) || !PyExceptionClass_Check(value)) {
      PyErr_Format(PyExc_TypeError,
                   "set_exceptions: status_errors maps int codes to exception classes, got "
                   "%R: %R",
                   key, value);
      return NULL;
    }
  }
  Py_INCREF(args[0]);
  Py_SETREF(ArgumentError, args[0]);
  Py_INCREF(args[1]);
  Py_SETREF(DeviceError, args[1]);
  PyObject *copy = PyDict_Copy(args[2]);
  if (!copy)
    return NULL;
  Py_XSETREF(status_errors, copy);
  Py_RETURN_NONE;
}

static PyObject *pack_scalar_py(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
  (void)mod;
  if (nargs != 2 || !PyUnicode_Check(args[0])) {
    PyErr_SetString(PyExc_TypeError, "_pack_scalar(kind, value)");
    return NULL;
  }
  for (int i = 0; i < SK_COUNT; i++) {
    if (PyUnicode_CompareWithASCIIString(args[0], scalar_kind_names[i]) == 0) {
      uint64_t out = 0;
      if (pack_scalar((scalar_kind)i, args[1], &out, NULL, 0) < 0)
        return NULL;
      return PyLong_FromUnsignedLongLong(out);
    }
  }
  PyErr_Format(PyExc_ValueError, "unknown scalar kind %R", args[0]);
  return NULL;
}

static PyMethodDef module_methods[] = {
    {"set_exceptions", (PyCFunction)(void (*)(void))set_exceptions, METH_FASTCALL,
     "set_exceptions(ArgumentError, DeviceError, status_errors): the classes raised for bad "
     "arguments and for device failures, and the class of each libwavert status reported by "
     "a call (pywave.runtime.STATUS_ERRORS; a status missing from it raises DeviceError)."},
    {"result_frees", (PyCFunction)result_frees, METH_NOARGS,
     "result_frees() -> (host, device): memory blocks freed so far by returned Memrefs "
     "(free() and the driver's free), for diagnostics and tests."},
    {"_pack_scalar", (PyCFunction)(void (*)(void))pack_scalar_py, METH_FASTCALL,
     "_pack_scalar(kind, value) -> int: the slot word a scalar argument becomes (testing)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef native_module = {
    PyModuleDef_HEAD_INIT, .m_name = "pywave._native",
    .m_doc = "The native per-call path of pywave host functions.", .m_size = -1,
    .m_methods = module_methods,
};

/* *slot = the interned str `s` (strong, kept for the process); -1 with MemoryError. */
static int intern(PyObject **slot, const char *s) {
  *slot = PyUnicode_InternFromString(s);
  return *slot ? 0 : -1;
}

/* module.name = value, taking the reference to `value` whatever happens; NULL `value` (its
 * error already set) fails. 0, or -1 with an exception set. */
static int add_owned(PyObject *module, const char *name, PyObject *value) {
  int r = value ? PyModule_AddObjectRef(module, name, value) : -1;
  Py_XDECREF(value);
  return r;
}

PyMODINIT_FUNC PyInit__native(void) {
  if (intern(&str_dlpack, "__dlpack__") || intern(&str_dlpack_device, "__dlpack_device__") ||
      intern(&str_exchange_api, "__dlpack_c_exchange_api__") ||
      intern(&str_exchange_api_v12, "__c_dlpack_exchange_api__") ||
      intern(&str_cuda_stream_prot, "__cuda_stream__") ||
      intern(&str_cuda_stream, "cuda_stream") || intern(&str_ptr, "ptr") ||
      intern(&str_stream, "stream") || intern(&str_module, "__module__") ||
      intern(&str_qualname, "__qualname__"))
    return NULL;
  PyObject *s_maxver = PyUnicode_InternFromString("max_version");
  if (!s_maxver)
    return NULL;
  kw_stream_maxver = PyTuple_Pack(2, str_stream, s_maxver);
  kw_stream = PyTuple_Pack(1, str_stream);
  kw_maxver = PyTuple_Pack(1, s_maxver);
  Py_DECREF(s_maxver);
  max_version = Py_BuildValue("(ii)", DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION);
  if (!kw_stream_maxver || !kw_stream || !kw_maxver || !max_version)
    return NULL;
  if (!ArgumentError) {
    Py_INCREF(PyExc_ValueError);
    ArgumentError = PyExc_ValueError;
    Py_INCREF(PyExc_RuntimeError);
    DeviceError = PyExc_RuntimeError;
  }
  PyObject *m = PyModule_Create(&native_module);
  if (!m)
    return NULL;
  /* PyModule_AddType readies each type and names it by its tp_name's last part. */
  if (PyModule_AddType(m, &HostFunction_Type) < 0 || PyModule_AddType(m, &HostCode_Type) < 0 ||
      PyModule_AddType(m, &Memref_Type) < 0 || launcher_add_type(m) < 0 || add_tables(m) < 0 ||
      add_owned(m, "DYNAMIC", PyLong_FromLongLong(WAVERT_DYNAMIC)) < 0 ||
      PyModule_AddIntConstant(m, "MEMREF_SIGNLESS", WAVERT_MEMREF_SIGNLESS) < 0 ||
      PyModule_AddIntConstant(m, "MEMREF_STRIDED", WAVERT_MEMREF_STRIDED) < 0 ||
      PyModule_AddIntConstant(m, "STACK_SLOTS", STACK_SLOTS) < 0 ||
      PyModule_AddIntConstant(m, "STACK_TENSORS", STACK_TENSORS) < 0) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
