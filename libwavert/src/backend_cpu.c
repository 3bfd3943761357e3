/*
 * backend_cpu.c — the CPU device (DLPack kDLCPU, ordinal 0): kernels compiled for the host
 * by pywave (pywave/kernels/cpu.py) run on a pool of host threads. Host memory is device
 * memory: allocation is an aligned malloc, copies are memcpy. Work with no stream runs on the
 * calling thread before the call returns (the fast path: host code that makes no stream,
 * every Python call); a stream is a queue run in order by a worker thread of its own,
 * concurrently with other streams, events order streams, and a failure on a stream is
 * reported by the next synchronize, as the CUDA driver reports one ("streams and events"
 * below).
 *
 * The image is an ELF shared object for the host (what `cc -shared` makes of the kernels'
 * object code). module_load writes it into a sealed memfd and dlopens that (RTLD_LOCAL), so
 * two loads of the same bytes are two modules and nothing touches the file system. The image
 * ABI (WAVERT_CPU_ABI, checked at load through the symbol `__wavert_cpu_abi`):
 *   - per kernel K, `void __wavert_cpu_thread_K(void **params, wavert__cpu_thread *thread)`
 *     runs one GPU thread of K, and, only when K's gpu.module has no gpu.barrier,
 *     `void __wavert_cpu_block_K(void **params, wavert__cpu_thread *thread)` runs every
 *     thread of one block (x fastest), writing thread->thread_id itself;
 *   - `params` is the launch's array of pointers to each kernel argument (MLIR's launch
 *     ABI, exactly what the GPU backends pass to the driver);
 *   - per kernel K, `const int64_t __wavert_cpu_args_K[]`: its argument count n, then the n
 *     arguments' byte sizes (a launch queued on a stream copies the values `params` points
 *     to, which live on the host code's stack, as a GPU driver copies them at the launch);
 *   - the generated code reads ids and dims from `thread` (through a thread-local pointer it
 *     sets on entry) and calls its functions: barrier (gpu.barrier), publish/read (lane
 *     exchanges of gpu.shuffle, gpu.subgroup_reduce, gpu.all_reduce), print (gpu.printf),
 *     assert_fail (a failed cf.assert: CUDA's line on stderr, the thread stopped, the launch
 *     failing with WAVERT_ERROR_KERNEL_FAULT; kernels with cf.assert always run as fibers);
 *   - workgroup memory is thread-local storage of the image: one copy per pool thread, and
 *     a pool thread runs one block at a time, so each running block has its own.
 *
 * Blocks: spread over the pool (the launching thread included: the caller, or the worker
 * of the launch's stream) by an atomic block counter; grids of at most
 * WAVERT_CPU_SERIAL_THREADS GPU threads run on the launching thread alone, and so does a
 * launch while the pool's threads serve another (launches of two streams run concurrently).
 * Pool threads spin a while (WAVERT_CPU_SPIN) for the next launch before they sleep on a
 * condition variable. Threads of a block: with a block function, its loop; otherwise one
 * fiber per GPU thread (a user-space context switch: x86-64 and AArch64 assembly below,
 * ucontext elsewhere; WAVERT_CPU_STACK_BYTES or $WAVERT_CPU_STACK_KIB of stack each, a guard
 * page below, an overflow a fatal message). A fiber runs until it waits (barrier, warp or
 * block exchange) or returns, then resumes the next live fiber of the block in thread order.
 * A barrier (of the block, or of a warp of 32 consecutive threads) counts its arrivals and
 * opens when every live thread of it has arrived (a block barrier: the block then goes on
 * from its first live fiber, in thread order again) (threads that returned no longer take
 * part, as on the GPU); a round in which no thread arrives anywhere is a deadlock, reported
 * by the launch. Fibers run in thread order: a block's execution is deterministic.
 * $WAVERT_CPU_THREADS sets the pool size (1: every block on the calling thread, in order,
 * a deterministic run); default: the online CPUs.
 *
 * Checked mode (images exporting `__wavert_cpu_checked`, pywave's checks=True): every kernel
 * runs as fibers; a failed check (`fault`: an out-of-bounds access) stops the block (the
 * failing fiber is never resumed) and the launch fails with WAVERT_ERROR_KERNEL_FAULT, the
 * message naming the kernel, block, thread, op, index and memref (the first failing block's
 * of the launch). Barriers need every thread of the block (or warp), at the same op: a thread
 * returning while another waits, or threads at different barriers, are such failures.
 * `access` keeps, per workgroup-memory element, its writer and readers since the block's last
 * barrier (a hash table per pool thread, emptied by a new epoch) and reports a conflicting
 * pair of threads as a data race.
 */
#define _GNU_SOURCE /* memfd_create, MAP_ANONYMOUS */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"

/* Version of the image ABI above; pywave/kernels/cpu.py's CPU_ABI must equal it. */
#define WAVERT_CPU_ABI 6
/* Default stack of one GPU thread run as a fiber, a guard page below it
 * ($WAVERT_CPU_STACK_KIB overrides it, 16 to 65536). 64 KiB hold the kernel's frames (its
 * private memref.alloca buffers included) and the C library's printf; a fiber that runs
 * past it touches the guard page and the process stops with a message naming the size. */
#define WAVERT_CPU_STACK_BYTES (64 * 1024)
/* Threads per block: as on CUDA GPUs (a block's fibers need this many stacks). */
#define WAVERT_CPU_MAX_THREADS 1024
/* Lanes of a subgroup (warp): 32, as on NVIDIA GPUs; pywave/kernels/cpu.py SUBGROUP_SIZE. */
#define WAVERT_CPU_WARP 32
/* Dynamic workgroup memory per block: the size of the image's thread-local array that
 * gpu.dynamic_shared_memory addresses (pywave/kernels/cpu.py DYNAMIC_SHARED_BYTES). */
#define WAVERT_CPU_DYNAMIC_SHARED 65536
#define WAVERT_CPU_STATIC_SHARED 49152
/* Grids of at most this many GPU threads run on the calling thread: waking the pool costs
 * more than they take. */
#define WAVERT_CPU_SERIAL_THREADS 4096
/* Arguments of a kernel (its __wavert_cpu_args_ table is checked against it at load). */
#define WAVERT_CPU_MAX_ARGS 65536
/* A stream's worker thread ends after this long without work (the next item starts one). */
#define WAVERT_CPU_STREAM_IDLE_MS 200
/* Bytes of a stream's failure message (the launch's, with its kernel, block and thread). */
#define WAVERT_CPU_MESSAGE 2048

/* One GPU thread as generated code sees it; the layout is the image ABI (cpu.py). */
typedef struct wavert__cpu_thread wavert__cpu_thread;
struct wavert__cpu_thread {
  int64_t thread_id[3];
  int64_t block_id[3];
  int64_t block_dim[3];
  int64_t grid_dim[3];
  void (*barrier)(wavert__cpu_thread *thread);
  void *fibers; /* the block's fiber set while it runs */
  /* Lane exchange: publish `value` for the thread's warp (scope 0) or block (scope 1) and
   * wait until every live thread of it has published; read returns what thread `index` of
   * the scope published at the last exchange (the caller's own value when `index` names no
   * thread of the scope). */
  void (*publish)(wavert__cpu_thread *thread, int64_t scope, int64_t value);
  int64_t (*read)(wavert__cpu_thread *thread, int64_t scope, int64_t index);
  /* gpu.printf: the format and the argument buffer of NVIDIA's vprintf ABI. */
  void (*print)(const char *format, const void *args);
  int64_t index; /* linear thread id in the block */
  /* Checked mode (images with `__wavert_cpu_checked`). fault: a failed check; `what` names
   * the op, the failure and the memref, `where` the source line; with `rank` in 1..4 the
   * index values and the memref's sizes follow. The thread is stopped (not resumed). */
  void (*fault)(wavert__cpu_thread *thread, const char *what, const char *where, int64_t rank,
                int64_t i0, int64_t i1, int64_t i2, int64_t i3, int64_t s0, int64_t s1,
                int64_t s2, int64_t s3);
  /* A load (write 0) or store (write 1) of the workgroup-memory element at `address`
   * (`what` names the op and the memref, `where` the line; `rank` index values follow). */
  void (*access)(wavert__cpu_thread *thread, const void *address, int64_t write,
                 const char *what, const char *where, int64_t rank, int64_t i0, int64_t i1,
                 int64_t i2, int64_t i3);
  const char *site; /* set before a barrier call: the gpu.barrier's source line, else NULL */
  /* cf.assert failed (NVIDIA's __assertfail ABI, the lowering's message, file, line and
   * function): prints CUDA's line to stderr and stops the thread (not resumed, as `fault`). */
  void (*assert_fail)(wavert__cpu_thread *thread, const char *message, const char *file,
                      uint32_t line, const char *function);
  /* Blocks per thread-block cluster (gpu.cluster_dim_blocks; 1, 1, 1 for a launch without
   * clusters): the image derives cluster_id, cluster_dim and cluster_block_id from it. */
  int64_t cluster_dim[3];
};
_Static_assert(sizeof(wavert__cpu_thread) == 25 * 8, "wavert__cpu_thread layout");

typedef void (*cpu_kernel)(void **params, wavert__cpu_thread *thread);

typedef struct cpu_function {
  struct cpu_function *next; /* the module's list, freed with it */
  cpu_kernel block;          /* NULL: the kernel needs fibers */
  cpu_kernel thread;
  int checked;               /* the image was compiled with checks (pywave checks=True) */
  /* `__wavert_cpu_args_K`: the argument count, then each argument's byte size (what a
   * launch queued on a stream copies out of the caller's parameter array). */
  const int64_t *args;
  char name[];               /* the kernel's name */
} cpu_function;

typedef struct {
  void *handle; /* dlopen's */
  int fd;
  int checked;
  cpu_function *functions; /* appended under the wavert_module's mutex */
} cpu_module;

/* ---- fiber context switch ------------------------------------------------------------------
 * x86-64 (System V) and AArch64: a few instructions that save the callee-saved registers on
 * the running stack, store its stack pointer and resume the other stack (no system call;
 * MXCSR and FPCR are left alone: every fiber of a pool thread runs the same kernel code,
 * which does not change them). Elsewhere ucontext's swapcontext. */
#if defined(__x86_64__) || defined(__aarch64__)
#define WAVERT_CPU_FAST_SWITCH 1
typedef struct {
  void *sp;
} fiber_context;
void wavert__cpu_switch(void **save, void *resume);
void wavert__cpu_fiber_start(void);
#if defined(__x86_64__)
__asm__(".text\n"
        ".globl wavert__cpu_switch\n.hidden wavert__cpu_switch\n"
        ".type wavert__cpu_switch,@function\n"
        "wavert__cpu_switch:\n"
        "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
        "  movq %rsp, (%rdi)\n  movq %rsi, %rsp\n"
        "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
        "  ret\n"
        ".size wavert__cpu_switch, .-wavert__cpu_switch\n"
        ".globl wavert__cpu_fiber_start\n.hidden wavert__cpu_fiber_start\n"
        ".type wavert__cpu_fiber_start,@function\n"
        "wavert__cpu_fiber_start:\n" /* first resume: r12 the argument, r13 the entry */
        "  movq %r12, %rdi\n  callq *%r13\n  ud2\n"
        ".size wavert__cpu_fiber_start, .-wavert__cpu_fiber_start\n");
#define FIBER_FRAME_WORDS 7 /* r15 r14 r13 r12 rbx rbp, return address */
#define FIBER_ARG_WORD 3
#define FIBER_ENTRY_WORD 2
#define FIBER_RETURN_WORD 6
#else
__asm__(".text\n"
        ".globl wavert__cpu_switch\n.hidden wavert__cpu_switch\n"
        ".type wavert__cpu_switch,%function\n"
        "wavert__cpu_switch:\n"
        "  sub sp, sp, #160\n"
        "  stp x19, x20, [sp, #0]\n  stp x21, x22, [sp, #16]\n  stp x23, x24, [sp, #32]\n"
        "  stp x25, x26, [sp, #48]\n  stp x27, x28, [sp, #64]\n  stp x29, x30, [sp, #80]\n"
        "  stp d8, d9, [sp, #96]\n  stp d10, d11, [sp, #112]\n  stp d12, d13, [sp, #128]\n"
        "  stp d14, d15, [sp, #144]\n"
        "  mov x9, sp\n  str x9, [x0]\n  mov sp, x1\n"
        "  ldp x19, x20, [sp, #0]\n  ldp x21, x22, [sp, #16]\n  ldp x23, x24, [sp, #32]\n"
        "  ldp x25, x26, [sp, #48]\n  ldp x27, x28, [sp, #64]\n  ldp x29, x30, [sp, #80]\n"
        "  ldp d8, d9, [sp, #96]\n  ldp d10, d11, [sp, #112]\n  ldp d12, d13, [sp, #128]\n"
        "  ldp d14, d15, [sp, #144]\n"
        "  add sp, sp, #160\n  ret\n"
        ".size wavert__cpu_switch, .-wavert__cpu_switch\n"
        ".globl wavert__cpu_fiber_start\n.hidden wavert__cpu_fiber_start\n"
        ".type wavert__cpu_fiber_start,%function\n"
        "wavert__cpu_fiber_start:\n" /* first resume: x19 the argument, x20 the entry */
        "  mov x0, x19\n  blr x20\n  brk #0\n"
        ".size wavert__cpu_fiber_start, .-wavert__cpu_fiber_start\n");
#define FIBER_FRAME_WORDS 20 /* x19..x30, d8..d15 */
#define FIBER_ARG_WORD 0
#define FIBER_ENTRY_WORD 1
#define FIBER_RETURN_WORD 11
#endif

static void context_switch(fiber_context *from, fiber_context *to) {
  wavert__cpu_switch(&from->sp, to->sp);
}

/* A context that runs entry(arg) on the stack [stack, stack + size) when first resumed. */
static void context_make(fiber_context *c, char *stack, size_t size, void (*entry)(void *),
                         void *arg) {
  uintptr_t top = ((uintptr_t)(stack + size)) & ~(uintptr_t)15;
  void **frame = (void **)(top - FIBER_FRAME_WORDS * sizeof(void *));
  memset(frame, 0, FIBER_FRAME_WORDS * sizeof(void *));
  frame[FIBER_ARG_WORD] = arg;
  frame[FIBER_ENTRY_WORD] = (void *)(uintptr_t)entry;
  frame[FIBER_RETURN_WORD] = (void *)(uintptr_t)wavert__cpu_fiber_start;
  c->sp = frame;
}
#else
#include <ucontext.h>
#define WAVERT_CPU_FAST_SWITCH 0
typedef struct {
  ucontext_t uc;
} fiber_context;
static _Thread_local void (*uc_entry_fn)(void *);
static _Thread_local void *uc_entry_arg;
static void uc_entry(void) { uc_entry_fn(uc_entry_arg); }
static void context_switch(fiber_context *from, fiber_context *to) {
  swapcontext(&from->uc, &to->uc);
}
static void context_make(fiber_context *c, char *stack, size_t size, void (*entry)(void *),
                         void *arg) {
  getcontext(&c->uc);
  c->uc.uc_stack.ss_sp = stack;
  c->uc.uc_stack.ss_size = size;
  c->uc.uc_link = NULL;
  uc_entry_fn = entry; /* every fiber of a set has the same entry and argument */
  uc_entry_arg = arg;
  makecontext(&c->uc, uc_entry, 0);
}
#endif

/* ---- pool --------------------------------------------------------------------------------- */

typedef struct {
  const cpu_function *function;
  void **params;
  int64_t grid[3], block[3];
  int64_t cluster[3]; /* blocks per cluster, each dividing grid */
  int64_t blocks; /* grid x * y * z */
  atomic_llong next;
  atomic_int done; /* pool threads that joined this job (pool.ticket) and left it */
  atomic_int failed; /* a block's fibers: 1 no memory, 2 deadlock, 3 a check failed,
                      * 4 a cf.assert failed */
  atomic_llong asserted; /* threads whose cf.assert failed */
  atomic_int reported; /* the first failing block's message is in `message` */
  char message[2048];
} cpu_job;

static struct {
  pthread_mutex_t mutex;
  pthread_cond_t wake;
  pthread_mutex_t launch; /* one launch at a time */
  int size;               /* threads running blocks, the caller included */
  int started;            /* pool threads created */
  _Atomic(cpu_job *) job;
  atomic_ulong generation;
  atomic_int sleepers; /* pool threads waiting on `wake` (or about to) */
  /* Who works on the published job: (generation << TICKET_SHIFT) | TICKET_CLOSED? | joined.
   * A pool thread joins the job of the generation it saw while the ticket is open (a CAS
   * adding 1); the launcher closes it after its own share and waits for the joined ones
   * only, so a thread the OS has not scheduled yet never delays a launch (it finds the
   * ticket closed, or of a later generation, and touches no job). */
  atomic_ullong ticket;
} pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_MUTEX_INITIALIZER,
          0, 0, NULL, 0, 0, 0};

#define TICKET_SHIFT 17
#define TICKET_CLOSED (1ull << 16) /* joined counts stay below it: at most 1023 threads */
#define TICKET_GENERATIONS ((1ull << (64 - TICKET_SHIFT)) - 1) /* generations, mod 2^47 */

/* Join the job of generation `generation`; 0 when it is closed or gone. */
static int ticket_join(unsigned long generation) {
  unsigned long long t = atomic_load_explicit(&pool.ticket, memory_order_acquire);
  for (;;) {
    if ((t >> TICKET_SHIFT) != (generation & TICKET_GENERATIONS) || (t & TICKET_CLOSED))
      return 0;
    if (atomic_compare_exchange_weak_explicit(&pool.ticket, &t, t + 1, memory_order_acq_rel,
                                              memory_order_acquire))
      return 1;
  }
}

/* Synchronisation of a warp or of the block: live threads, arrivals, generation. */
typedef struct {
  int live, arrived;
  unsigned generation;
  int first;        /* checked mode: the first thread that arrived since it last opened */
  int base, size;   /* its threads: [base, base + size) */
} fiber_group;

/* Checked mode: the last accesses to one workgroup-memory element since the last barrier. */
typedef struct {
  uintptr_t address;
  uint64_t epoch; /* valid only when equal to the set's race_epoch */
  int writer, reader, reader2; /* thread indices (-1 none): the last writer, two readers */
  const char *write_what, *write_where, *read_what, *read_where;
} race_entry;

/* Fibers of the block a pool thread is running (per thread, grown on demand). */
typedef struct {
  fiber_context scheduler;
  fiber_context *contexts;
  wavert__cpu_thread *threads;
  unsigned char *done;
  unsigned char *parity; /* per thread: [0] warp, [1] block buffer of its last exchange */
  int64_t *slots;        /* 2 buffers x count warp slots, then 2 x count block slots */
  fiber_group *warps;
  fiber_group block;
  char *stacks; /* capacity * (guard page + stack) */
  size_t stride, stack_bytes, page;
  int capacity, count, current, live;
  unsigned long progress; /* arrivals and returns: a round without any is a deadlock */
  const cpu_function *function;
  void **params;
  /* Checked mode and the precise deadlock message: what each thread waits at. */
  int checked, faulted;
  int asserted; /* threads of the block stopped by a failed cf.assert */
  const char **wait_site;     /* per thread: the gpu.barrier's line, or NULL */
  unsigned char *wait_kind;   /* per thread: 0 running, 1 barrier, 2 warp, 3 block exchange */
  cpu_job *job;
  race_entry *races;
  size_t race_capacity, race_count;
  uint64_t race_epoch;
} fiber_set;

static _Thread_local fiber_set fibers;

/* ---- guard pages: a fiber's stack overflow is a clear fatal error ------------------------- */

static struct sigaction previous_segv;
static pthread_once_t segv_once = PTHREAD_ONCE_INIT;

static void write_all(const char *text) {
  size_t n = strlen(text);
  while (n > 0) {
    ssize_t w = write(2, text, n);
    if (w <= 0) return;
    text += w;
    n -= (size_t)w;
  }
}

static void segv_handler(int sig, siginfo_t *info, void *uctx) {
  fiber_set *set = &fibers;
  char *addr = info->si_addr;
  if (set->stacks != NULL && addr >= set->stacks &&
      addr < set->stacks + set->stride * (size_t)set->capacity &&
      (size_t)(addr - set->stacks) % set->stride < set->page) {
    char kib[24];
    snprintf(kib, sizeof(kib), "%zu", set->stack_bytes / 1024);
    write_all("libwavert CPU device: a GPU thread overflowed its fiber stack (");
    write_all(kib);
    write_all(" KiB; a kernel with gpu.barrier or subgroup operations runs each thread on its "
              "own stack): set WAVERT_CPU_STACK_KIB to a larger size (at most 65536)\n");
    abort();
  }
  if (previous_segv.sa_flags & SA_SIGINFO) {
    if (previous_segv.sa_sigaction != NULL) previous_segv.sa_sigaction(sig, info, uctx);
    return;
  }
  if (previous_segv.sa_handler != SIG_DFL && previous_segv.sa_handler != SIG_IGN) {
    previous_segv.sa_handler(sig);
    return;
  }
  signal(SIGSEGV, SIG_DFL); /* the fault repeats with the default action */
}

static void segv_install(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_sigaction = segv_handler;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, &previous_segv);
}

/* The handler runs on an alternate stack (the faulting one has none left); a thread that
 * has one (Python's faulthandler makes one) keeps it. */
static void altstack_ensure(void) {
  static _Thread_local int done;
  if (done) return;
  done = 1;
  stack_t old;
  if (sigaltstack(NULL, &old) == 0 && !(old.ss_flags & SS_DISABLE)) return;
  size_t size = 64 * 1024;
  void *mem = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) return;
  stack_t ss = {.ss_sp = mem, .ss_size = size, .ss_flags = 0};
  sigaltstack(&ss, NULL); /* kept for the thread's life */
}

static size_t fiber_stack_bytes(void) {
  const char *env = getenv("WAVERT_CPU_STACK_KIB");
  if (env != NULL && env[0] != '\0') {
    char *end = NULL;
    long kib = strtol(env, &end, 10);
    if (*end == '\0' && kib >= 16 && kib <= 65536) return (size_t)kib * 1024;
  }
  return WAVERT_CPU_STACK_BYTES;
}

/* ---- fibers ------------------------------------------------------------------------------- */

/* Resume the next live fiber after the current one (the caller has saved nothing else). */
static void fiber_yield(fiber_set *set) {
  int from = set->current, next = from;
  do {
    next = next + 1 == set->count ? 0 : next + 1;
  } while (set->done[next]);
  if (next == from) return;
  set->current = next;
  context_switch(&set->contexts[from], &set->contexts[next]);
}

/* A barrier of the block opened (or a new block starts): the race table starts empty. */
static void race_new_epoch(fiber_set *set) {
  set->race_epoch += 1;
  set->race_count = 0;
}

static const char *wait_name(int kind) {
  switch (kind) {
    case 1: return "gpu.barrier";
    case 2: return "a warp exchange (gpu.shuffle or gpu.subgroup_reduce)";
    case 3: return "a block exchange (gpu.all_reduce)";
  }
  return "nothing";
}

/* "(x, y, z)": thread `index`'s id in the block. */
static const char *thread_text(const fiber_set *set, int index, char *buffer, size_t size) {
  const wavert__cpu_thread *t = &set->threads[index];
  snprintf(buffer, size, "(%lld, %lld, %lld)", (long long)t->thread_id[0],
           (long long)t->thread_id[1], (long long)t->thread_id[2]);
  return buffer;
}

/* "gpu.barrier at line 5, column 7": what thread `index` waits at. */
static const char *wait_text(const fiber_set *set, int index, char *buffer, size_t size) {
  const char *site = set->wait_site[index];
  snprintf(buffer, size, "%s%s%s", wait_name(set->wait_kind[index]), site ? " at " : "",
           site ? site : "");
  return buffer;
}

/* Record the block's failure (the launch's first one is kept: "kernel K, block (x, y, z): "
 * and the formatted text) and stop the block: the running fiber is not resumed. */
static void block_fail(fiber_set *set, int code, const char *format, ...) {
  cpu_job *job = set->job;
  int expected = 0;
  if (atomic_compare_exchange_strong(&job->reported, &expected, 1)) {
    const wavert__cpu_thread *t = &set->threads[0];
    int n = snprintf(job->message, sizeof(job->message), "kernel %s, block (%lld, %lld, %lld): ",
                     set->function->name, (long long)t->block_id[0], (long long)t->block_id[1],
                     (long long)t->block_id[2]);
    va_list ap;
    va_start(ap, format);
    if (n > 0 && (size_t)n < sizeof(job->message))
      vsnprintf(job->message + n, sizeof(job->message) - (size_t)n, format, ap);
    va_end(ap);
  }
  set->faulted = code;
  context_switch(&set->contexts[set->current], &set->scheduler); /* not resumed */
}

/* The first thread of `group` that has returned, else -1. */
static int group_returned(const fiber_set *set, const fiber_group *group) {
  for (int i = group->base; i < group->base + group->size; ++i)
    if (set->done[i]) return i;
  return -1;
}

/* Deadlock: name two threads waiting at different points (or the one waiting). */
static void deadlock_fail(fiber_set *set) {
  int a = -1, b = -1;
  for (int i = 0; i < set->count; ++i) {
    if (set->done[i]) continue;
    if (a < 0) {
      a = i;
    } else if (set->wait_kind[i] != set->wait_kind[a] || set->wait_site[i] != set->wait_site[a]) {
      b = i;
      break;
    }
  }
  char ta[48], tb[48], wa[512], wb[512];
  if (a >= 0 && b >= 0)
    block_fail(set, 2,
               "the threads wait at different barriers or subgroup operations and none can go "
               "on: thread %s waits at %s, thread %s at %s (every live thread of the block, or "
               "of the warp, must reach the same one)",
               thread_text(set, a, ta, sizeof(ta)), wait_text(set, a, wa, sizeof(wa)),
               thread_text(set, b, tb, sizeof(tb)), wait_text(set, b, wb, sizeof(wb)));
  block_fail(set, 2,
             "the threads wait at different barriers or subgroup operations and none can go on "
             "(thread %s waits at %s)", a >= 0 ? thread_text(set, a, ta, sizeof(ta)) : "?",
             a >= 0 ? wait_text(set, a, wa, sizeof(wa)) : "?");
}

/* Arrive at `group` (waiting at `kind`, `site`) and return when every live thread of it has
 * arrived. Checked mode: every thread of the group must arrive, at the same op. */
static void group_wait(fiber_set *set, fiber_group *group, int kind, const char *site) {
  int self = set->current;
  set->wait_kind[self] = (unsigned char)kind;
  set->wait_site[self] = site;
  if (set->checked) {
    char ts[48], to[48], ws[512], wo[512];
    int gone = group_returned(set, group);
    if (gone >= 0)
      block_fail(set, 3,
                 "thread %s waits at %s, which thread %s never reached: it returned first (a "
                 "barrier in divergent control flow or after an early return)",
                 thread_text(set, self, ts, sizeof(ts)), wait_text(set, self, ws, sizeof(ws)),
                 thread_text(set, gone, to, sizeof(to)));
    if (group->arrived == 0) {
      group->first = self;
    } else if (set->wait_kind[group->first] != kind || set->wait_site[group->first] != site) {
      block_fail(set, 3, "thread %s waits at %s while thread %s waits at %s (divergent "
                 "barriers: every thread must reach the same one)",
                 thread_text(set, self, ts, sizeof(ts)), wait_text(set, self, ws, sizeof(ws)),
                 thread_text(set, group->first, to, sizeof(to)),
                 wait_text(set, group->first, wo, sizeof(wo)));
    }
  }
  set->progress += 1;
  if (++group->arrived >= group->live) {
    group->arrived = 0;
    group->generation += 1;
    set->wait_kind[self] = 0;
    if (group == &set->block) {
      race_new_epoch(set);
      /* The block goes on in thread order, as before the barrier and as a block function
       * (thread loops) runs it: the first live fiber first, this one in its turn. */
      int first = 0;
      while (set->done[first]) ++first;
      if (first != self) {
        set->current = first;
        context_switch(&set->contexts[self], &set->contexts[first]);
      }
    }
    return;
  }
  unsigned generation = group->generation;
  unsigned long seen = set->progress;
  int idle = 0;
  while (group->generation == generation) {
    fiber_yield(set);
    if (set->progress != seen) {
      seen = set->progress;
      idle = 0;
    } else if (++idle >= 2) { /* a whole round of waiting threads: none can go on */
      deadlock_fail(set);
    }
  }
  set->wait_kind[self] = 0;
}

static void group_leave(fiber_set *set, fiber_group *group) {
  group->live -= 1;
  if (group->live > 0 && group->arrived >= group->live) {
    group->arrived = 0;
    group->generation += 1;
    if (group == &set->block) race_new_epoch(set);
  }
}

static void fiber_barrier(wavert__cpu_thread *thread) {
  fiber_set *set = thread->fibers;
  const char *site = thread->site;
  thread->site = NULL;
  group_wait(set, &set->block, 1, site);
}

static void fiber_publish(wavert__cpu_thread *thread, int64_t scope, int64_t value) {
  fiber_set *set = thread->fibers;
  int index = (int)thread->index;
  fiber_group *group = scope == 0 ? &set->warps[index / WAVERT_CPU_WARP] : &set->block;
  int parity = (int)(group->generation & 1);
  set->parity[2 * index + (scope != 0)] = (unsigned char)parity;
  set->slots[(size_t)set->count * (size_t)(2 * (scope != 0) + parity) + (size_t)index] = value;
  group_wait(set, group, scope == 0 ? 2 : 3, NULL);
}

static int64_t fiber_read(wavert__cpu_thread *thread, int64_t scope, int64_t index) {
  fiber_set *set = thread->fibers;
  int self = (int)thread->index;
  int parity = set->parity[2 * self + (scope != 0)];
  int64_t *buffer = set->slots + (size_t)set->count * (size_t)(2 * (scope != 0) + parity);
  int64_t source;
  if (scope == 0) {
    int base = self - self % WAVERT_CPU_WARP;
    source = index >= 0 && index < WAVERT_CPU_WARP && base + index < set->count ? base + index
                                                                                 : self;
  } else {
    source = index >= 0 && index < set->count ? index : self;
  }
  return buffer[source];
}

/* "[1, 2]": the first `rank` (at most 4) of `values`. */
static const char *values_text(int64_t rank, const int64_t *values, char *buffer, size_t size) {
  size_t n = 0;
  buffer[0] = '\0';
  for (int64_t k = 0; k < rank && k < 4 && n < size; ++k) {
    int w = snprintf(buffer + n, size - n, "%s%lld", k ? ", " : "[", (long long)values[k]);
    if (w < 0) break;
    n += (size_t)w;
  }
  if (n < size) snprintf(buffer + n, size - n, "]");
  return buffer;
}

static void fiber_fault(wavert__cpu_thread *thread, const char *what, const char *where,
                        int64_t rank, int64_t i0, int64_t i1, int64_t i2, int64_t i3, int64_t s0,
                        int64_t s1, int64_t s2, int64_t s3) {
  fiber_set *set = thread->fibers;
  char tt[48], index[160], sizes[160];
  const int64_t idx[4] = {i0, i1, i2, i3}, dims[4] = {s0, s1, s2, s3};
  if (rank >= 1 && rank <= 4)
    block_fail(set, 3, "thread %s: %s: index %s is outside the sizes %s (%s)",
               thread_text(set, (int)thread->index, tt, sizeof(tt)), what,
               values_text(rank, idx, index, sizeof(index)),
               values_text(rank, dims, sizes, sizeof(sizes)), where);
  block_fail(set, 3, "thread %s: %s (%s)", thread_text(set, (int)thread->index, tt, sizeof(tt)),
             what, where);
}

static size_t race_slot(const race_entry *table, size_t capacity, uintptr_t address,
                        uint64_t epoch) {
  size_t mask = capacity - 1, i = (size_t)((address >> 2) * 0x9E3779B97F4A7C15ull) & mask;
  while (table[i].epoch == epoch && table[i].address != address) i = (i + 1) & mask;
  return i; /* the element's entry, or a free one (stale entries of older epochs are free) */
}

/* The entry of `address` in this barrier interval, made when missing; NULL without memory. */
static race_entry *race_find(fiber_set *set, uintptr_t address) {
  if (set->race_count * 2 + 2 > set->race_capacity) {
    size_t capacity = set->race_capacity ? set->race_capacity * 2 : 4096;
    race_entry *table = calloc(capacity, sizeof(*table));
    if (table == NULL) return NULL;
    size_t live = 0;
    for (size_t i = 0; i < set->race_capacity; ++i) {
      race_entry *e = &set->races[i];
      if (e->epoch != set->race_epoch) continue;
      table[race_slot(table, capacity, e->address, set->race_epoch)] = *e;
      live += 1;
    }
    free(set->races);
    set->races = table;
    set->race_capacity = capacity;
    set->race_count = live;
  }
  race_entry *e = &set->races[race_slot(set->races, set->race_capacity, address, set->race_epoch)];
  if (e->epoch != set->race_epoch || e->address != address) {
    *e = (race_entry){address, set->race_epoch, -1, -1, -1, NULL, NULL, NULL, NULL};
    set->race_count += 1;
  }
  return e;
}

static void fiber_access(wavert__cpu_thread *thread, const void *address, int64_t write,
                         const char *what, const char *where, int64_t rank, int64_t i0,
                         int64_t i1, int64_t i2, int64_t i3) {
  fiber_set *set = thread->fibers;
  int self = (int)thread->index;
  race_entry *e = race_find(set, (uintptr_t)address);
  if (e == NULL) return; /* no memory for the race table: this access is not checked */
  int other = -1;
  const char *other_what = NULL, *other_where = NULL, *other_verb = NULL;
  if (e->writer >= 0 && e->writer != self) { /* write-write or read-after-write */
    other = e->writer, other_what = e->write_what, other_where = e->write_where;
    other_verb = "wrote";
  } else if (write && (e->reader >= 0 || e->reader2 >= 0)) { /* write-after-read */
    other = e->reader != self ? e->reader : e->reader2;
    other_what = e->read_what, other_where = e->read_where, other_verb = "read";
  }
  if (other >= 0) {
    const int64_t idx[4] = {i0, i1, i2, i3};
    char ts[48], to[48], index[160];
    block_fail(set, 3,
               "data race on workgroup memory: thread %s %s index %s of %s (%s) after thread "
               "%s %s the same element (%s, %s) with no gpu.barrier between them",
               thread_text(set, self, ts, sizeof(ts)), write ? "writes" : "reads",
               values_text(rank, idx, index, sizeof(index)), what, where,
               thread_text(set, other, to, sizeof(to)), other_verb, other_what, other_where);
  }
  if (write) {
    e->writer = self, e->write_what = what, e->write_where = where;
  } else if (e->reader < 0) {
    e->reader = self, e->read_what = what, e->read_where = where;
  } else if (e->reader != self && e->reader2 < 0) {
    e->reader2 = self;
  }
}

static void fiber_print(const char *format, const void *args);

/* Without fibers (a block loop) exchanges have a single participant: the thread itself. */
static void lone_publish(wavert__cpu_thread *thread, int64_t scope, int64_t value) {
  (void)scope;
  thread->fibers = (void *)(intptr_t)value;
}

static int64_t lone_read(wavert__cpu_thread *thread, int64_t scope, int64_t index) {
  (void)scope;
  (void)index;
  return (int64_t)(intptr_t)thread->fibers;
}

static void lone_barrier(wavert__cpu_thread *thread) { (void)thread; }

/* Thread `index` has ended (returned, or stopped by a failed cf.assert): it leaves its
 * warp's and its block's barriers and the next live fiber runs (the scheduler when none is
 * left). The fiber is not resumed. */
static void fiber_end(fiber_set *set, int index) {
  set->done[index] = 1;
  set->progress += 1;
  set->live -= 1;
  group_leave(set, &set->warps[index / WAVERT_CPU_WARP]);
  group_leave(set, &set->block);
  if (set->live == 0) {
    context_switch(&set->contexts[index], &set->scheduler); /* not resumed */
  }
  int next = index;
  do {
    next = next + 1 == set->count ? 0 : next + 1;
  } while (set->done[next]);
  set->current = next;
  context_switch(&set->contexts[index], &set->contexts[next]);
}

/* CUDA's line for a failed device assert ("file:line: function: block: [x,y,z], thread:
 * [x,y,z] Assertion `message` failed."), one fprintf: the C library writes it whole. */
static void assert_print(const wavert__cpu_thread *t, const char *message, const char *file,
                         uint32_t line, const char *function) {
  fprintf(stderr, "%s:%u: %s: block: [%lld,%lld,%lld], thread: [%lld,%lld,%lld] Assertion `%s` "
          "failed.\n", file, (unsigned)line, function, (long long)t->block_id[0],
          (long long)t->block_id[1], (long long)t->block_id[2], (long long)t->thread_id[0],
          (long long)t->thread_id[1], (long long)t->thread_id[2], message);
}

/* A failed cf.assert: the line on stderr, the launch's first failure kept in the job, and the
 * thread stopped (the block's other threads go on, as on the GPU until its trap lands; the
 * blocks not yet started are not run). */
static void fiber_assert(wavert__cpu_thread *thread, const char *message, const char *file,
                         uint32_t line, const char *function) {
  fiber_set *set = thread->fibers;
  cpu_job *job = set->job;
  assert_print(thread, message, file, line, function);
  atomic_fetch_add(&job->asserted, 1);
  int expected = 0;
  if (atomic_compare_exchange_strong(&job->reported, &expected, 1))
    snprintf(job->message, sizeof(job->message),
             "kernel %s, block (%lld, %lld, %lld), thread (%lld, %lld, %lld): assertion `%s` "
             "failed (%s:%u: %s)", set->function->name, (long long)thread->block_id[0],
             (long long)thread->block_id[1], (long long)thread->block_id[2],
             (long long)thread->thread_id[0], (long long)thread->thread_id[1],
             (long long)thread->thread_id[2], message, file, (unsigned)line, function);
  set->asserted += 1;
  fiber_end(set, (int)thread->index);
}

/* A block loop cannot stop one thread: pywave runs every kernel of a module with cf.assert
 * as fibers, so only an image made otherwise gets here. */
static void lone_assert(wavert__cpu_thread *thread, const char *message, const char *file,
                        uint32_t line, const char *function) {
  assert_print(thread, message, file, line, function);
  fprintf(stderr, "libwavert: the CPU kernel's cf.assert failed in a block run without fibers "
          "(an image whose kernels with cf.assert have a __wavert_cpu_block_ entry): the thread "
          "cannot be stopped alone; the process stops\n");
  abort();
}

static void fiber_main(void *opaque) {
  fiber_set *set = opaque;
  int index = set->current;
  set->function->thread(set->params, &set->threads[index]);
  if (set->checked) { /* returning while others wait for it at a barrier is divergence */
    fiber_group *groups[2] = {&set->block, &set->warps[index / WAVERT_CPU_WARP]};
    for (int g = 0; g < 2; ++g) {
      if (groups[g]->arrived == 0) continue;
      char ts[48], to[48], wo[512];
      int waiting = groups[g]->first;
      block_fail(set, 3,
                 "thread %s returned while thread %s waits for it at %s (a barrier in divergent "
                 "control flow or after an early return)", thread_text(set, index, ts, sizeof(ts)),
                 thread_text(set, waiting, to, sizeof(to)),
                 wait_text(set, waiting, wo, sizeof(wo)));
    }
  }
  fiber_end(set, index);
}

static int fibers_reserve(fiber_set *set, int count) {
  if (count <= set->capacity) return 0;
  pthread_once(&segv_once, segv_install);
  altstack_ensure();
  long page = sysconf(_SC_PAGESIZE);
  size_t stack_bytes = fiber_stack_bytes();
  size_t stride = (size_t)page + stack_bytes;
  int warps = (count + WAVERT_CPU_WARP - 1) / WAVERT_CPU_WARP;
  fiber_context *contexts = calloc((size_t)count, sizeof(*contexts));
  wavert__cpu_thread *threads = calloc((size_t)count, sizeof(*threads));
  unsigned char *done = calloc((size_t)count, 1);
  unsigned char *parity = calloc((size_t)count, 2);
  int64_t *slots = calloc((size_t)count * 4, sizeof(int64_t));
  fiber_group *groups = calloc((size_t)warps, sizeof(*groups));
  const char **wait_site = calloc((size_t)count, sizeof(*wait_site));
  unsigned char *wait_kind = calloc((size_t)count, 1);
  void *stacks = mmap(NULL, stride * (size_t)count, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (contexts == NULL || threads == NULL || done == NULL || parity == NULL || slots == NULL ||
      groups == NULL || wait_site == NULL || wait_kind == NULL || stacks == MAP_FAILED) {
    free(wait_site);
    free(wait_kind);
    free(contexts);
    free(threads);
    free(done);
    free(parity);
    free(slots);
    free(groups);
    if (stacks != MAP_FAILED) munmap(stacks, stride * (size_t)count);
    return -1;
  }
  for (int i = 0; i < count; ++i) /* a guard page below each stack: an overflow faults */
    mprotect((char *)stacks + stride * (size_t)i, (size_t)page, PROT_NONE);
  if (set->stacks != NULL) munmap(set->stacks, set->stride * (size_t)set->capacity);
  free(set->contexts);
  free(set->threads);
  free(set->done);
  free(set->parity);
  free(set->slots);
  free(set->warps);
  free(set->wait_site);
  free(set->wait_kind);
  set->wait_site = wait_site;
  set->wait_kind = wait_kind;
  set->contexts = contexts;
  set->threads = threads;
  set->done = done;
  set->parity = parity;
  set->slots = slots;
  set->warps = groups;
  set->stride = stride;
  set->stack_bytes = stack_bytes;
  set->page = (size_t)page;
  set->stacks = stacks; /* last: the signal handler reads the fields above through it */
  set->capacity = count;
  return 0;
}

/* Run block `linear` of `job` on this thread. Returns 0, 1 when the fibers cannot be made, 2
 * when its threads wait at different barriers, 3 when a check failed (checked mode); 2 and 3
 * leave the message in the job. */
static int run_block(cpu_job *job, int64_t linear) {
  wavert__cpu_thread thread;
  memset(&thread, 0, sizeof(thread));
  thread.block_id[0] = linear % job->grid[0];
  thread.block_id[1] = (linear / job->grid[0]) % job->grid[1];
  thread.block_id[2] = linear / (job->grid[0] * job->grid[1]);
  for (int i = 0; i < 3; ++i) {
    thread.block_dim[i] = job->block[i];
    thread.grid_dim[i] = job->grid[i];
    thread.cluster_dim[i] = job->cluster[i];
  }
  thread.print = fiber_print;
  thread.fault = fiber_fault;
  thread.access = fiber_access;
  if (job->function->block != NULL) {
    thread.assert_fail = lone_assert;
    thread.barrier = lone_barrier;
    thread.publish = lone_publish;
    thread.read = lone_read;
    job->function->block(job->params, &thread);
    return 0;
  }
  fiber_set *set = &fibers;
  int count = (int)(job->block[0] * job->block[1] * job->block[2]);
  if (fibers_reserve(set, count) != 0) return 1;
  set->count = count;
  set->live = count;
  set->faulted = 0;
  set->asserted = 0;
  set->checked = job->function->checked;
  set->job = job;
  set->function = job->function;
  set->params = job->params;
  race_new_epoch(set);
  set->block = (fiber_group){count, 0, 0, 0, 0, count};
  for (int w = 0; w * WAVERT_CPU_WARP < count; ++w) {
    int lanes = count - w * WAVERT_CPU_WARP;
    lanes = lanes < WAVERT_CPU_WARP ? lanes : WAVERT_CPU_WARP;
    set->warps[w] = (fiber_group){lanes, 0, 0, 0, w * WAVERT_CPU_WARP, lanes};
  }
  thread.barrier = fiber_barrier;
  thread.assert_fail = fiber_assert;
  thread.publish = fiber_publish;
  thread.read = fiber_read;
  thread.fibers = set;
  for (int i = 0; i < count; ++i) {
    wavert__cpu_thread *t = &set->threads[i];
    *t = thread;
    t->thread_id[0] = i % job->block[0];
    t->thread_id[1] = (i / job->block[0]) % job->block[1];
    t->thread_id[2] = i / (job->block[0] * job->block[1]);
    t->index = i;
    set->done[i] = 0;
    set->wait_kind[i] = 0;
    set->wait_site[i] = NULL;
    char *stack = set->stacks + set->stride * (size_t)i + set->page;
    context_make(&set->contexts[i], stack, set->stack_bytes, fiber_main, set);
  }
  set->current = 0;
  context_switch(&set->scheduler, &set->contexts[0]); /* back when all returned or failed */
  return set->faulted ? set->faulted : set->asserted ? 4 : 0;
}

/* Take blocks of `job` until none is left. */
static void work(cpu_job *job) {
  for (;;) {
    int64_t linear = atomic_fetch_add_explicit(&job->next, 1, memory_order_relaxed);
    if (linear >= job->blocks) break;
    int failed = run_block(job, linear);
    if (failed != 0) {
      atomic_store(&job->failed, failed);
      atomic_store(&job->next, job->blocks); /* the other blocks are not run */
    }
  }
}

/* Spin iterations a pool thread waits for the next launch before it sleeps (a launch that
 * follows within them skips the futex wake-up). */
#define WAVERT_CPU_SPIN 20000

static inline void cpu_relax(void) {
#if defined(__x86_64__)
  __asm__ __volatile__("pause");
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

/* `generation`: pool.generation when the thread was made, before the launch that made it
 * published its job. */
static void *pool_main(void *generation) {
  unsigned long seen = (unsigned long)(uintptr_t)generation;
  for (;;) {
    unsigned long now = atomic_load(&pool.generation);
    for (int spin = 0; now == seen && spin < WAVERT_CPU_SPIN; ++spin) {
      cpu_relax();
      now = atomic_load(&pool.generation);
    }
    if (now == seen) {
      pthread_mutex_lock(&pool.mutex);
      atomic_fetch_add(&pool.sleepers, 1);
      while ((now = atomic_load(&pool.generation)) == seen)
        pthread_cond_wait(&pool.wake, &pool.mutex);
      atomic_fetch_sub(&pool.sleepers, 1);
      pthread_mutex_unlock(&pool.mutex);
    }
    seen = now;
    if (!ticket_join(now)) continue; /* its launch is done: wait for the next one */
    cpu_job *job = atomic_load(&pool.job);
    work(job);
    atomic_fetch_add_explicit(&job->done, 1, memory_order_release); /* job left for good */
  }
  return NULL;
}

/* ---- gpu.printf ----------------------------------------------------------------------------
 * NVIDIA's vprintf ABI: the format and a buffer of the arguments, each at the next multiple
 * of its size (float promoted to double, integers narrower than 32 bits to 32). As the CUDA
 * driver does, the format decides each argument's size (%c %d %i %o %u %x %X without a
 * length modifier or with h/hh: 4 bytes; l, ll, j, z, t: 8; %a %e %f %g: 8; %s %p: 8;
 * '*' width or precision: 4). The output of a launch is collected and written to stdout
 * (flushed) when the launch returns, each call's message whole. */
static struct {
  pthread_mutex_t mutex;
  char *text;
  size_t size, capacity;
} printed = {PTHREAD_MUTEX_INITIALIZER, NULL, 0, 0};

static void print_append(const char *text, size_t n) {
  if (printed.size + n + 1 > printed.capacity) {
    size_t capacity = printed.capacity ? printed.capacity : 4096;
    while (capacity < printed.size + n + 1) capacity *= 2;
    char *grown = realloc(printed.text, capacity);
    if (grown == NULL) return; /* out of memory: the message is dropped */
    printed.text = grown;
    printed.capacity = capacity;
  }
  memcpy(printed.text + printed.size, text, n);
  printed.size += n;
}

static const char *arg_at(const char *args, size_t *offset, size_t size) {
  *offset = (*offset + size - 1) / size * size;
  const char *p = args + *offset;
  *offset += size;
  return p;
}

static void fiber_print(const char *format, const void *opaque) {
  const char *args = opaque;
  size_t offset = 0;
  char piece[512];
  pthread_mutex_lock(&printed.mutex);
  for (const char *p = format; *p != '\0';) {
    if (*p != '%') {
      const char *q = strchr(p, '%');
      size_t n = q != NULL ? (size_t)(q - p) : strlen(p);
      print_append(p, n);
      p += n;
      continue;
    }
    if (p[1] == '%') {
      print_append("%", 1);
      p += 2;
      continue;
    }
    /* One conversion: flags, width, precision, length, conversion character. */
    char spec[64];
    size_t k = 0;
    int stars[2], nstars = 0, longs = 0;
    spec[k++] = *p++;
    while (*p != '\0' && strchr("-+ #0", *p) != NULL && k < 40) spec[k++] = *p++;
    for (int part = 0; part < 2; ++part) {
      if (part == 1) {
        if (*p != '.') break;
        spec[k++] = *p++;
      }
      if (*p == '*') {
        int v;
        memcpy(&v, arg_at(args, &offset, 4), 4);
        stars[nstars++] = v;
        spec[k++] = *p++;
      } else {
        while (*p >= '0' && *p <= '9' && k < 48) spec[k++] = *p++;
      }
    }
    while (*p != '\0' && strchr("hljztL", *p) != NULL) {
      if (*p == 'l' || *p == 'j' || *p == 'z' || *p == 't') longs += 1;
      p++;
    }
    char conv = *p;
    if (conv == '\0') break;
    p++;
    int n = 0;
    if (strchr("diouxXc", conv) != NULL) {
      if (longs > 0) {
        long long v;
        memcpy(&v, arg_at(args, &offset, 8), 8);
        spec[k++] = 'l';
        spec[k++] = 'l';
        spec[k++] = conv;
        spec[k] = '\0';
        n = nstars == 2   ? snprintf(piece, sizeof(piece), spec, stars[0], stars[1], v)
            : nstars == 1 ? snprintf(piece, sizeof(piece), spec, stars[0], v)
                          : snprintf(piece, sizeof(piece), spec, v);
      } else {
        int v;
        memcpy(&v, arg_at(args, &offset, 4), 4);
        spec[k++] = conv;
        spec[k] = '\0';
        n = nstars == 2   ? snprintf(piece, sizeof(piece), spec, stars[0], stars[1], v)
            : nstars == 1 ? snprintf(piece, sizeof(piece), spec, stars[0], v)
                          : snprintf(piece, sizeof(piece), spec, v);
      }
    } else if (strchr("aAeEfFgG", conv) != NULL) {
      double v;
      memcpy(&v, arg_at(args, &offset, 8), 8);
      spec[k++] = conv;
      spec[k] = '\0';
      n = nstars == 2   ? snprintf(piece, sizeof(piece), spec, stars[0], stars[1], v)
          : nstars == 1 ? snprintf(piece, sizeof(piece), spec, stars[0], v)
                        : snprintf(piece, sizeof(piece), spec, v);
    } else if (conv == 's' || conv == 'p') {
      const void *v;
      memcpy(&v, arg_at(args, &offset, 8), 8);
      spec[k++] = conv;
      spec[k] = '\0';
      if (conv == 's' && v == NULL) v = "(null)";
      n = nstars == 2   ? snprintf(piece, sizeof(piece), spec, stars[0], stars[1], v)
          : nstars == 1 ? snprintf(piece, sizeof(piece), spec, stars[0], v)
                        : snprintf(piece, sizeof(piece), spec, v);
    } else { /* not a conversion: written as it is */
      spec[k++] = conv;
      spec[k] = '\0';
      n = snprintf(piece, sizeof(piece), "%s", spec);
    }
    if (n > 0) print_append(piece, (size_t)n < sizeof(piece) ? (size_t)n : sizeof(piece) - 1);
  }
  pthread_mutex_unlock(&printed.mutex);
}

/* Writes what the launch's printf calls made to stdout. */
static void print_flush(void) {
  pthread_mutex_lock(&printed.mutex);
  if (printed.size > 0) {
    fwrite(printed.text, 1, printed.size, stdout);
    fflush(stdout);
    printed.size = 0;
  }
  pthread_mutex_unlock(&printed.mutex);
}

static int pool_size(void) {
  const char *env = getenv("WAVERT_CPU_THREADS");
  if (env != NULL && env[0] != '\0') {
    char *end = NULL;
    long n = strtol(env, &end, 10);
    if (*end == '\0' && n >= 1 && n <= 1024) return (int)n;
  }
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  return online >= 1 && online <= 1024 ? (int)online : 1;
}

/* ---- backend entries ---------------------------------------------------------------------- */

static wavert_status cpu_init(int32_t *out_count) {
  pool.size = pool_size();
  *out_count = 1;
  return WAVERT_OK;
}

static wavert_status cpu_device_open(wavert_device *device) {
  int64_t *a = device->attributes;
  a[WAVERT_DEVICE_MAX_THREADS_PER_BLOCK] = WAVERT_CPU_MAX_THREADS;
  a[WAVERT_DEVICE_MAX_BLOCK_DIM_X] = WAVERT_CPU_MAX_THREADS;
  a[WAVERT_DEVICE_MAX_BLOCK_DIM_Y] = WAVERT_CPU_MAX_THREADS;
  a[WAVERT_DEVICE_MAX_BLOCK_DIM_Z] = 64;
  a[WAVERT_DEVICE_MAX_GRID_DIM_X] = 2147483647;
  a[WAVERT_DEVICE_MAX_GRID_DIM_Y] = 65535;
  a[WAVERT_DEVICE_MAX_GRID_DIM_Z] = 65535;
  a[WAVERT_DEVICE_MAX_SHARED_MEMORY_PER_BLOCK] = WAVERT_CPU_STATIC_SHARED;
  a[WAVERT_DEVICE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN] = WAVERT_CPU_DYNAMIC_SHARED;
  a[WAVERT_DEVICE_COMPUTE_CAPABILITY_MAJOR] = 0;
  a[WAVERT_DEVICE_COMPUTE_CAPABILITY_MINOR] = 0;
  a[WAVERT_DEVICE_MULTIPROCESSOR_COUNT] = pool.size;
  a[WAVERT_DEVICE_WARP_SIZE] = WAVERT_CPU_WARP;
  snprintf(device->chip, sizeof(device->chip), "cpu");
  return WAVERT_OK;
}

static wavert_status cpu_enter(wavert_device *device, void **out_saved) {
  (void)device;
  *out_saved = NULL;
  return WAVERT_OK;
}

static void cpu_leave(wavert_device *device, void *saved) {
  (void)device;
  (void)saved;
}


static wavert_status cpu_module_load(wavert_device *device, const void *image, size_t size,
                                     void **out_module) {
  (void)device;
  static const unsigned char elf[4] = {0x7f, 'E', 'L', 'F'};
  if (size < 4 || memcmp(image, elf, 4) != 0)
    return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT,
                         "CPU module load: the image (%zu bytes) is not an ELF shared object "
                         "(compile the module with target='cpu')", size);
  int fd = memfd_create("wavert-cpu-kernels", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0)
    return wavert__error(WAVERT_ERROR_UNAVAILABLE, "CPU module load: memfd_create: %s",
                         strerror(errno));
  for (size_t done = 0; done < size;) {
    ssize_t n = write(fd, (const char *)image + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int err = errno;
      close(fd);
      return wavert__error(WAVERT_ERROR_UNAVAILABLE, "CPU module load: writing the image: %s",
                           strerror(err));
    }
    done += (size_t)n;
  }
  fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL);
  char path[64];
  snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
  void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (handle == NULL) {
    const char *why = dlerror();
    close(fd);
    return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT, "CPU module load: dlopen: %s",
                         why != NULL ? why : "unknown error");
  }
  const int32_t *abi = dlsym(handle, "__wavert_cpu_abi");
  if (abi == NULL || *abi != WAVERT_CPU_ABI) {
    dlclose(handle);
    close(fd);
    return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT,
                         "CPU module load: the image's kernel ABI is %d, libwavert's is %d "
                         "(compile it again with this pywave)",
                         abi != NULL ? (int)*abi : -1, WAVERT_CPU_ABI);
  }
  cpu_module *module = malloc(sizeof(*module));
  if (module == NULL) {
    dlclose(handle);
    close(fd);
    return wavert__error(WAVERT_ERROR_OUT_OF_MEMORY, "out of host memory");
  }
  module->handle = handle;
  module->fd = fd;
  module->checked = dlsym(handle, "__wavert_cpu_checked") != NULL;
  module->functions = NULL;
  *out_module = module;
  return WAVERT_OK;
}

static void cpu_module_unload(void *opaque) {
  cpu_module *module = opaque;
  if (module == NULL) return;
  for (cpu_function *f = module->functions; f != NULL;) {
    cpu_function *next = f->next;
    free(f);
    f = next;
  }
  dlclose(module->handle);
  close(module->fd);
  free(module);
}

static wavert_status cpu_module_get_function(void *opaque, const char *name, void **out_function) {
  cpu_module *module = opaque;
  size_t length = strlen(name);
  char *symbol = malloc(length + 32);
  if (symbol == NULL) return wavert__error(WAVERT_ERROR_OUT_OF_MEMORY, "out of host memory");
  snprintf(symbol, length + 32, "__wavert_cpu_thread_%s", name);
  cpu_kernel thread = (cpu_kernel)(uintptr_t)dlsym(module->handle, symbol);
  snprintf(symbol, length + 32, "__wavert_cpu_block_%s", name);
  cpu_kernel block = (cpu_kernel)(uintptr_t)dlsym(module->handle, symbol);
  snprintf(symbol, length + 32, "__wavert_cpu_args_%s", name);
  const int64_t *args = dlsym(module->handle, symbol);
  free(symbol);
  if (thread == NULL)
    return wavert__error(WAVERT_ERROR_NOT_FOUND, "the CPU module has no kernel '%s'", name);
  if (args == NULL || args[0] < 0 || args[0] > WAVERT_CPU_MAX_ARGS)
    return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT,
                         "the CPU module's kernel '%s' has no valid argument table "
                         "(__wavert_cpu_args_%s: %lld arguments, at most %d expected)",
                         name, name, args != NULL ? (long long)args[0] : -1LL,
                         WAVERT_CPU_MAX_ARGS);
  cpu_function *function = malloc(sizeof(*function) + length + 1);
  if (function == NULL) return wavert__error(WAVERT_ERROR_OUT_OF_MEMORY, "out of host memory");
  function->thread = thread;
  function->block = block;
  function->checked = module->checked;
  function->args = args;
  memcpy(function->name, name, length + 1);
  function->next = module->functions;
  module->functions = function;
  *out_function = function;
  return WAVERT_OK;
}

static wavert_status cpu_function_attribute(void *function, wavert_function_attribute attribute,
                                            int64_t *out_value) {
  (void)function;
  switch (attribute) {
    case WAVERT_FUNCTION_MAX_THREADS_PER_BLOCK:
      *out_value = WAVERT_CPU_MAX_THREADS;
      return WAVERT_OK;
    case WAVERT_FUNCTION_MAX_DYNAMIC_SHARED_SIZE_BYTES:
      *out_value = WAVERT_CPU_DYNAMIC_SHARED;
      return WAVERT_OK;
    case WAVERT_FUNCTION_SHARED_SIZE_BYTES: /* static workgroup memory is thread-local data */
    case WAVERT_FUNCTION_NUM_REGS:
    case WAVERT_FUNCTION_LOCAL_SIZE_BYTES:
    case WAVERT_FUNCTION_CONST_SIZE_BYTES:
    case WAVERT_FUNCTION_PTX_VERSION:
    case WAVERT_FUNCTION_BINARY_VERSION:
      *out_value = 0;
      return WAVERT_OK;
  }
  return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT, "unknown function attribute %d",
                       (int)attribute);
}

static wavert_status cpu_function_opt_in_shared(void *function, int64_t bytes) {
  (void)function;
  (void)bytes; /* the whole WAVERT_CPU_DYNAMIC_SHARED array is always there */
  return WAVERT_OK;
}

/* Run a launch on the calling thread, with the pool's threads when the grid is large enough
 * and no other launch has them (launches on different streams run concurrently: one of them
 * may wait for another, as in upstream MLIR's concurrent-kernels.mlir), and return when every
 * block has run. Its blocks form clusters of cluster[0..2] blocks (1, 1, 1: no clusters); the
 * blocks of a cluster are not scheduled together (no distributed shared memory, no cluster
 * barrier: their ops are refused at compile time); the cluster queries see the extents. */
static wavert_status run_launch(const cpu_function *function, const uint32_t cluster[3],
                                const uint32_t grid[3], const uint32_t block[3],
                                void **params) {
  cpu_job job;
  job.function = function;
  job.params = params;
  job.blocks = 1;
  int64_t threads = 1;
  for (int i = 0; i < 3; ++i) {
    job.cluster[i] = cluster[i];
    job.grid[i] = grid[i];
    job.block[i] = block[i];
    job.blocks *= grid[i]; /* < 2^31 * 2^16 * 2^16: no overflow */
    threads *= block[i];
  }
  atomic_init(&job.next, 0);
  atomic_init(&job.failed, 0);
  atomic_init(&job.reported, 0);
  atomic_init(&job.asserted, 0);
  job.message[0] = '\0';
  atomic_init(&job.done, 0);
  int helpers = pool.size - 1;
  if (helpers > job.blocks - 1) helpers = (int)(job.blocks - 1);
  if (job.blocks * threads <= WAVERT_CPU_SERIAL_THREADS) helpers = 0;
  /* The pool's threads serve one launch at a time; another runs on its own thread alone. */
  int holds_pool = helpers > 0 && pthread_mutex_trylock(&pool.launch) == 0;
  if (!holds_pool) helpers = 0;
  if (helpers > 0) {
    if (pool.started < pool.size - 1) {
      pthread_mutex_lock(&pool.mutex);
      while (pool.started < pool.size - 1) {
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int err = pthread_create(&t, &attr, pool_main,
                                 (void *)(uintptr_t)atomic_load(&pool.generation));
        pthread_attr_destroy(&attr);
        if (err != 0) break;
        pool.started += 1;
      }
      pthread_mutex_unlock(&pool.mutex);
    }
    if (pool.started == 0) helpers = 0;
  }
  if (helpers > 0) {
    /* Pool threads join through the ticket of the generation they will see. */
    unsigned long generation = atomic_load(&pool.generation) + 1;
    atomic_store(&pool.ticket, (generation & TICKET_GENERATIONS) << TICKET_SHIFT);
    atomic_store(&pool.job, &job);
    atomic_store(&pool.generation, generation); /* spinning threads start here */
    if (atomic_load(&pool.sleepers) > 0) {
      pthread_mutex_lock(&pool.mutex);
      pthread_cond_broadcast(&pool.wake);
      pthread_mutex_unlock(&pool.mutex);
    }
  }
  work(&job);
  if (helpers > 0) {
    /* Close the ticket; wait for the threads that joined (they are running this job). */
    unsigned long long t = atomic_fetch_or_explicit(&pool.ticket, TICKET_CLOSED,
                                                    memory_order_acq_rel);
    int joined = (int)(t & (TICKET_CLOSED - 1));
    for (int spin = 0; atomic_load_explicit(&job.done, memory_order_acquire) < joined; ++spin) {
      if (spin < 1000)
        cpu_relax();
      else
        sched_yield();
    }
  }
  int failed = atomic_load(&job.failed);
  if (holds_pool) pthread_mutex_unlock(&pool.launch);
  print_flush();
  if (failed == 1)
    return wavert__error(WAVERT_ERROR_OUT_OF_MEMORY,
                         "CPU launch: no memory for the fibers of a %u x %u x %u block (%zu KiB of "
                         "stack per thread)", block[0], block[1], block[2],
                         fiber_stack_bytes() / 1024);
  if (failed == 2)
    return wavert__error(job.function->checked ? WAVERT_ERROR_KERNEL_FAULT
                                               : WAVERT_ERROR_INVALID_ARGUMENT,
                         "CPU launch of a %u x %u x %u block: %s", block[0], block[1], block[2],
                         job.message);
  if (failed == 3)
    return wavert__error(WAVERT_ERROR_KERNEL_FAULT, "CPU launch, checked mode: %s",
                         job.message);
  if (failed == 4) {
    long long n = atomic_load(&job.asserted);
    return wavert__error(WAVERT_ERROR_KERNEL_FAULT,
                         "CPU launch: device-side assert triggered in %lld thread%s (each printed "
                         "on stderr); the first: %s", n, n == 1 ? "" : "s", job.message);
  }
  return WAVERT_OK;
}

/* ---- streams and events --------------------------------------------------------------------
 * A stream is a queue of work items (a launch, a copy, a fill, a wait for an event) that the
 * stream's own worker thread runs in order: started at its first item, it sleeps on the
 * stream's condition variable when the queue is empty and ends once the stream is destroyed
 * and its queue has run (cuStreamDestroy's rule: the call returns at once, the stream's
 * resources go when its work is done). Work of different streams runs concurrently, each
 * worker running its launches' blocks itself (with the pool's threads when they are free:
 * run_launch), so kernels on two streams may wait for each other. The NULL stream is
 * synchronous: its work runs on the calling thread before the call returns, not ordered with
 * the other streams (libwavert's CUDA streams are CU_STREAM_NON_BLOCKING: the legacy stream
 * does not wait for them either). Host code that makes no stream (every Python call) runs
 * all its work this way.
 *
 * A queued launch owns a copy of the kernel's argument values (their sizes: the image's
 * __wavert_cpu_args_K), as a GPU driver copies them from the caller's stack at the launch;
 * the copy is freed when the launch has run. An event is a position in a stream: record takes
 * the stream's last queued item, synchronize waits until that item has run, a stream waiting
 * for it queues a wait item (the event's position when the wait was queued: recording the
 * event again later changes nothing for it, as with cuStreamWaitEvent).
 *
 * Failures (a deadlock, a failed check, a cf.assert, no memory for the fibers) are kept by
 * the stream, the first one with its message, and reported as the CUDA driver reports an
 * asynchronous kernel failure: by the next synchronize of the stream (which then clears it),
 * of an event recorded after it, or of the device; the stream's later work is skipped until
 * then, and a stream that waits for an event of it inherits the failure. A failure of a
 * stream destroyed before it was reported goes to the device's next synchronize. Unlike a
 * CUDA context, nothing else is poisoned: the stream and the device go on after the report.
 * The work a thread queued during a host call is waited for at the call's end (cpu_call_end):
 * a call on the CPU device returns with none of its work running, and reports its failure.
 *
 * Stream structures are never freed: a destroyed one is reused by a later create, its item
 * numbers going on, so an event of an earlier use still names a position that has run.
 * At process exit (atexit) the workers stop after their current item.
 */

typedef enum { ITEM_LAUNCH, ITEM_COPY, ITEM_SET, ITEM_WAIT } item_kind;

typedef struct cpu_stream cpu_stream;

typedef struct cpu_item {
  struct cpu_item *next;
  uint64_t seq; /* its number in its stream, from 1 */
  item_kind kind;
  union {
    struct {
      const cpu_function *function;
      uint32_t cluster[3], grid[3], block[3];
      void **params; /* in the item's allocation: pointers to the copied values after it */
    } launch;
    struct {
      void *dst;
      const void *src;
      size_t size;
    } copy;
    struct {
      void *ptr;
      uint32_t value;
      size_t element_bytes, count;
    } set;
    struct {
      cpu_stream *stream; /* until this stream has run its item `seq` */
      uint64_t seq;
    } wait;
  } u;
} cpu_item;

#define CPU_STREAM_MAGIC UINT64_C(0x6d61657274735043) /* "CPstream" */
#define CPU_EVENT_MAGIC UINT64_C(0x746e657665555043)  /* "CPUevent" */
/* Alignment of each copied argument value (at least any LLVM type's ABI alignment). */
#define CPU_ARG_ALIGN 64

struct cpu_stream {
  uint64_t magic;      /* CPU_STREAM_MAGIC from create to destroy */
  cpu_stream *next;    /* queues.all */
  cpu_item *head, *tail;
  uint64_t enqueued;   /* the last queued item's seq */
  uint64_t completed;  /* the last item run (items run in seq order) */
  int worker;          /* its worker thread is running */
  int destroyed;       /* the worker ends when the queue is empty */
  int reusable;        /* destroyed and its work done: create may hand it out again */
  pthread_cond_t work; /* an item was queued, the stream destroyed or the process exits */
  wavert_status error; /* the first failure not yet reported, of item error_seq */
  uint64_t error_seq;
  char message[WAVERT_CPU_MESSAGE];
};

typedef struct {
  uint64_t magic;
  cpu_stream *stream; /* NULL: complete (never recorded, or recorded on the NULL stream) */
  uint64_t seq;       /* complete once stream->completed >= seq */
} cpu_event;

static struct {
  pthread_mutex_t mutex; /* guards every stream and event field */
  pthread_cond_t done;   /* an item of some stream has run */
  cpu_stream *all;       /* every stream structure made */
  atomic_long pending;   /* items queued and not yet run, on every stream */
  int exiting;           /* process exit: workers stop, waits end */
  wavert_status orphan;  /* the unreported failure of a stream destroyed since */
  char orphan_message[WAVERT_CPU_MESSAGE];
} queues = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, 0, 0, WAVERT_OK, ""};

/* This thread queued work since its host call last waited for it (cpu_call_end). */
static _Thread_local int queued_here;
static pthread_once_t exit_once = PTHREAD_ONCE_INIT;

static void queues_exit(void) {
  pthread_mutex_lock(&queues.mutex);
  queues.exiting = 1;
  for (cpu_stream *s = queues.all; s != NULL; s = s->next) pthread_cond_signal(&s->work);
  pthread_cond_broadcast(&queues.done);
  pthread_mutex_unlock(&queues.mutex);
}

static void queues_exit_install(void) { atexit(queues_exit); }

static void fill(void *ptr, uint32_t value, size_t element_bytes, size_t count) {
  if (element_bytes == 1) {
    memset(ptr, (int)(value & 0xff), count);
  } else if (element_bytes == 2) {
    uint16_t v = (uint16_t)value, *p = ptr;
    for (size_t i = 0; i < count; ++i) p[i] = v;
  } else {
    uint32_t *p = ptr;
    for (size_t i = 0; i < count; ++i) p[i] = value;
  }
}

/* Wait (queues.mutex held) until `stream` has run its item `seq`, or the process exits. */
static void wait_for(cpu_stream *stream, uint64_t seq) {
  while (stream->completed < seq && !queues.exiting)
    pthread_cond_wait(&queues.done, &queues.mutex);
}

/* The failure of `stream` at or before its item `seq` (queues.mutex held), set as this
 * thread's last error; WAVERT_OK when there is none. */
static wavert_status failure_before(const cpu_stream *stream, uint64_t seq) {
  if (stream->error == WAVERT_OK || stream->error_seq > seq) return WAVERT_OK;
  return wavert__error(stream->error, "%s", stream->message);
}

/* A destroyed stream whose work has run (queues.mutex held): its unreported failure goes to
 * the device's next synchronize; create may reuse it. */
static void stream_retire(cpu_stream *stream) {
  if (stream->error != WAVERT_OK && queues.orphan == WAVERT_OK) {
    queues.orphan = stream->error;
    snprintf(queues.orphan_message, sizeof(queues.orphan_message), "%s", stream->message);
  }
  stream->error = WAVERT_OK;
  stream->reusable = 1;
}

static wavert_status run_item(cpu_item *item) {
  switch (item->kind) {
    case ITEM_LAUNCH:
      return run_launch(item->u.launch.function, item->u.launch.cluster, item->u.launch.grid,
                        item->u.launch.block, item->u.launch.params);
    case ITEM_COPY:
      memmove(item->u.copy.dst, item->u.copy.src, item->u.copy.size);
      return WAVERT_OK;
    case ITEM_SET:
      fill(item->u.set.ptr, item->u.set.value, item->u.set.element_bytes, item->u.set.count);
      return WAVERT_OK;
    case ITEM_WAIT: {
      pthread_mutex_lock(&queues.mutex);
      wait_for(item->u.wait.stream, item->u.wait.seq);
      wavert_status status = failure_before(item->u.wait.stream, item->u.wait.seq);
      pthread_mutex_unlock(&queues.mutex);
      return status;
    }
  }
  return WAVERT_OK;
}

/* A stream's worker: runs its items in order (skipping them after a failure until it is
 * reported), and ends when its queue is empty and the stream destroyed, or idle for
 * WAVERT_CPU_STREAM_IDLE_MS (the next item starts another: host code that never destroys its
 * streams, as upstream's lowering of `gpu.wait async [%t1, %t2]` leaves the dependencies'
 * streams, keeps no thread per stream). */
static void *stream_main(void *opaque) {
  cpu_stream *stream = opaque;
  pthread_mutex_lock(&queues.mutex);
  for (;;) {
    int idle = 0;
    while (stream->head == NULL && !stream->destroyed && !queues.exiting && !idle) {
      struct timespec until;
      clock_gettime(CLOCK_REALTIME, &until);
      until.tv_nsec += (long)WAVERT_CPU_STREAM_IDLE_MS * 1000000L;
      until.tv_sec += until.tv_nsec / 1000000000L;
      until.tv_nsec %= 1000000000L;
      idle = pthread_cond_timedwait(&stream->work, &queues.mutex, &until) == ETIMEDOUT;
    }
    if (stream->head == NULL || queues.exiting) break;
    cpu_item *item = stream->head;
    stream->head = item->next;
    if (stream->head == NULL) stream->tail = NULL;
    int skip = stream->error != WAVERT_OK;
    pthread_mutex_unlock(&queues.mutex);
    wavert_status status = skip ? WAVERT_OK : run_item(item);
    pthread_mutex_lock(&queues.mutex);
    if (status != WAVERT_OK && stream->error == WAVERT_OK) {
      stream->error = status;
      stream->error_seq = item->seq;
      if (item->kind == ITEM_WAIT) /* the failed stream's message, which names it */
        snprintf(stream->message, sizeof(stream->message), "%s", wavert_last_error());
      else
        snprintf(stream->message, sizeof(stream->message), "work queued on CPU stream %p: %s",
                 (void *)stream, wavert_last_error());
    }
    stream->completed = item->seq;
    atomic_fetch_sub_explicit(&queues.pending, 1, memory_order_release);
    pthread_cond_broadcast(&queues.done);
    free(item);
  }
  stream->worker = 0;
  if (stream->destroyed && stream->head == NULL) stream_retire(stream);
  pthread_mutex_unlock(&queues.mutex);
  return NULL;
}

/* Queue `item` (owned: freed on failure) on `stream`, starting its worker if needed. */
static wavert_status stream_enqueue(cpu_stream *stream, cpu_item *item) {
  pthread_once(&exit_once, queues_exit_install);
  pthread_mutex_lock(&queues.mutex);
  wavert_status status = WAVERT_OK;
  if (stream->magic != CPU_STREAM_MAGIC) {
    status = wavert__error(WAVERT_ERROR_INVALID_ARGUMENT,
                           "CPU stream %p is not a live stream (destroyed already?)",
                           (void *)stream);
  } else if (!stream->worker) {
    pthread_t thread;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int err = pthread_create(&thread, &attr, stream_main, stream);
    pthread_attr_destroy(&attr);
    if (err != 0)
      status = wavert__error(WAVERT_ERROR_UNAVAILABLE,
                             "CPU stream %p: starting its worker thread: pthread_create: %s",
                             (void *)stream, strerror(err));
    else
      stream->worker = 1;
  }
  if (status == WAVERT_OK) {
    item->next = NULL;
    item->seq = ++stream->enqueued;
    if (stream->tail != NULL)
      stream->tail->next = item;
    else
      stream->head = item;
    stream->tail = item;
    atomic_fetch_add_explicit(&queues.pending, 1, memory_order_relaxed);
    pthread_cond_signal(&stream->work);
    queued_here = 1;
  }
  pthread_mutex_unlock(&queues.mutex);
  if (status != WAVERT_OK) free(item);
  return status;
}

static cpu_item *item_new(item_kind kind, size_t extra) {
  void *memory = NULL;
  size_t size = 0;
  if (__builtin_add_overflow(sizeof(cpu_item), extra, &size) ||
      posix_memalign(&memory, CPU_ARG_ALIGN, size) != 0) {
    wavert__error(WAVERT_ERROR_OUT_OF_MEMORY, "out of host memory for a CPU stream's work item");
    return NULL;
  }
  cpu_item *item = memory;
  memset(item, 0, sizeof(*item));
  item->kind = kind;
  return item;
}

static size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

/* Queue a launch on `stream` with copies of the argument values `params` points to. */
static wavert_status launch_queued(cpu_stream *stream, const cpu_function *function,
                                   const uint32_t cluster[3], const uint32_t grid[3],
                                   const uint32_t block[3], void **params) {
  const int64_t count = function->args[0];
  const int64_t *bytes = function->args + 1;
  /* [item][params: count pointers][each value, CPU_ARG_ALIGN-aligned] */
  size_t head = round_up(sizeof(cpu_item) + (size_t)count * sizeof(void *), CPU_ARG_ALIGN);
  size_t extra = head - sizeof(cpu_item);
  for (int64_t i = 0; i < count; ++i) {
    if (bytes[i] < 0 || bytes[i] > (int64_t)(SIZE_MAX / 4) ||
        __builtin_add_overflow(extra, round_up((size_t)bytes[i], CPU_ARG_ALIGN), &extra))
      return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT,
                           "CPU launch of kernel '%s': argument %lld's size %lld bytes in the "
                           "image's argument table is invalid",
                           function->name, (long long)i, (long long)bytes[i]);
    if (params == NULL || params[i] == NULL)
      return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT,
                           "CPU launch of kernel '%s': the parameter array or its pointer to "
                           "argument %lld is NULL (%lld arguments expected)",
                           function->name, (long long)i, (long long)count);
  }
  cpu_item *item = item_new(ITEM_LAUNCH, extra);
  if (item == NULL) return WAVERT_ERROR_OUT_OF_MEMORY;
  item->u.launch.function = function;
  memcpy(item->u.launch.cluster, cluster, sizeof(item->u.launch.cluster));
  memcpy(item->u.launch.grid, grid, sizeof(item->u.launch.grid));
  memcpy(item->u.launch.block, block, sizeof(item->u.launch.block));
  void **copies = (void **)(item + 1);
  char *value = (char *)item + head;
  for (int64_t i = 0; i < count; ++i) {
    memcpy(value, params[i], (size_t)bytes[i]);
    copies[i] = value;
    value += round_up((size_t)bytes[i], CPU_ARG_ALIGN);
  }
  item->u.launch.params = copies;
  return stream_enqueue(stream, item);
}

static wavert_status launch_clustered(void *opaque, const uint32_t cluster[3],
                                      const uint32_t grid[3], const uint32_t block[3],
                                      uint32_t dynamic_shared_bytes, void *stream,
                                      void **params) {
  (void)dynamic_shared_bytes; /* checked by launch.c against the OPTIN attribute */
  if (stream == NULL) return run_launch(opaque, cluster, grid, block, params);
  return launch_queued(stream, opaque, cluster, grid, block, params);
}

static wavert_status cpu_launch(void *opaque, const uint32_t grid[3], const uint32_t block[3],
                                uint32_t dynamic_shared_bytes, void *stream, void **params) {
  static const uint32_t one[3] = {1, 1, 1};
  return launch_clustered(opaque, one, grid, block, dynamic_shared_bytes, stream, params);
}

/* launch.c has checked that each cluster extent is positive and divides the grid's. */
static wavert_status cpu_launch_cluster(void *opaque, const uint32_t cluster[3],
                                        const uint32_t grid[3], const uint32_t block[3],
                                        uint32_t dynamic_shared_bytes, void *stream,
                                        void **params) {
  return launch_clustered(opaque, cluster, grid, block, dynamic_shared_bytes, stream, params);
}

static wavert_status cpu_stream_create(void **out_stream) {
  pthread_mutex_lock(&queues.mutex);
  cpu_stream *stream = queues.all;
  while (stream != NULL && !stream->reusable) stream = stream->next;
  if (stream == NULL) {
    stream = calloc(1, sizeof(*stream));
    if (stream == NULL) {
      pthread_mutex_unlock(&queues.mutex);
      return wavert__error(WAVERT_ERROR_OUT_OF_MEMORY, "out of host memory for a CPU stream");
    }
    pthread_cond_init(&stream->work, NULL);
    stream->next = queues.all;
    queues.all = stream;
  }
  stream->reusable = 0;
  stream->destroyed = 0;
  stream->error = WAVERT_OK;
  stream->magic = CPU_STREAM_MAGIC;
  pthread_mutex_unlock(&queues.mutex);
  *out_stream = stream;
  return WAVERT_OK;
}

/* Returns at once; the worker ends (and the stream becomes reusable) when its work is done. */
static wavert_status cpu_stream_destroy(void *opaque) {
  cpu_stream *stream = opaque;
  if (stream == NULL) return WAVERT_OK;
  pthread_mutex_lock(&queues.mutex);
  wavert_status status = WAVERT_OK;
  if (stream->magic != CPU_STREAM_MAGIC) {
    status = wavert__error(WAVERT_ERROR_INVALID_ARGUMENT,
                           "CPU stream destroy: %p is not a live stream (destroyed already?)",
                           opaque);
  } else {
    stream->magic = 0;
    stream->destroyed = 1;
    if (stream->worker)
      pthread_cond_signal(&stream->work);
    else
      stream_retire(stream); /* no worker: nothing was ever queued, or all has run */
  }
  pthread_mutex_unlock(&queues.mutex);
  return status;
}

/* Handles of this backend's streams are checked by their first word (libwavert checked that
 * they point to readable memory). */
static wavert_status cpu_stream_check(wavert_device *device, void *stream) {
  (void)device;
  if (*(const uint64_t *)stream == CPU_STREAM_MAGIC) return WAVERT_OK;
  return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT,
                       "stream handle %p is not a live CPU stream (not made by this CPU device, "
                       "or destroyed)", stream);
}

/* Waits until every item queued on the stream so far has run; reports (and clears) its
 * failure. */
static wavert_status cpu_stream_synchronize(void *opaque) {
  cpu_stream *stream = opaque;
  if (stream == NULL) return WAVERT_OK; /* the NULL stream's work has run */
  pthread_mutex_lock(&queues.mutex);
  wait_for(stream, stream->enqueued);
  wavert_status status = failure_before(stream, stream->enqueued);
  stream->error = WAVERT_OK;
  pthread_mutex_unlock(&queues.mutex);
  return status;
}

/* Waits for every stream's work; reports (and clears) the first failure of any. */
static wavert_status cpu_synchronize(wavert_device *device) {
  (void)device;
  pthread_mutex_lock(&queues.mutex);
  while (atomic_load_explicit(&queues.pending, memory_order_acquire) > 0 && !queues.exiting)
    pthread_cond_wait(&queues.done, &queues.mutex);
  wavert_status status = WAVERT_OK;
  if (queues.orphan != WAVERT_OK) {
    status = wavert__error(queues.orphan, "%s", queues.orphan_message);
    queues.orphan = WAVERT_OK;
  }
  for (cpu_stream *s = queues.all; s != NULL; s = s->next) {
    if (s->error != WAVERT_OK && status == WAVERT_OK)
      status = wavert__error(s->error, "%s", s->message);
    s->error = WAVERT_OK;
  }
  pthread_mutex_unlock(&queues.mutex);
  return status;
}

/* The end of a host call on the CPU device: the work this thread queued on streams during
 * it has run (and its failures are the call's) when the call returns. */
static wavert_status cpu_call_end(wavert_device *device) {
  if (!queued_here) return WAVERT_OK;
  queued_here = 0;
  return cpu_synchronize(device);
}

static wavert_status cpu_event_create(void **out_event) {
  cpu_event *event = calloc(1, sizeof(*event));
  if (event == NULL) return wavert__error(WAVERT_ERROR_OUT_OF_MEMORY, "out of host memory");
  event->magic = CPU_EVENT_MAGIC;
  *out_event = event;
  return WAVERT_OK;
}

static wavert_status event_check(const char *what, const cpu_event *event) {
  if (event != NULL && event->magic == CPU_EVENT_MAGIC) return WAVERT_OK;
  return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT, "%s: %p is not a live CPU event", what,
                       (const void *)event);
}

static wavert_status cpu_event_destroy(void *opaque) {
  cpu_event *event = opaque;
  if (event == NULL) return WAVERT_OK;
  wavert_status status = event_check("CPU event destroy", event);
  if (status != WAVERT_OK) return status;
  event->magic = 0;
  free(event);
  return WAVERT_OK;
}

/* The event's position: the last item queued on `stream` (NULL: its work has run). */
static wavert_status cpu_event_record(void *opaque, void *stream_opaque) {
  cpu_event *event = opaque;
  cpu_stream *stream = stream_opaque;
  wavert_status status = event_check("CPU event record", event);
  if (status != WAVERT_OK) return status;
  pthread_mutex_lock(&queues.mutex);
  event->stream = stream;
  event->seq = stream != NULL ? stream->enqueued : 0;
  pthread_mutex_unlock(&queues.mutex);
  return WAVERT_OK;
}

/* Waits until the event's position has run; reports a failure of its stream up to there. */
static wavert_status cpu_event_synchronize(void *opaque) {
  cpu_event *event = opaque;
  wavert_status status = event_check("CPU event synchronize", event);
  if (status != WAVERT_OK) return status;
  pthread_mutex_lock(&queues.mutex);
  cpu_stream *target = event->stream;
  uint64_t seq = event->seq;
  if (target != NULL) {
    wait_for(target, seq);
    status = failure_before(target, seq);
  }
  pthread_mutex_unlock(&queues.mutex);
  return status;
}

/* `stream`'s later work waits for the event's position as it is now. The NULL stream's
 * later work runs on the caller after this returns, so the caller waits. */
static wavert_status cpu_stream_wait_event(void *stream_opaque, void *opaque) {
  cpu_stream *stream = stream_opaque;
  cpu_event *event = opaque;
  wavert_status status = event_check("CPU stream wait event", event);
  if (status != WAVERT_OK) return status;
  pthread_mutex_lock(&queues.mutex);
  cpu_stream *target = event->stream;
  uint64_t seq = event->seq;
  int needed = target != NULL && target != stream &&
               (target->completed < seq || failure_before(target, seq) != WAVERT_OK);
  if (needed && stream == NULL) wait_for(target, seq);
  pthread_mutex_unlock(&queues.mutex);
  if (!needed || stream == NULL) return WAVERT_OK;
  cpu_item *item = item_new(ITEM_WAIT, 0);
  if (item == NULL) return WAVERT_ERROR_OUT_OF_MEMORY;
  item->u.wait.stream = target;
  item->u.wait.seq = seq;
  return stream_enqueue(stream, item);
}

static wavert_status cpu_mem_alloc(size_t size, int managed, void **out_ptr) {
  (void)managed; /* host memory is reachable from both sides */
  void *ptr = NULL;
  int err = posix_memalign(&ptr, 64, size != 0 ? size : 1);
  if (err != 0)
    return wavert__error(WAVERT_ERROR_OUT_OF_MEMORY,
                         "CPU allocation of %zu bytes failed: %s", size, strerror(err));
  *out_ptr = ptr;
  return WAVERT_OK;
}

/* Waits for the work queued on every stream first (cuMemFree "may perform implicit
 * synchronization"; here it always does, so no queued kernel or copy touches freed memory);
 * their failures stay for the next synchronize. */
static wavert_status cpu_mem_free(void *ptr) {
  if (atomic_load_explicit(&queues.pending, memory_order_acquire) > 0) {
    pthread_mutex_lock(&queues.mutex);
    while (atomic_load_explicit(&queues.pending, memory_order_acquire) > 0 && !queues.exiting)
      pthread_cond_wait(&queues.done, &queues.mutex);
    pthread_mutex_unlock(&queues.mutex);
  }
  free(ptr);
  return WAVERT_OK;
}

static wavert_status cpu_memory_kind(const void *ptr, wavert_memory_type *out_kind,
                                     int32_t *out_ordinal) {
  (void)ptr;
  *out_kind = WAVERT_MEMORY_HOST; /* all memory of this device is host memory */
  *out_ordinal = 0;
  return WAVERT_OK;
}

/* `sync` or the NULL stream: now; otherwise queued on the stream. */
static wavert_status cpu_memcpy(void *dst, const void *src, size_t size, void *stream, int sync) {
  if (size == 0) return WAVERT_OK;
  if (sync || stream == NULL) {
    memmove(dst, src, size);
    return WAVERT_OK;
  }
  cpu_item *item = item_new(ITEM_COPY, 0);
  if (item == NULL) return WAVERT_ERROR_OUT_OF_MEMORY;
  item->u.copy.dst = dst;
  item->u.copy.src = src;
  item->u.copy.size = size;
  return stream_enqueue(stream, item);
}

static wavert_status cpu_memset(void *ptr, uint32_t value, size_t element_bytes, size_t count,
                                void *stream, int sync) {
  if (sync || stream == NULL) {
    fill(ptr, value, element_bytes, count);
    return WAVERT_OK;
  }
  cpu_item *item = item_new(ITEM_SET, 0);
  if (item == NULL) return WAVERT_ERROR_OUT_OF_MEMORY;
  item->u.set.ptr = ptr;
  item->u.set.value = value;
  item->u.set.element_bytes = element_bytes;
  item->u.set.count = count;
  return stream_enqueue(stream, item);
}

static wavert_status cpu_nothing(void *handle) {
  (void)handle;
  return WAVERT_OK;
}

static wavert_status cpu_host_register(void *ptr, size_t size) {
  (void)ptr;
  (void)size;
  return WAVERT_OK;
}

static wavert_status cpu_host_device_pointer(void *ptr, void **out_device_ptr) {
  *out_device_ptr = ptr;
  return WAVERT_OK;
}

const wavert__backend wavert__cpu_backend = {
    .name = "CPU",
    .devices = "CPU",
    .init = cpu_init,
    .device_open = cpu_device_open,
    .enter = cpu_enter,
    .leave = cpu_leave,
    .synchronize = cpu_synchronize,
    .call_end = cpu_call_end,
    .module_load = cpu_module_load,
    .module_unload = cpu_module_unload,
    .module_get_function = cpu_module_get_function,
    .function_attribute = cpu_function_attribute,
    .function_opt_in_shared = cpu_function_opt_in_shared,
    .launch = cpu_launch,
    .launch_cluster = cpu_launch_cluster,
    .stream_create = cpu_stream_create,
    .stream_check = cpu_stream_check,
    .stream_destroy = cpu_stream_destroy,
    .stream_synchronize = cpu_stream_synchronize,
    .stream_wait_event = cpu_stream_wait_event,
    .event_create = cpu_event_create,
    .event_destroy = cpu_event_destroy,
    .event_record = cpu_event_record,
    .event_synchronize = cpu_event_synchronize,
    .mem_alloc = cpu_mem_alloc,
    .mem_free = cpu_mem_free,
    .memcpy = cpu_memcpy,
    .memset = cpu_memset,
    .host_register = cpu_host_register,
    .host_unregister = cpu_nothing,
    .host_device_pointer = cpu_host_device_pointer,
    .memory_kind = cpu_memory_kind,
};
