/*
 * hostfunction.c — the HostFunction type: a compiled host function callable from Python
 * (part of the native.c unity build).
 *
 * A HostFunction wraps the JIT entry `void entry(uint64_t *slots)` of one MLIR host function
 * and turns a Python call into slots: each memref argument becomes its descriptor
 * (WAVERT_MEMREF_WORDS(rank) words, filled by wavert_memref_from_dltensor from a DLPack
 * tensor), each scalar one word holding its bits in the low bytes. Everything per call is C:
 * vectorcall, a per-type cache of the DLPack C exchange API (torch), the DLPack protocol called
 * from C for other producers, no allocation on the fast path.
 *
 * A call, in phases (hf_vectorcall):
 *   0. parse_call_keywords: the argument count, keyword `stream` only;
 *   1. in argument order: scalars are range-checked and packed (pack_scalar); each tensor is
 *      classified (classify_tensor: exchange API / protocol / raw capsule), its device read
 *      and checked: the function's device type, one device id for all; an exchange-API
 *      tensor's descriptor is filled at once (its view is borrowed);
 *   2. choose_stream: `stream=` if given; else the exchange API's current_work_stream; else
 *      CuPy's current stream when a CuPy array is among the arguments; else the legacy default;
 *   3. take_tensor: protocol producers are asked for a capsule with __dlpack__(stream=S) so
 *      their pending work is ordered before S; capsules are renamed "used_*" (never consumed
 *      twice) and their deleters run exactly once after the call; descriptors are filled;
 *   4. run_entry: the device (the tensors' device, or ordinal 0 without tensor arguments;
 *      none for a host program, device_type kDLCPU: its call is host-only and opens no
 *      driver), wavert_call_begin, entry(slots) without the GIL, wavert_call_end. The device and stream
 *      reach generated code through libwavert's thread-local call context (wavert_jit.h), the
 *      one hidden channel of the path;
 *   5. build_results (results.c): the result slots after the argument slots become the
 *      return value: None without results, the one result, or a tuple; a memref result a
 *      Memref owning its memory (or keeping the argument it views alive).
 *
 * Lifetime: a HostFunction holds its HostCode (hostcode.c: the module's JIT code and kernels),
 * so the code lives as long as any function of the module. HostCode.close() marks it closed: calls
 * that have not reached phase 4 raise "the compiled module is closed" (the check is made
 * after the call's last Python callback, right before the GIL is released, and `entry` is
 * read there); the release itself is deferred while calls are in flight and run, with the
 * GIL held, by the last call to leave. close() therefore never waits and is safe from any
 * thread and from inside a call's own callbacks (__dlpack__, __index__, stream objects).
 *
 * Errors: ArgumentError (a ValueError subclass) for anything about the arguments, including
 * launch-configuration limits reported by generated code; for a libwavert status, the class
 * of the one table (pywave.runtime.STATUS_ERRORS, given by set_exceptions; errors.c). Until
 * set_exceptions the classes are ValueError / RuntimeError.
 */
#include "native.h"

static int closed_error(HostFunction *self) {
  PyErr_Format(ArgumentError, "%U(): the compiled module is closed", self->name);
  return -1;
}

/* ---------------------------------------------------------------------------------------- */
/* The call                                                                                 */
/* ---------------------------------------------------------------------------------------- */
/* Phase 0: `stream=` (the only keyword) into *stream_obj, and the argument count. */
static int parse_call_keywords(HostFunction *self, PyObject *const *args, Py_ssize_t nargs,
                               PyObject *kwnames, PyObject **stream_obj) {
  *stream_obj = NULL;
  for (Py_ssize_t i = 0; kwnames && i < PyTuple_GET_SIZE(kwnames); i++) {
    PyObject *key = PyTuple_GET_ITEM(kwnames, i);
    if (key == str_stream || PyUnicode_Compare(key, str_stream) == 0) {
      *stream_obj = args[nargs + i];
      continue;
    }
    if (!PyErr_Occurred())
      PyErr_Format(ArgumentError,
                   "%U() got an unexpected keyword argument '%U' (only stream= is accepted)",
                   self->name, key);
    return -1;
  }
  if (nargs != self->nparams) {
    PyErr_Format(ArgumentError, "%U() takes %zd argument%s %U, got %zd", self->name,
                 self->nparams, self->nparams == 1 ? "" : "s", self->signature, nargs);
    return -1;
  }
  return 0;
}

/* Slots and tensor states for one call: on the stack up to STACK_SLOTS / STACK_TENSORS. */
static int call_state_init(HostFunction *self, call_state *c) {
  c->slots = c->slots_buf;
  c->ts = c->ts_buf;
  c->nstate = 0;
  c->stream = NULL;
  c->explicit_stream = 0;
  c->stream_value = NULL;
  c->dev_id = 0;
  c->dev_arg = -1;
  c->stream_api = NULL;
  c->any_cupy = 0;
  c->objects = NULL;
  c->to_take = 0;
  const Py_ssize_t words = self->nslots + self->nresult_slots;
  if (words > STACK_SLOTS && !(c->slots = PyMem_Malloc((size_t)words * sizeof *c->slots))) {
    PyErr_NoMemory();
    return -1;
  }
  if (self->ntensors > STACK_TENSORS &&
      !(c->ts = PyMem_Malloc((size_t)self->ntensors * sizeof *c->ts))) {
    PyErr_NoMemory();
    return -1;
  }
  if (self->wave && self->ntensors &&
      !(c->objects = PyMem_Malloc((size_t)self->ntensors * sizeof *c->objects))) {
    PyErr_NoMemory();
    return -1;
  }
  return 0;
}

/* Run the tensors' deleters and free what call_state_init allocated. */
static void call_state_release(call_state *c) {
  Py_XDECREF(c->stream_value);
  if (c->to_take) /* only pass 3 takes tensors that own something */
    release_tensors(c->ts, c->nstate);
  if (c->slots != c->slots_buf)
    PyMem_Free(c->slots);
  if (c->ts && c->ts != c->ts_buf)
    PyMem_Free(c->ts);
  if (c->objects)
    PyMem_Free(c->objects);
}

/* Phase 4: the call itself on the tensors' device and the chosen stream. */
static int run_entry(HostFunction *self, call_state *c) {
  /* No Python code runs from here to the entry's return: a close() seen here is the last one
   * that can stop this call, and one after it is deferred (the call is in flight). */
  if (self->code && self->code->closed)
    return closed_error(self);
  void (*const entry)(uint64_t *) = self->entry;
  wavert_device *device = NULL; /* a host program's call is host-only: no device, no driver */
  wavert_status st;
  if ((self->device_type != kDLCPU || self->cpu_device) &&
      (st = get_device(self->device_type, self->cpu_device ? 0 : c->dev_id, &device)) !=
          WAVERT_OK) {
    raise_status_fmt(st, "%U(): no %s device %d", self->name, device_kind(self->device_type),
                     (int)c->dev_id);
    return -1;
  }
  if (self->nresult_slots) /* scalar results fill only their low bytes */
    memset(c->slots + self->nslots, 0, (size_t)self->nresult_slots * sizeof *c->slots);
  wavert_call_state state;
  st = wavert_call_begin(device, c->stream, &state);
  if (st != WAVERT_OK) { /* a bad stream handle is the driver's finding, not the caller's */
    raise_status(st == WAVERT_ERROR_INVALID_ARGUMENT ? WAVERT_ERROR_DRIVER : st);
    return -1;
  }
  if (self->wave) { /* slot 0: the stream; the objects' records for the helpers */
    c->slots[0] = (uint64_t)(uintptr_t)c->stream;
    st = wavert_call_set_objects(c->objects, (int32_t)self->ntensors);
    if (st != WAVERT_OK) {
      wavert_call_end(&state);
      raise_status(st);
      return -1;
    }
  }
  /* The GIL is released around the entry although the handoff costs about 415 instructions a
   * call uncontended (bench/launch_instructions.py: 1250 -> 838 for the empty kernel when
   * held): a launch can block while the launch queue is full, and entries may synchronise,
   * copy or allocate; a driver thread running a Python host callback enqueued earlier on the
   * stream needs the GIL to let either finish, so holding it could deadlock. Peers (torch
   * ops, CuPy's launch) release it too. */
  Py_BEGIN_ALLOW_THREADS
  entry(c->slots);
  Py_END_ALLOW_THREADS
  st = wavert_call_end(&state);
  if (st != WAVERT_OK) {
    raise_status(st);
    return -1;
  }
  return 0;
}

static PyObject *hf_vectorcall(PyObject *self_, PyObject *const *args, size_t nargsf,
                               PyObject *kwnames) {
  HostFunction *self = (HostFunction *)self_;
  const Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  HostCode *const code = self->code; /* held below: callbacks may drop every other reference */
  if (code && code->closed) {
    closed_error(self);
    return NULL;
  }
  PyObject *stream_obj;
  if (parse_call_keywords(self, args, nargs, kwnames, &stream_obj) < 0)
    return NULL;
  if (code) {
    Py_INCREF(code);
    code->in_flight += 1;
  }
  call_state c;
  PyObject *result = NULL;
  if (call_state_init(self, &c) < 0)
    goto done;
  c.explicit_stream = stream_obj && stream_obj != Py_None;
  if (c.explicit_stream && parse_stream(stream_obj, &c.stream) < 0)
    goto done;
  /* 1. scalars packed; each tensor's route and device. A function of memrefs only called
   * with tensors of the last exchange-API type (torch) takes the first loop, one type
   * compare a tensor; the general loop takes over at the first argument that is not. */
  Py_ssize_t first = 0;
  if (self->memrefs_only && nargs > 0 && Py_TYPE(args[0]) == last_exchange_type) {
    c.stream_api = last_exchange_api; /* the first tensor's exchange API */
    for (; first < nargs && Py_TYPE(args[first]) == last_exchange_type; first++)
      if (classify_exchange_memref(self, &c, first, args[first]) < 0)
        goto done;
  }
  for (Py_ssize_t i = first; i < nargs; i++) {
    param_t *p = &self->p[i];
    if (p->is_object) {
      if (classify_object(self, &c, i, args[i]) < 0)
        goto done;
    } else if (!p->is_memref) {
      c.slots[p->slot] = 0;
      if (pack_scalar((scalar_kind)p->kind, args[i], &c.slots[p->slot], p->name, i) < 0)
        goto done;
    } else if (Py_TYPE(args[i]) == last_exchange_type) { /* torch's: inlined here */
      if (classify_last_exchange(self, &c, i, args[i]) < 0)
        goto done;
    } else if (classify_tensor(self, &c, i, args[i]) < 0) {
      goto done;
    }
  }
  /* 2. the stream; 3. the tensors taken and their descriptors filled; 4. the call */
  if (choose_stream(self, &c) < 0)
    goto done;
  for (Py_ssize_t i = 0; c.to_take && i < nargs; i++) {
    const param_t *p = &self->p[i];
    const int tensor = p->is_memref ||
                       (p->is_object && c.objects[p->tensor_index].kind == WAVERT_OBJECT_TENSOR);
    if (tensor && take_tensor(self, &c, i, args[i]) < 0)
      goto done;
  }
  if (run_entry(self, &c) < 0)
    goto done;
  result = build_results(self, &c, args);
done:
  call_state_release(&c); /* producers' deleters: Python code that may close the module */
  if (code) {
    code_leave(code);
    Py_DECREF(code);
  }
  return result;
}

/* ---------------------------------------------------------------------------------------- */
/* Construction                                                                             */
/* ---------------------------------------------------------------------------------------- */
/* A HostFunction under construction: hf_new's parts fill it in order; on failure
 * parts_clear releases what they made. */
typedef struct {
  void *entry;
  int device_type;
  int wave;               /* Wave's convention */
  const char *convention; /* "pywave" or "wave" */
  PyObject *code;         /* borrowed: a HostCode, or NULL */
  PyObject *params;       /* owned tuple of parameter objects, or NULL */
  param_t *p;             /* owned: nparams entries */
  Py_ssize_t nparams, ntensors, nslots;
  PyObject *results;      /* owned tuple of result objects, or NULL */
  param_t *r;             /* owned: nresults entries */
  Py_ssize_t nresults, nresult_slots;
  PyObject *signature;    /* owned "(a, s)", or NULL */
} hf_parts;

static void parts_clear(hf_parts *o) {
  free_params(o->p, o->nparams);
  free_params(o->r, o->nresults);
  Py_XDECREF(o->params);
  Py_XDECREF(o->results);
  Py_XDECREF(o->signature);
}

/* The constructor's entry=, device_type=, convention= and code= into `o`, checked
 * (TypeError / ValueError naming the argument and the value). */
static int check_constructor(PyObject *entry_obj, int device_type, const char *convention,
                             PyObject *code, hf_parts *o) {
  o->wave = strcmp(convention, "wave") == 0;
  o->convention = convention;
  if (!o->wave && strcmp(convention, "pywave") != 0) {
    PyErr_Format(PyExc_ValueError,
                 "HostFunction: convention must be \"pywave\" or \"wave\", got '%s'",
                 convention);
    return -1;
  }
  o->code = code == Py_None ? NULL : code;
  if (o->code && !PyObject_TypeCheck(o->code, &HostCode_Type)) {
    PyErr_Format(PyExc_TypeError, "HostFunction: code must be a HostCode or None, got %R",
                 code);
    return -1;
  }
  if (!PyLong_Check(entry_obj)) {
    PyErr_Format(PyExc_TypeError, "HostFunction: entry must be an int address, got %R",
                 entry_obj);
    return -1;
  }
  o->entry = PyLong_AsVoidPtr(entry_obj);
  if (!o->entry) {
    if (!PyErr_Occurred())
      PyErr_SetString(PyExc_ValueError, "HostFunction: entry address is 0");
    return -1;
  }
  if (device_type != kDLCUDA && device_type != kDLROCM && device_type != kDLCPU) {
    PyErr_Format(PyExc_ValueError,
                 "HostFunction: device_type must be 2 (kDLCUDA), 10 (kDLROCM) or 1 (kDLCPU: "
                 "a host program), got %d",
                 device_type);
    return -1;
  }
  o->device_type = device_type;
  return 0;
}

/* `seq` (params= or results=, named `what`) as a new tuple, with its zeroed param_t array;
 * TypeError for a str, bytes or non-sequence. */
static int read_sequence(PyObject *seq, const char *what, PyObject **tuple, param_t **p,
                         Py_ssize_t *n) {
  if (PyUnicode_Check(seq) || PyBytes_Check(seq) || !PySequence_Check(seq)) {
    PyErr_Format(PyExc_TypeError,
                 "HostFunction: %s must be a sequence of parameter objects, got %R", what, seq);
    return -1;
  }
  if (!(*tuple = PySequence_Tuple(seq)))
    return -1;
  *n = PyTuple_GET_SIZE(*tuple);
  if (!(*p = PyMem_Calloc((size_t)(*n ? *n : 1), sizeof **p))) {
    PyErr_NoMemory();
    return -1;
  }
  return 0;
}

/* The parameters: each read (parse_param), names unique, each of the convention's kind. */
static int read_params(PyObject *params_arg, hf_parts *o) {
  if (read_sequence(params_arg, "params", &o->params, &o->p, &o->nparams) < 0)
    return -1;
  for (Py_ssize_t i = 0; i < o->nparams; i++) {
    param_t *p = &o->p[i];
    if (parse_param(PyTuple_GET_ITEM(o->params, i), i, p) < 0)
      return -1;
    for (Py_ssize_t j = 0; j < i; j++) {
      if (PyUnicode_Compare(o->p[j].name, p->name) == 0) {
        PyErr_Format(PyExc_ValueError, "HostFunction: duplicate parameter name '%U'", p->name);
        return -1;
      }
    }
    if (p->is_object != o->wave) {
      PyErr_Format(PyExc_ValueError,
                   "HostFunction: parameter '%U' is %s object, and the convention is '%s' "
                   "(Wave's takes objects only, pywave's memrefs and scalars)",
                   p->name, p->is_object ? "an" : "not an", o->convention);
      return -1;
    }
  }
  return 0;
}

/* Each parameter's first slot and tensor index: a memref takes its descriptor's words, an
 * object (Wave) or a scalar one word; Wave's slot 0 is the stream. */
static void layout_slots(hf_parts *o) {
  Py_ssize_t nslots = o->wave, ntensors = 0;
  for (Py_ssize_t i = 0; i < o->nparams; i++) {
    param_t *p = &o->p[i];
    p->slot = nslots;
    if (p->is_memref || p->is_object) {
      p->tensor_index = ntensors++;
      nslots += p->is_object ? 1 : WAVERT_MEMREF_WORDS(p->mtype.rank);
    } else {
      nslots += 1;
    }
  }
  o->nslots = nslots;
  o->ntensors = ntensors;
}

/* The results (None: none) and their slots, counted from the first result slot. */
static int read_results(PyObject *results_arg, hf_parts *o) {
  if (!results_arg || results_arg == Py_None) {
    o->results = PyTuple_New(0);
    o->r = PyMem_Calloc(1, sizeof *o->r);
    if (!o->results || !o->r) {
      if (o->results)
        PyErr_NoMemory();
      return -1;
    }
    return 0;
  }
  if (read_sequence(results_arg, "results", &o->results, &o->r, &o->nresults) < 0)
    return -1;
  if (o->wave && o->nresults) {
    PyErr_SetString(PyExc_ValueError, "HostFunction: Wave's convention has no results");
    return -1;
  }
  for (Py_ssize_t i = 0; i < o->nresults; i++) {
    param_t *r = &o->r[i];
    if (parse_param(PyTuple_GET_ITEM(o->results, i), i, r) < 0)
      return -1;
    r->slot = o->nresult_slots;
    o->nresult_slots += r->is_memref ? WAVERT_MEMREF_WORDS(r->mtype.rank) : 1;
  }
  return 0;
}

/* "(a, s)": the parameter names, for messages. */
static int make_signature(hf_parts *o) {
  PyObject *names = PyList_New(o->nparams);
  if (!names)
    return -1;
  for (Py_ssize_t i = 0; i < o->nparams; i++) {
    Py_INCREF(o->p[i].name);
    PyList_SET_ITEM(names, i, o->p[i].name);
  }
  PyObject *sep = PyUnicode_FromString(", ");
  PyObject *joined = sep ? PyUnicode_Join(sep, names) : NULL;
  Py_XDECREF(sep);
  Py_DECREF(names);
  o->signature = joined ? PyUnicode_FromFormat("(%U)", joined) : NULL;
  Py_XDECREF(joined);
  return o->signature ? 0 : -1;
}

static PyObject *hf_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
  static char *kwlist[] = {"entry",   "name",       "params",     "device_type", "code",
                           "results", "convention", "cpu_device", NULL};
  PyObject *entry_obj, *name, *params_arg, *code = NULL, *results_arg = NULL;
  const char *convention = "pywave";
  int device_type, cpu_device = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "OUOi|$OOsp:HostFunction", kwlist, &entry_obj,
                                   &name, &params_arg, &device_type, &code, &results_arg,
                                   &convention, &cpu_device))
    return NULL;
  if (cpu_device && device_type != kDLCPU) {
    PyErr_Format(PyExc_ValueError,
                 "HostFunction: cpu_device=True needs device_type 1 (kDLCPU), got %d",
                 device_type);
    return NULL;
  }
  hf_parts o = {0};
  if (check_constructor(entry_obj, device_type, convention, code, &o) < 0 ||
      read_params(params_arg, &o) < 0)
    goto fail;
  layout_slots(&o);
  if (read_results(results_arg, &o) < 0 || make_signature(&o) < 0)
    goto fail;
  HostFunction *self = (HostFunction *)type->tp_alloc(type, 0);
  if (!self)
    goto fail;
  self->vectorcall = hf_vectorcall;
  self->entry = (void (*)(uint64_t *))(uintptr_t)o.entry;
  Py_INCREF(name);
  self->name = name;
  Py_XINCREF(o.code);
  self->code = (HostCode *)o.code;
  self->device_type = o.device_type;
  self->cpu_device = cpu_device;
  self->wave = o.wave;
  /* The rest moves over: its references and allocations are the function's now. */
  self->params = o.params;
  self->p = o.p;
  self->nparams = o.nparams;
  self->ntensors = o.ntensors;
  self->nslots = o.nslots;
  self->memrefs_only = !o.wave && o.ntensors == o.nparams;
  self->results = o.results;
  self->r = o.r;
  self->nresults = o.nresults;
  self->nresult_slots = o.nresult_slots;
  self->signature = o.signature;
  return (PyObject *)self;
fail:
  parts_clear(&o);
  return NULL;
}

static int hf_traverse(HostFunction *self, visitproc visit, void *arg) {
  Py_VISIT(self->code);
  Py_VISIT(self->params);
  Py_VISIT(self->results);
  return 0;
}

static int hf_clear(HostFunction *self) {
  Py_CLEAR(self->code);
  return 0;
}

static void hf_dealloc(HostFunction *self) {
  PyObject_GC_UnTrack(self);
  hf_clear(self);
  Py_CLEAR(self->name);
  Py_CLEAR(self->params);
  Py_CLEAR(self->signature);
  free_params(self->p, self->nparams);
  self->p = NULL;
  free_params(self->r, self->nresults);
  self->r = NULL;
  Py_CLEAR(self->results);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *hf_repr(HostFunction *self) {
  PyObject *parts = PyList_New(0), *r = NULL;
  if (!parts)
    return NULL;
  for (Py_ssize_t i = 0; i < self->nparams; i++)
    if (append(parts, PyUnicode_FromFormat("%U: %U", self->p[i].name, self->p[i].type_str)) < 0)
      goto out;
  PyObject *sep = PyUnicode_FromString(", ");
  PyObject *j = sep ? PyUnicode_Join(sep, parts) : NULL;
  Py_XDECREF(sep);
  if (j)
    r = PyUnicode_FromFormat("<pywave._native.HostFunction %U(%U) device=%s>", self->name, j,
                             device_kind(self->device_type));
  Py_XDECREF(j);
out:
  Py_DECREF(parts);
  return r;
}

static PyObject *hf_get_name(HostFunction *self, void *closure) {
  (void)closure;
  Py_INCREF(self->name);
  return self->name;
}

static PyObject *hf_get_params(HostFunction *self, void *closure) {
  (void)closure;
  Py_INCREF(self->params);
  return self->params;
}

static PyObject *hf_get_results(HostFunction *self, void *closure) {
  (void)closure;
  Py_INCREF(self->results);
  return self->results;
}

static PyObject *hf_get_device_type(HostFunction *self, void *closure) {
  (void)closure;
  return PyLong_FromLong(self->device_type);
}

static PyObject *hf_get_convention(HostFunction *self, void *closure) {
  (void)closure;
  return PyUnicode_FromString(self->wave ? "wave" : "pywave");
}

static PyObject *hf_get_code(HostFunction *self, void *closure) {
  (void)closure;
  PyObject *code = self->code ? (PyObject *)self->code : Py_None;
  Py_INCREF(code);
  return code;
}

/* `__signature__` and `__doc__` are built when asked for, by
 * pywave.runtime.introspect.<what>(obj). */
static PyObject *introspect(PyObject *obj, const char *what) {
  PyObject *mod = PyImport_ImportModule("pywave.runtime.introspect");
  if (!mod)
    return NULL;
  PyObject *r = PyObject_CallMethod(mod, what, "O", obj);
  Py_DECREF(mod);
  return r;
}

static PyObject *hf_get_signature(PyObject *self, void *closure) {
  (void)closure;
  return introspect(self, "signature");
}

static PyObject *hf_get_doc(PyObject *self, void *closure) {
  (void)closure;
  return introspect(self, "doc");
}

static PyGetSetDef hf_getset[] = {
    {"name", (getter)hf_get_name, NULL, "Name of the host function.", NULL},
    {"params", (getter)hf_get_params, NULL, "The parameter objects given at construction (a tuple).", NULL},
    {"results", (getter)hf_get_results, NULL,
     "The result objects given at construction (a tuple; empty: the call returns None).",
     NULL},
    {"device_type", (getter)hf_get_device_type, NULL,
     "DLPack device type (2 CUDA, 10 ROCm; 1 CPU: a host program, no device).", NULL},
    {"code", (getter)hf_get_code, NULL, "The HostCode holding the entry (kept alive), or None.",
     NULL},
    {"convention", (getter)hf_get_convention, NULL,
     "\"pywave\" (memref and scalar parameters) or \"wave\" (Wave's host wrappers: the stream, "
     "then any Python objects).",
     NULL},
    {"__signature__", (getter)hf_get_signature, NULL,
     "inspect.Signature: the parameters (names, tensor dtypes and shapes), then stream=; the "
     "return annotation is what a call returns (None, Memref[dtype, shape], int/float/bool, or "
     "a tuple of them).",
     NULL},
    {"__doc__", (getter)hf_get_doc, NULL,
     "What help() shows: this function's parameters and results.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyDoc_STRVAR(hf_doc,
             "HostFunction(entry, name, params, device_type, *, code=None, results=None,\n"
             "             convention='pywave')\n"
             "--\n\n"
             "A compiled host function: call it with DLPack tensors and scalars, and\n"
             "optionally stream=. `entry` is the address of `void entry(uint64_t *slots)`;\n"
             "`params` a sequence of parameter objects (pywave's Param: name, kind, scalar,\n"
             "dtype, flags, sizes, strides, offset, written), read once here;\n"
             "`device_type` the DLPack device type (2 CUDA, 10 ROCm; 1 CPU: a host program\n"
             "whose calls open no device and take host tensors, kDLCPU or pinned host\n"
             "memory kDLCUDAHost/kDLROCMHost, and no stream=); `code` the HostCode\n"
             "holding `entry`, kept alive as long as this object: its calls are counted in\n"
             "flight, and after code.close() a call raises before it runs `entry` (the\n"
             "release waits for the calls in flight; see HostCode). `results`: parameter\n"
             "objects of the results (plus `memory`: \"device\" or \"\"); a call returns\n"
             "None, the one result or a tuple: scalars as bool/int/float, memrefs as Memref\n"
             "objects (DLPack, __cuda_array_interface__) owning their memory.\n"
             "convention='wave': Wave's host wrappers; `params` are objects (kind \"object\")\n"
             "and the entry's slot 0 is the call's stream, each object's slot the address of\n"
             "its wavert_object record, read by Wave's helpers in libwavert (objects.c).\n\n"
             "A call raises ArgumentError for an argument that does not fit (count, keyword,\n"
             "dtype, shape, layout, device, read-only, scalar range, launch limits) and\n"
             "DeviceError for a driver failure; see set_exceptions.");

static PyTypeObject HostFunction_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "pywave._native.HostFunction",
    .tp_basicsize = sizeof(HostFunction),
    .tp_dealloc = (destructor)hf_dealloc,
    .tp_vectorcall_offset = offsetof(HostFunction, vectorcall),
    .tp_repr = (reprfunc)hf_repr,
    .tp_call = PyVectorcall_Call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = hf_doc,
    .tp_traverse = (traverseproc)hf_traverse,
    .tp_clear = (inquiry)hf_clear,
    .tp_getset = hf_getset,
    .tp_new = hf_new,
};
