/*
 * launcher.c — the KernelLauncher type: one kernel of a compiled module, launched from Python
 * with grid=, block=, shared_mem= and stream= (part of the native.c unity build).
 *
 * A launcher wraps the HostFunction of the kernel's generated launch function
 * (pywave.host.launchers: the kernel's parameters, then grid x/y/z and block x/y/z as `index`
 * and the dynamic shared memory in bytes as `i32`; its body is one gpu.launch_func). Argument
 * intake, stream choice, the module's lifetime (HostCode) and the launch limits
 * (libwavert's wavert_jit_launch: device grid/block limits, threads per block, shared memory)
 * are therefore the host functions' own. A call checks the launch keywords, appends them as
 * the trailing scalar arguments (launch_params below) and makes the host function's
 * vectorcall; up to LAUNCH_STACK_ARGS kernel arguments need no allocation.
 *
 * Errors: ArgumentError naming the keyword, the value and the rule (grid/block: an int or 1-3
 * ints, each >= 1; shared_mem: 0 to 2**31 - 1); the host function's errors otherwise.
 * Thread-safety: as HostFunction (the GIL protects the state; calls may run concurrently).
 */
#include "native.h"

/* The launch parameters a launcher's host function ends with, in order: their names (not
 * MLIR value names, so they never collide with the kernel's) and scalar kinds. The one
 * definition: exported as pywave._native.LAUNCH_PARAMS ((name, MLIR type) pairs), from which
 * pywave.host.launchers generates the launch functions and pywave.runtime.introspect their
 * signatures. */
static const struct {
  const char *name;
  scalar_kind kind;
} launch_params[] = {
    {"grid[0]", SK_INDEX},  {"grid[1]", SK_INDEX},  {"grid[2]", SK_INDEX},
    {"block[0]", SK_INDEX}, {"block[1]", SK_INDEX}, {"block[2]", SK_INDEX},
    {"shared_mem[bytes]", SK_I32},
};
#define LAUNCH_PARAMS ((Py_ssize_t)(sizeof(launch_params) / sizeof(launch_params[0])))
#define LAUNCH_STACK_ARGS 64

typedef struct {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  HostFunction *function; /* strong: the kernel's launch function */
  PyObject *name;         /* str: "module::kernel" */
  Py_ssize_t nargs;       /* the kernel's own parameters */
} KernelLauncher;

static PyObject *str_grid;       /* "grid" */
static PyObject *str_block;      /* "block" */
static PyObject *str_shared_mem; /* "shared_mem" */

static int same_key(PyObject *key, PyObject *interned) {
  return key == interned || PyUnicode_Compare(key, interned) == 0;
}

/* One grid/block extent or shared_mem as a new int in [low, high]; NULL with ArgumentError
 * naming `what` (and the position `pos` when >= 0) otherwise. */
static PyObject *launch_int(KernelLauncher *self, const char *what, Py_ssize_t pos,
                            PyObject *v, long long low, long long high) {
  if (PyBool_Check(v) || PyFloat_Check(v) || !PyIndex_Check(v)) {
    if (pos >= 0)
      PyErr_Format(ArgumentError, "%U(): %s[%zd] must be an int, got %R", self->name, what,
                   pos, v);
    else
      PyErr_Format(ArgumentError, "%U(): %s must be an int, got %R", self->name, what, v);
    return NULL;
  }
  PyObject *iv = PyNumber_Index(v);
  if (!iv)
    return NULL;
  int overflow = 0;
  long long x = PyLong_AsLongLongAndOverflow(iv, &overflow);
  if (x == -1 && PyErr_Occurred()) {
    Py_DECREF(iv);
    return NULL;
  }
  if (overflow || x < low || x > high) {
    if (pos >= 0)
      PyErr_Format(ArgumentError, "%U(): %s[%zd] = %R is out of range [%lld, %lld]",
                   self->name, what, pos, iv, low, high);
    else
      PyErr_Format(ArgumentError, "%U(): %s = %R is out of range [%lld, %lld]", self->name,
                   what, iv, low, high);
    Py_DECREF(iv);
    return NULL;
  }
  return iv;
}

/* grid= or block=: an int or a tuple/list of 1-3 ints, each >= 1; missing extents are 1.
 * Writes three new references into out[0..3) (none on failure). */
static int launch_dims(KernelLauncher *self, const char *what, PyObject *v, PyObject *out[3]) {
  out[0] = out[1] = out[2] = NULL;
  if (!v) {
    PyErr_Format(ArgumentError,
                 "%U() needs %s= (an int or a tuple of 1 to 3 ints, e.g. %s=(256, 1, 1))",
                 self->name, what, what);
    return -1;
  }
  Py_ssize_t n = 1;
  if (PyTuple_Check(v) || PyList_Check(v)) {
    n = PySequence_Fast_GET_SIZE(v);
    if (n < 1 || n > 3) {
      PyErr_Format(ArgumentError,
                   "%U(): %s must be an int or a tuple of 1 to 3 ints (x, y, z), got %R",
                   self->name, what, v);
      return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
      PyObject *item = PySequence_Fast_GET_ITEM(v, i);
      Py_INCREF(item); /* a list may change under a callback */
      out[i] = launch_int(self, what, i, item, 1, INT64_MAX);
      Py_DECREF(item);
      if (!out[i])
        goto fail;
    }
  } else if (!(out[0] = launch_int(self, what, -1, v, 1, INT64_MAX))) {
    return -1;
  }
  for (Py_ssize_t i = n; i < 3; i++)
    out[i] = PyLong_FromLong(1);
  if (!out[1] || !out[2])
    goto fail;
  return 0;
fail:
  for (int i = 0; i < 3; i++)
    Py_CLEAR(out[i]);
  return -1;
}

static PyObject *kl_vectorcall(PyObject *self_, PyObject *const *args, size_t nargsf,
                               PyObject *kwnames) {
  KernelLauncher *self = (KernelLauncher *)self_;
  const Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  PyObject *grid = NULL, *block = NULL, *shared = NULL, *stream = NULL;
  for (Py_ssize_t i = 0; kwnames && i < PyTuple_GET_SIZE(kwnames); i++) {
    PyObject *key = PyTuple_GET_ITEM(kwnames, i), *value = args[nargs + i];
    if (same_key(key, str_grid))
      grid = value;
    else if (same_key(key, str_block))
      block = value;
    else if (same_key(key, str_shared_mem))
      shared = value;
    else if (same_key(key, str_stream))
      stream = value;
    else {
      if (!PyErr_Occurred())
        PyErr_Format(ArgumentError,
                     "%U() got an unexpected keyword argument '%U' (accepted: grid, block, "
                     "shared_mem, stream)",
                     self->name, key);
      return NULL;
    }
  }
  if (nargs != self->nargs) {
    PyErr_Format(ArgumentError, "%U() takes %zd kernel argument%s, got %zd", self->name,
                 self->nargs, self->nargs == 1 ? "" : "s", nargs);
    return NULL;
  }
  PyObject *launch[LAUNCH_PARAMS] = {NULL};
  PyObject *result = NULL;
  if (launch_dims(self, "grid", grid, launch) < 0 ||
      launch_dims(self, "block", block, launch + 3) < 0)
    goto done;
  launch[6] = shared ? launch_int(self, "shared_mem", -1, shared, 0, INT32_MAX)
                     : PyLong_FromLong(0);
  if (!launch[6])
    goto done;
  /* The host function's arguments: the kernel's, the launch configuration, then stream=. */
  const Py_ssize_t total = nargs + LAUNCH_PARAMS;
  PyObject *stack[LAUNCH_STACK_ARGS + LAUNCH_PARAMS + 1];
  PyObject **call = stack;
  if (nargs > LAUNCH_STACK_ARGS && !(call = PyMem_Malloc((size_t)(total + 1) * sizeof *call))) {
    PyErr_NoMemory();
    goto done;
  }
  for (Py_ssize_t i = 0; i < nargs; i++)
    call[i] = args[i];
  for (int i = 0; i < LAUNCH_PARAMS; i++)
    call[nargs + i] = launch[i];
  call[total] = stream;
  result = hf_vectorcall((PyObject *)self->function, call, (size_t)total,
                         stream ? kw_stream : NULL);
  if (call != stack)
    PyMem_Free(call);
done:
  for (int i = 0; i < LAUNCH_PARAMS; i++)
    Py_XDECREF(launch[i]);
  return result;
}

static PyObject *kl_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
  static char *kwlist[] = {"function", "name", NULL};
  PyObject *function, *name;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!U:KernelLauncher", kwlist, &HostFunction_Type,
                                   &function, &name))
    return NULL;
  HostFunction *fn = (HostFunction *)function;
  int ok = fn->nparams >= LAUNCH_PARAMS;
  for (Py_ssize_t i = 0; ok && i < LAUNCH_PARAMS; i++) {
    const param_t *p = &fn->p[fn->nparams - LAUNCH_PARAMS + i];
    ok = !p->is_memref && !p->is_object && p->kind == launch_params[i].kind;
  }
  if (!ok) {
    PyErr_Format(PyExc_TypeError,
                 "KernelLauncher: %R does not end in the launch parameters "
                 "(pywave._native.LAUNCH_PARAMS)",
                 function);
    return NULL;
  }
  KernelLauncher *self = (KernelLauncher *)type->tp_alloc(type, 0);
  if (!self)
    return NULL;
  self->vectorcall = kl_vectorcall;
  Py_INCREF(function);
  self->function = fn;
  Py_INCREF(name);
  self->name = name;
  self->nargs = fn->nparams - LAUNCH_PARAMS;
  return (PyObject *)self;
}

static int kl_traverse(KernelLauncher *self, visitproc visit, void *arg) {
  Py_VISIT(self->function);
  return 0;
}

static int kl_clear(KernelLauncher *self) {
  Py_CLEAR(self->function);
  return 0;
}

static void kl_dealloc(KernelLauncher *self) {
  PyObject_GC_UnTrack(self);
  kl_clear(self);
  Py_CLEAR(self->name);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *kl_repr(KernelLauncher *self) {
  if (!self->function)
    return PyUnicode_FromFormat("<pywave.KernelLauncher %U>", self->name);
  PyObject *parts = PyList_New(0), *r = NULL;
  if (!parts)
    return NULL;
  for (Py_ssize_t i = 0; i < self->nargs; i++) {
    const param_t *p = &self->function->p[i];
    if (append(parts, PyUnicode_FromFormat("%U: %U", p->name, p->type_str)) < 0)
      goto out;
  }
  PyObject *sep = PyUnicode_FromString(", ");
  PyObject *j = sep ? PyUnicode_Join(sep, parts) : NULL;
  Py_XDECREF(sep);
  if (j)
    r = PyUnicode_FromFormat("<pywave.KernelLauncher %U(%U) device=%s>", self->name, j,
                             device_kind(self->function->device_type));
  Py_XDECREF(j);
out:
  Py_DECREF(parts);
  return r;
}

static PyObject *kl_get_name(KernelLauncher *self, void *closure) {
  (void)closure;
  Py_INCREF(self->name);
  return self->name;
}

static PyObject *kl_get_function(KernelLauncher *self, void *closure) {
  (void)closure;
  PyObject *fn = self->function ? (PyObject *)self->function : Py_None;
  Py_INCREF(fn);
  return fn;
}

static PyObject *kl_get_signature(PyObject *self, void *closure) {
  (void)closure;
  return introspect(self, "signature");
}

static PyObject *kl_get_doc(PyObject *self, void *closure) {
  (void)closure;
  return introspect(self, "doc");
}

static PyGetSetDef kl_getset[] = {
    {"name", (getter)kl_get_name, NULL, "The kernel, as 'module::kernel'.", NULL},
    {"function", (getter)kl_get_function, NULL,
     "The HostFunction of the kernel's launch function (kernel arguments, then grid x/y/z, "
     "block x/y/z, shared memory bytes).",
     NULL},
    {"__signature__", (getter)kl_get_signature, NULL, "inspect.Signature of a launch.", NULL},
    {"__doc__", (getter)kl_get_doc, NULL, "What help() shows: the kernel's parameters.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyDoc_STRVAR(kl_doc, "KernelLauncher(function, name)\n"
                     "--\n\n"
                     "One kernel of a compiled module, launched from Python:\n"
                     "launcher(*kernel_args, grid=(gx, gy, gz), block=(bx, by, bz),\n"
                     "shared_mem=0, stream=None). `function` is the HostFunction of the\n"
                     "kernel's generated launch function, whose last 7 parameters are\n"
                     "grid and block (index) and the dynamic shared memory (i32).");

static PyTypeObject KernelLauncher_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "pywave._native.KernelLauncher",
    .tp_basicsize = sizeof(KernelLauncher),
    .tp_dealloc = (destructor)kl_dealloc,
    .tp_vectorcall_offset = offsetof(KernelLauncher, vectorcall),
    .tp_repr = (reprfunc)kl_repr,
    .tp_call = PyVectorcall_Call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = kl_doc,
    .tp_traverse = (traverseproc)kl_traverse,
    .tp_clear = (inquiry)kl_clear,
    .tp_getset = kl_getset,
    .tp_new = kl_new,
};

/* Called by PyInit__native: the type and its interned keywords. */
/* pywave._native.LAUNCH_PARAMS: launch_params as ((name, MLIR type), ...) (new reference). */
static PyObject *launch_params_tuple(void) {
  PyObject *t = PyTuple_New(LAUNCH_PARAMS);
  for (Py_ssize_t i = 0; t && i < LAUNCH_PARAMS; i++) {
    PyObject *row = Py_BuildValue("(ss)", launch_params[i].name,
                                  scalar_kind_names[launch_params[i].kind]);
    if (!row)
      Py_CLEAR(t);
    else
      PyTuple_SET_ITEM(t, i, row);
  }
  return t;
}

static int launcher_add_type(PyObject *module) {
  if (intern(&str_grid, "grid") || intern(&str_block, "block") ||
      intern(&str_shared_mem, "shared_mem"))
    return -1;
  return add_owned(module, "LAUNCH_PARAMS", launch_params_tuple()) < 0 ||
                 PyModule_AddType(module, &KernelLauncher_Type) < 0
             ? -1
             : 0;
}
