/*
 * hostcode.c — the HostCode type (part of the native.c unity build): the JIT code and kernels
 * of one compiled module, shared by its HostFunctions, its calls in flight and its deferred
 * release.
 *
 * A HostFunction holds its HostCode, so the code lives as long as any function of the module.
 * HostCode.close() marks the code closed; the release itself (the `release` callable: free
 * the JIT code, unload the kernels) is deferred while calls are in flight and run, with the
 * GIL held, by the last call to leave (code_leave), or when the last reference goes. close()
 * therefore never waits and is safe from any thread and from inside a call's own callbacks.
 */
#include "native.h"

/* Run the release once (GIL held). The exception state of the caller is kept; an exception
 * raised by the release is returned (-1) when `report` is 0, else written as unraisable. */
static int code_release(HostCode *code, int report) {
  PyObject *release = code->release;
  if (!release)
    return 0;
  code->release = NULL; /* before the call: a re-entrant close() finds nothing to run */
  code->closed = 1;
  PyObject *saved_type, *saved_value, *saved_tb;
  if (report)
    PyErr_Fetch(&saved_type, &saved_value, &saved_tb);
  PyObject *r = PyObject_CallNoArgs(release);
  Py_DECREF(release);
  int rc = r ? 0 : -1;
  Py_XDECREF(r);
  if (report) {
    if (rc < 0)
      PyErr_WriteUnraisable((PyObject *)code);
    PyErr_Restore(saved_type, saved_value, saved_tb);
  }
  return rc;
}

/* A call leaves: the last one out after close() releases the code. */
static void code_leave(HostCode *code) {
  code->in_flight -= 1;
  if (code->in_flight == 0 && code->closed)
    code_release(code, 1);
}

static PyObject *code_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
  static char *kwlist[] = {"release", NULL};
  PyObject *release;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "O:HostCode", kwlist, &release))
    return NULL;
  if (!PyCallable_Check(release)) {
    PyErr_Format(PyExc_TypeError, "HostCode: release must be callable, got %R", release);
    return NULL;
  }
  HostCode *self = (HostCode *)type->tp_alloc(type, 0);
  if (!self)
    return NULL;
  Py_INCREF(release);
  self->release = release;
  return (PyObject *)self;
}

static PyObject *code_close(HostCode *self, PyObject *unused) {
  (void)unused;
  self->closed = 1;
  if (self->in_flight == 0 && code_release(self, 0) < 0)
    return NULL;
  Py_RETURN_NONE;
}

/* The last reference went (or the code is cyclic garbage): release what was never closed. */
static void code_finalize(HostCode *self) { code_release(self, 1); }

static int code_traverse(HostCode *self, visitproc visit, void *arg) {
  Py_VISIT(self->release);
  return 0;
}

static int code_clear(HostCode *self) {
  Py_CLEAR(self->release);
  return 0;
}

static void code_dealloc(HostCode *self) {
  if (PyObject_CallFinalizerFromDealloc((PyObject *)self) < 0)
    return; /* resurrected by the release */
  PyObject_GC_UnTrack(self);
  code_clear(self);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *code_get_closed(HostCode *self, void *closure) {
  (void)closure;
  return PyBool_FromLong(self->closed);
}

static PyObject *code_get_released(HostCode *self, void *closure) {
  (void)closure;
  return PyBool_FromLong(self->closed && !self->release);
}

static PyObject *code_get_in_flight(HostCode *self, void *closure) {
  (void)closure;
  return PyLong_FromSsize_t(self->in_flight);
}

static PyMethodDef code_methods[] = {
    {"close", (PyCFunction)code_close, METH_NOARGS,
     "close(): new calls raise; the release runs now when no call is in flight, else when "
     "the last call in flight returns (on that call's thread). Never waits. Raises what the "
     "release raises when it runs here; idempotent."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef code_getset[] = {
    {"closed", (getter)code_get_closed, NULL, "close() was called (or the code was released).",
     NULL},
    {"released", (getter)code_get_released, NULL, "The release has run.", NULL},
    {"in_flight", (getter)code_get_in_flight, NULL,
     "Calls of this code's HostFunctions in progress (on any thread, nested ones included).",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyDoc_STRVAR(code_doc,
             "HostCode(release)\n"
             "--\n\n"
             "The host code of one compiled module, shared by its HostFunctions (their\n"
             "code=): each holds it, so the code lives while any of them does.\n"
             "`release()` (no arguments) frees the code and unloads the kernels; it runs\n"
             "exactly once, with the GIL held: at close() when no call is in flight; else\n"
             "when the last call in flight leaves (errors then go to sys.unraisablehook);\n"
             "or when the last reference goes, if never closed. Calls that reach their\n"
             "launch after close() raise ArgumentError 'the compiled module is closed'.\n"
             "The GIL protects the state: any thread may call and close.");

static PyTypeObject HostCode_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "pywave._native.HostCode",
    .tp_basicsize = sizeof(HostCode),
    .tp_dealloc = (destructor)code_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = code_doc,
    .tp_traverse = (traverseproc)code_traverse,
    .tp_clear = (inquiry)code_clear,
    .tp_finalize = (destructor)code_finalize,
    .tp_methods = code_methods,
    .tp_getset = code_getset,
    .tp_new = code_new,
};
