"""Random well-defined GPU kernels with barriers, for :mod:`fuzz.split_fuzz`.

A case is a module of 1-3 kernels (``gpu.module @m``) and a host function ``@run(%in:
memref<?xi32>, %inf: memref<?xf32>, %o0: memref<?xi64>, ...)`` launching each kernel once,
kernel ``k`` writing output ``%ok``. Every kernel is well defined on a GPU:

- each thread writes only its own output slots (``out[gid * K + slot]``: every value the
  kernel emits, converted to its i64 bits);
- workgroup arrays (attributions and ``memref.global`` in address space 3, one element per
  thread of the block, written by every thread before a first barrier) are, between two
  barriers, either written only at the thread's own element or read anywhere, never both
  (:class:`_State` tracks this along every path, loops' back edges included); a counter
  array is only changed by ``memref.atomic_rmw addi`` between barriers, whose old values
  are unused (they depend on the threads' interleaving, see :meth:`KernelGen.atomic`);
- accesses are in bounds (indices reduced modulo the size), no integer division, shifts by
  constants below the width, floats stay finite (no product of two variables);
- barriers sit at top level or in ``scf.for``/``scf.if``/``scf.while`` every thread takes
  alike, thread-dependent ``scf.if``/``scf.for`` hold none. Some control ops holding barriers
  are thread-dependent in form only (a condition every thread computes alike from its own
  values), some keep a private buffer or a per-thread iteration value across a barrier:
  kernels the split must refuse, run as fibers.

The same seed and index give the same case.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

TYPES = ("i32", "i64", "index", "f32", "f64", "i1", "vector<4xf32>")
BLOCKS = ((7, 1, 1), (32, 1, 1), (64, 1, 1), (5, 3, 1), (8, 4, 1), (3, 5, 2), (4, 2, 3),
          (13, 1, 1), (2, 2, 2), (96, 1, 1), (17, 3, 1), (1, 1, 1), (6, 1, 4), (128, 1, 1))
GRIDS = ((1, 1), (2, 1), (3, 1), (2, 2), (1, 3))
WG = "#gpu.address_space<workgroup>"


@dataclass
class V:
    name: str
    type: str
    uniform: bool


@dataclass
class _State:
    """Workgroup-array use since the last barrier on some path to here: array -> modes
    ("w": own element written or read, "r": any element read, "a": atomics); ``open``:
    loops whose body has had no barrier yet on this path (their exposed uses recorded)."""
    cur: dict = field(default_factory=dict)
    open: list = field(default_factory=list)

    def copy(self) -> "_State":
        return _State({k: set(v) for k, v in self.cur.items()}, list(self.open))

    def can(self, array: str, mode: str) -> bool:
        return self.cur.get(array, set()) <= {mode}

    def use(self, array: str, mode: str) -> None:
        self.cur.setdefault(array, set()).add(mode)
        for frame in self.open:
            frame.setdefault(array, set()).add(mode)

    def barrier(self) -> None:
        self.cur.clear()
        self.open = []

    def merge(self, other: "_State") -> "_State":
        cur = {k: set(v) for k, v in self.cur.items()}
        for k, v in other.cur.items():
            cur.setdefault(k, set()).update(v)
        frames = list(self.open) + [f for f in other.open if all(f is not g for g in self.open)]
        return _State(cur, frames)


def _conflict(a: dict, b: dict) -> bool:
    return any(len(a.get(k, set()) | b.get(k, set())) > 1 for k in set(a) | set(b))


class KernelGen:
    """One kernel's text (:meth:`text`) for a block of ``block`` threads, grid ``grid``."""

    def __init__(self, rng: random.Random, name: str, block, grid, *, refuse: float,
                 printf: bool):
        self.rng, self.name, self.block, self.grid = rng, name, block, grid
        self.n = block[0] * block[1] * block[2]
        self.total = self.n * grid[0] * grid[1]
        self.refuse = refuse
        self.printf = printf
        self.count = 0
        self.lines: list[str] = []
        self.indent = 3
        self.consts: dict = {}
        self.scopes: list[list[V]] = [[]]
        self.slots = 0
        self.state = _State()
        self.budget = rng.randint(15, 60)
        self.globals: list[str] = []
        self.attrs: list[tuple[str, str]] = []
        self.arrays: list[tuple[str, str]] = []    # (name, element type), n elements each
        self.atomics = False

    # -- helpers --------------------------------------------------------------------------
    def fresh(self, stem: str = "v") -> str:
        self.count += 1
        return f"%{stem}{self.count}"

    def emit(self, line: str) -> None:
        self.lines.append("  " * self.indent + line)

    def const(self, value: int) -> str:
        if value not in self.consts:
            self.consts[value] = f"%c{value}" if value >= 0 else f"%cm{-value}"
        return self.consts[value]

    def add(self, v: V) -> V:
        self.scopes[-1].append(v)
        return v

    def values(self, t: str, uniform: bool = False) -> list[V]:
        return [v for s in self.scopes for v in s if v.type == t and (v.uniform or not uniform)]

    def op(self, t: str, text: str, uniform: bool) -> V:
        name = self.fresh()
        self.emit(f"{name} = {text}")
        return self.add(V(name, t, uniform))

    # -- values ---------------------------------------------------------------------------
    def value(self, t: str, uniform: bool = False, depth: int = 0) -> V:
        """A value of type ``t`` (uniform when asked): an existing one or a new op."""
        pool = self.values(t, uniform)
        if pool and (depth > 2 or self.rng.random() < 0.55):
            return self.rng.choice(pool)
        return self.new(t, uniform, depth + 1)

    def new(self, t: str, uniform: bool, depth: int) -> V:
        r = self.rng
        u = uniform
        if t == "index":
            if u or r.random() < 0.3:
                kind = r.choice(["const", "bid", "bdim", "gdim", "arith"] if depth < 3 else
                                ["const", "bid"])
                if kind == "const":
                    return V(self.const(r.randint(0, 9)), "index", True)
                if kind == "bid":
                    return self.op("index", f"gpu.block_id {r.choice('xy')}", True)
                if kind == "bdim":
                    return self.op("index", f"gpu.block_dim {r.choice('xyz')}", True)
                if kind == "gdim":
                    return self.op("index", f"gpu.grid_dim {r.choice('xy')}", True)
            choice = r.random()
            if not u and choice < 0.3:
                return self.op("index", f"gpu.thread_id {r.choice('xyz')}", False)
            if not u and choice < 0.5:
                x = self.value("i32", False, depth)
                return self.op("index", f"arith.index_cast {x.name} : i32 to index", False)
            a, b = self.value("index", u, depth), self.value("index", u, depth)
            o = r.choice(["addi", "muli", "xori", "maxui", "minui"])
            return self.op("index", f"arith.{o} {a.name}, {b.name} : index",
                           a.uniform and b.uniform)
        if t == "i32":
            choice = r.random()
            if u:
                x = self.value("index", True, depth)
                return self.op("i32", f"arith.index_cast {x.name} : index to i32", True)
            if choice < 0.2:
                return self.load_input("i32")
            if choice < 0.3 and self.arrays:
                got = self.shared_read("i32")
                if got is not None:
                    return got
            if choice < 0.35:
                self.atomic()
            if choice < 0.45:
                x = self.value("index", False, depth)
                return self.op("i32", f"arith.index_cast {x.name} : index to i32", x.uniform)
            if choice < 0.5:
                x = self.value("i64", False, depth)
                return self.op("i32", f"arith.trunci {x.name} : i64 to i32", x.uniform)
            if choice < 0.55:
                x = self.value("i1", False, depth)
                return self.op("i32", f"arith.extui {x.name} : i1 to i32", x.uniform)
            if choice < 0.62:
                c = self.value("i1", False, depth)
                a, b = self.value("i32", False, depth), self.value("i32", False, depth)
                return self.op("i32", f"arith.select {c.name}, {a.name}, {b.name} : i32",
                               a.uniform and b.uniform and c.uniform)
            if choice < 0.7:
                a = self.value("i32", False, depth)
                k = self.fresh("k")
                self.emit(f"{k} = arith.constant {r.randint(0, 31)} : i32")
                o = r.choice(["shli", "shrui", "shrsi"])
                return self.op("i32", f"arith.{o} {a.name}, {k} : i32", a.uniform)
            a, b = self.value("i32", False, depth), self.value("i32", False, depth)
            o = r.choice(["addi", "subi", "muli", "xori", "andi", "ori", "maxsi", "minui"])
            return self.op("i32", f"arith.{o} {a.name}, {b.name} : i32",
                           a.uniform and b.uniform)
        if t == "i64":
            choice = r.random()
            if u or choice < 0.3:
                x = self.value("index", u, depth)
                return self.op("i64", f"arith.index_cast {x.name} : index to i64", x.uniform)
            if choice < 0.6:
                x = self.value("i32", False, depth)
                return self.op("i64", f"arith.{r.choice(['extsi', 'extui'])} {x.name} : "
                               "i32 to i64", x.uniform)
            a, b = self.value("i64", False, depth), self.value("i64", False, depth)
            o = r.choice(["addi", "muli", "xori", "subi"])
            return self.op("i64", f"arith.{o} {a.name}, {b.name} : i64",
                           a.uniform and b.uniform)
        if t == "i1":
            choice = r.random()
            if u or choice < 0.4:
                a, b = self.value("index", u, depth), self.value("index", u, depth)
                p = r.choice(["ult", "eq", "ne", "uge", "slt"])
                return self.op("i1", f"arith.cmpi {p}, {a.name}, {b.name} : index",
                               a.uniform and b.uniform)
            if choice < 0.7:
                a, b = self.value("i32", False, depth), self.value("i32", False, depth)
                p = r.choice(["slt", "eq", "ne", "ugt", "sge"])
                return self.op("i1", f"arith.cmpi {p}, {a.name}, {b.name} : i32",
                               a.uniform and b.uniform)
            if choice < 0.85:
                a, b = self.value("f32", False, depth), self.value("f32", False, depth)
                p = r.choice(["olt", "oge", "oeq", "une"])
                return self.op("i1", f"arith.cmpf {p}, {a.name}, {b.name} : f32",
                               a.uniform and b.uniform)
            a, b = self.value("i1", False, depth), self.value("i1", False, depth)
            return self.op("i1", f"arith.xori {a.name}, {b.name} : i1", a.uniform and b.uniform)
        if t == "f32":
            choice = r.random()
            if u or choice < 0.2:
                x = self.value("i32", u, depth)
                return self.op("f32", f"arith.sitofp {x.name} : i32 to f32", x.uniform)
            if choice < 0.35:
                return self.load_input("f32")
            if choice < 0.42 and self.arrays:
                got = self.shared_read("f32")
                if got is not None:
                    return got
            if choice < 0.5:
                x = self.value("vector<4xf32>", False, depth)
                return self.op("f32", f"vector.extract {x.name}[{r.randint(0, 3)}] : f32 "
                               "from vector<4xf32>", x.uniform)
            if choice < 0.55:
                x = self.value("f64", False, depth)
                return self.op("f32", f"arith.truncf {x.name} : f64 to f32", x.uniform)
            if choice < 0.65:
                a = self.value("f32", False, depth)
                k = self.fresh("k")
                self.emit(f"{k} = arith.constant {r.choice(['0.5', '-1.5', '0.25', '1.0'])} : f32")
                return self.op("f32", f"arith.mulf {a.name}, {k} : f32", a.uniform)
            a, b = self.value("f32", False, depth), self.value("f32", False, depth)
            o = r.choice(["addf", "subf", "maximumf", "minimumf"])
            return self.op("f32", f"arith.{o} {a.name}, {b.name} : f32",
                           a.uniform and b.uniform)
        if t == "f64":
            choice = r.random()
            if choice < 0.4:
                x = self.value("f32", u, depth)
                return self.op("f64", f"arith.extf {x.name} : f32 to f64", x.uniform)
            if choice < 0.6:
                x = self.value("i64", u, depth)
                return self.op("f64", f"arith.sitofp {x.name} : i64 to f64", x.uniform)
            a, b = self.value("f64", u, depth), self.value("f64", u, depth)
            return self.op("f64", f"arith.{r.choice(['addf', 'subf'])} {a.name}, {b.name} : f64",
                           a.uniform and b.uniform)
        assert t == "vector<4xf32>"
        choice = r.random()
        if choice < 0.35:
            x = self.value("f32", u, depth)
            return self.op(t, f"vector.broadcast {x.name} : f32 to {t}", x.uniform)
        if choice < 0.55:
            xs = [self.value("f32", u, depth) for _ in range(4)]
            return self.op(t, f"vector.from_elements {', '.join(x.name for x in xs)} : {t}",
                           all(x.uniform for x in xs))
        if choice < 0.7:
            x, v = self.value("f32", u, depth), self.value(t, u, depth)
            return self.op(t, f"vector.insert {x.name}, {v.name} [{r.randint(0, 3)}] : f32 "
                           f"into {t}", x.uniform and v.uniform)
        a, b = self.value(t, u, depth), self.value(t, u, depth)
        return self.op(t, f"arith.{r.choice(['addf', 'subf', 'maximumf'])} {a.name}, {b.name} "
                       f": {t}", a.uniform and b.uniform)

    def bounded(self, v: V, n: int) -> str:
        """An index in [0, n) from index value ``v``."""
        name = self.fresh("i")
        self.emit(f"{name} = arith.remui {v.name}, {self.const(n)} : index")
        return name

    def load_input(self, t: str) -> V:
        idx = self.bounded(self.value("index"), self.total)
        arg = "%in" if t == "i32" else "%inf"
        return self.op(t, f"memref.load {arg}[{idx}] : memref<?x{t}>", False)

    def shared_read(self, t: str) -> V | None:
        names = [a for a, e in self.arrays if e == t]
        if not names:
            return None
        a = self.rng.choice(names)
        if self.state.can(a, "r") and self.rng.random() < 0.7:
            self.state.use(a, "r")
            idx = self.bounded(self.value("index"), self.n)
        elif self.state.can(a, "w"):
            self.state.use(a, "w")
            idx = "%lin"
        else:
            return None
        return self.op(t, f"memref.load {a}[{idx}] : memref<{self.n}x{t}, {WG}>", False)

    def shared_write(self) -> None:
        if not self.arrays:
            return
        a, t = self.rng.choice(self.arrays)
        if not self.state.can(a, "w"):
            return
        self.state.use(a, "w")
        x = self.value(t)
        self.emit(f"memref.store {x.name}, {a}[%lin] : memref<{self.n}x{t}, {WG}>")

    def atomic(self) -> None:
        """An atomic add to the counter; its old value unused (the old values depend on the
        order of the threads between barriers, which the split may change: a control op
        holding barriers cuts thread loops also where it runs none)."""
        if not self.atomics or not self.state.can("%cnt", "a"):
            return
        self.state.use("%cnt", "a")
        x = self.value("i32")
        k = self.const(self.rng.randint(0, 1))
        self.emit(f"{self.fresh('x')} = memref.atomic_rmw addi {x.name}, %cnt[{k}] : (i32, "
                  f"memref<2xi32, {WG}>) -> i32")

    def output(self, v: V) -> None:
        """Store ``v``'s bits (as i64) into this thread's next output slot."""
        t, name = v.type, v.name
        if t == "vector<4xf32>":
            name = self.op("f32", f"vector.extract {name}[{self.rng.randint(0, 3)}] : f32 from "
                           f"{t}", v.uniform).name
            t = "f32"
        if t == "f32":
            name = self.op("i32", f"arith.bitcast {name} : f32 to i32", v.uniform).name
            t = "i32"
        if t == "f64":
            name = self.op("i64", f"arith.bitcast {name} : f64 to i64", v.uniform).name
            t = "i64"
        if t in ("i32", "i1"):
            name = self.op("i64", f"arith.extui {name} : {t} to i64", v.uniform).name
        if t == "index":
            name = self.op("i64", f"arith.index_cast {name} : index to i64", v.uniform).name
        slot = self.fresh("s")
        self.emit(f"{slot} = arith.addi %obase, {self.const(self.slots)} : index")
        self.slots += 1
        self.emit(f"memref.store {name}, %out[{slot}] : memref<?xi64>")

    # -- statements -----------------------------------------------------------------------
    def body(self, *, barriers: bool, depth: int, length: int) -> None:
        for _ in range(length):
            if self.budget <= 0:
                return
            self.budget -= 1
            self.statement(barriers=barriers, depth=depth)

    def statement(self, *, barriers: bool, depth: int) -> None:
        r = self.rng
        x = r.random()
        if x < 0.25:
            self.output(self.value(r.choice(TYPES)))
        elif x < 0.35:
            self.value(r.choice(TYPES))
        elif x < 0.45:
            self.shared_write()
        elif x < 0.5:
            got = self.shared_read(r.choice(("i32", "f32")))
            if got is not None and r.random() < 0.5:
                self.output(got)
        elif x < 0.6 and barriers:
            self.barrier()
        elif x < 0.65:
            self.private(barriers)
        elif x < 0.68 and self.printf:
            v = self.value("i32")
            self.emit(f'gpu.printf "{self.name} %d\\n", {v.name} : i32')
        elif depth >= 3:
            self.output(self.value(r.choice(TYPES)))
        elif x < 0.75:
            self.thread_if(depth)
        elif x < 0.8:
            self.thread_for(depth)
        elif barriers and x < 0.88:
            self.uniform_for(depth)
        elif barriers and x < 0.94:
            self.uniform_if(depth)
        elif barriers:
            self.uniform_while(depth)
        else:
            self.thread_if(depth)

    def barrier(self) -> None:
        self.emit("gpu.barrier")
        self.state.barrier()

    def private(self, barriers: bool) -> None:
        """A private buffer written then read; across a barrier sometimes (a kernel the split
        must refuse)."""
        t = self.rng.choice(("i32", "f32", "f64"))
        buf = self.fresh("p")
        self.emit(f"{buf} = memref.alloca() : memref<4x{t}>")
        k = self.const(self.rng.randint(0, 3))
        x = self.value(t)
        self.emit(f"memref.store {x.name}, {buf}[{k}] : memref<4x{t}>")
        if barriers and self.rng.random() < self.refuse:
            self.barrier()
        self.output(self.op(t, f"memref.load {buf}[{k}] : memref<4x{t}>", False))

    def scoped(self, fn) -> None:
        self.scopes.append([])
        self.indent += 1
        try:
            fn()
        finally:
            self.indent -= 1
            self.scopes.pop()

    def results(self, uniform: bool) -> list[str]:
        return [self.rng.choice(TYPES) for _ in range(self.rng.randint(0, 2))] if \
            not uniform else [self.rng.choice(("index", "i32", "i1"))
                              for _ in range(self.rng.randint(0, 2))]

    def if_op(self, cond: V, types: list[str], *, barriers: bool, depth: int,
              uniform_yield: bool) -> list[V]:
        names = [self.fresh("r") for _ in types]
        head = (", ".join(names) + " = ") if names else ""
        self.emit(f"{head}scf.if {cond.name}" + (f" -> ({', '.join(types)})" if types else "")
                  + " {")
        pre = self.state.copy()
        ends = []
        for branch in ("then", "else"):
            if branch == "else":
                if not types and self.rng.random() < 0.5:
                    ends.append(pre)
                    break
                self.emit("} else {")
            self.state = pre.copy()

            def inner():
                self.body(barriers=barriers, depth=depth + 1, length=self.rng.randint(1, 5))
                if types:
                    ys = [self.value(t, uniform_yield) for t in types]
                    self.emit(f"scf.yield {', '.join(y.name for y in ys)} : "
                              f"{', '.join(types)}")
            self.scoped(inner)
            ends.append(self.state)
        self.emit("}")
        self.state = ends[0].merge(ends[1])
        return [self.add(V(n, t, cond.uniform and uniform_yield)) for n, t in zip(names, types)]

    def thread_if(self, depth: int) -> None:
        cond = self.value("i1")
        types = self.results(False)
        for v in self.if_op(cond, types, barriers=False, depth=depth, uniform_yield=False):
            if self.rng.random() < 0.7:
                self.output(v)

    def uniform_if(self, depth: int) -> None:
        fake = self.rng.random() < self.refuse
        if fake:    # alike for every thread, but computed from the thread's own values
            x = self.value("i32")
            cond = self.op("i1", f"arith.cmpi eq, {x.name}, {x.name} : i32", False)
            if self.rng.random() < 0.5:
                cond = self.op("i1", f"arith.xori {cond.name}, {self.value('i1', True).name}"
                               " : i1", False)
        else:
            cond = self.value("i1", True)
        uniform_yield = self.rng.random() > self.refuse
        types = self.results(uniform_yield)
        for v in self.if_op(cond, types, barriers=True, depth=depth,
                            uniform_yield=uniform_yield):
            if self.rng.random() < 0.7:
                self.output(v)

    def uniform_bound(self) -> tuple[str, str, str]:
        r = self.rng
        lb = self.const(r.choice((0, 0, 1)))
        if r.random() < 0.5:
            ub = self.const(r.randint(0, 4))
        else:
            x = self.value("index", True)
            m = self.bounded(x, 4)
            ub = self.fresh("u")
            self.emit(f"{ub} = arith.addi {m}, {lb} : index")
        return lb, ub, self.const(r.choice((1, 1, 2)))

    def uniform_for(self, depth: int) -> None:
        r = self.rng
        if r.random() < self.refuse:    # a bound alike everywhere, per thread in form
            lb, _, step = self.uniform_bound()
            t = self.value("index")
            z = self.fresh("z")
            self.emit(f"{z} = arith.muli {t.name}, {self.const(0)} : index")
            ub = self.fresh("u")
            self.emit(f"{ub} = arith.addi {z}, {self.const(r.randint(1, 3))} : index")
        else:
            lb, ub, step = self.uniform_bound()
        per_thread_iter = r.random() < self.refuse
        types = [r.choice(("index", "i32")) for _ in range(r.randint(0, 2))]
        inits = [self.value(t, not per_thread_iter) for t in types]
        names = [self.fresh("r") for _ in types]
        iv = self.fresh("iv")
        args = [self.fresh("a") for _ in types]
        head = (", ".join(names) + " = ") if names else ""
        it = (" iter_args(" + ", ".join(f"{a} = {v.name}" for a, v in zip(args, inits)) +
              ") -> (" + ", ".join(types) + ")") if types else ""
        self.emit(f"{head}scf.for {iv} = {lb} to {ub} step {step}{it} {{")
        self.loop(depth, [V(iv, "index", True)] + [V(a, t, not per_thread_iter)
                                                  for a, t in zip(args, types)],
                  types, uniform_yield=not per_thread_iter)
        for n, t in zip(names, types):
            v = self.add(V(n, t, not per_thread_iter))
            if r.random() < 0.6:
                self.output(v)

    def loop(self, depth: int, bound: list[V], types: list[str], *, uniform_yield: bool,
             extra=None) -> None:
        pre = self.state.copy()
        exposed: dict = {}
        self.state = pre.copy()
        self.state.open.append(exposed)

        def inner():
            for v in bound:
                self.add(v)
            self.body(barriers=True, depth=depth + 1, length=self.rng.randint(2, 7))
            if _conflict(exposed, self.state.cur):
                self.barrier()
            ys = [self.value(t, uniform_yield) for t in types]
            if extra is not None:
                ys = extra(ys)
            if ys:
                self.emit(f"scf.yield {', '.join(y.name for y in ys)} : "
                          f"{', '.join(y.type for y in ys)}")
            else:
                self.emit("scf.yield")
        self.scoped(inner)
        self.emit("}")
        tail = self.state
        tail.open = [f for f in tail.open if f is not exposed]
        self.state = pre.merge(tail)

    def uniform_while(self, depth: int) -> None:
        r = self.rng
        lb, ub, step = self.uniform_bound()
        fake = self.value("index") if r.random() < self.refuse else None
        i, j, n = self.fresh("w"), self.fresh("w"), self.fresh("r")
        self.emit(f"{n} = scf.while ({i} = {lb}) : (index) -> index {{")
        self.indent += 1
        c = self.fresh("wc")
        if fake is not None:   # a condition alike everywhere from a thread's own value
            self.emit(f"{c}z = arith.muli {fake.name}, {self.const(0)} : index")
            self.emit(f"{c}y = arith.addi {c}z, {i} : index")
            self.emit(f"{c} = arith.cmpi ult, {c}y, {ub} : index")
        else:
            self.emit(f"{c} = arith.cmpi ult, {i}, {ub} : index")
        self.emit(f"scf.condition({c}) {i} : index")
        self.indent -= 1
        self.emit("} do {")
        self.emit(f"^bb0({j}: index):")

        def step_up(ys):
            nxt = self.fresh("wn")
            self.emit(f"{nxt} = arith.addi {j}, {step} : index")
            return [V(nxt, "index", True)]
        self.loop(depth, [V(j, "index", True)], [], uniform_yield=True, extra=step_up)
        v = self.add(V(n, "index", True))
        if r.random() < 0.5:
            self.output(v)

    def thread_for(self, depth: int) -> None:
        r = self.rng
        x = self.value("index")
        ub = self.bounded(x, 4)
        types = [r.choice(TYPES) for _ in range(r.randint(0, 2))]
        inits = [self.value(t) for t in types]
        names = [self.fresh("r") for _ in types]
        iv = self.fresh("iv")
        args = [self.fresh("a") for _ in types]
        head = (", ".join(names) + " = ") if names else ""
        it = (" iter_args(" + ", ".join(f"{a} = {v.name}" for a, v in zip(args, inits)) +
              ") -> (" + ", ".join(types) + ")") if types else ""
        self.emit(f"{head}scf.for {iv} = {self.const(0)} to {ub} step {self.const(1)}{it} {{")

        def inner():
            self.add(V(iv, "index", False))
            for a, t in zip(args, types):
                self.add(V(a, t, False))
            self.body(barriers=False, depth=depth + 1, length=r.randint(1, 4))
            ys = [self.value(t) for t in types]
            self.emit(f"scf.yield {', '.join(y.name for y in ys)} : {', '.join(types)}"
                      if ys else "scf.yield")
        self.scoped(inner)
        self.emit("}")
        for n, t in zip(names, types):
            v = self.add(V(n, t, False))
            if r.random() < 0.7:
                self.output(v)

    # -- the kernel -----------------------------------------------------------------------
    def text(self) -> tuple[str, list[str]]:
        """(the gpu.func text, memref.global lines it needs)."""
        r = self.rng
        bx, by, bz = self.block
        for k in range(r.randint(0, 3)):
            t = r.choice(("i32", "f32"))
            if r.random() < 0.5:
                name = f"%wa{k}"
                self.attrs.append((name, t))
            else:
                name = f"%wg{k}"
                self.globals.append(f'memref.global "private" @{self.name}_g{k} : '
                                    f"memref<{self.n}x{t}, {WG}>")
            self.arrays.append((name, t))
        atomics = self.atomics = r.random() < 0.4
        body_lines = self.lines
        self.indent = 3
        # the thread's linear id, global id and output base: per-thread values every
        # segment uses (recomputed from the thread ids or carried)
        for a, t in self.arrays:
            if a.startswith("%wg"):
                self.emit(f"{a} = memref.get_global @{self.name}_g{a[3:]} : "
                          f"memref<{self.n}x{t}, {WG}>")
        self.emit("%tx = gpu.thread_id x")
        self.emit("%ty = gpu.thread_id y")
        self.emit("%tz = gpu.thread_id z")
        self.emit(f"%ly = arith.muli %tz, {self.const(by)} : index")
        self.emit("%ly2 = arith.addi %ly, %ty : index")
        self.emit(f"%lx = arith.muli %ly2, {self.const(bx)} : index")
        self.emit("%lin = arith.addi %lx, %tx : index")
        self.emit("%bx = gpu.block_id x")
        self.emit("%by = gpu.block_id y")
        self.emit(f"%bl = arith.muli %by, {self.const(self.grid[0])} : index")
        self.emit("%bl2 = arith.addi %bl, %bx : index")
        self.emit(f"%gb = arith.muli %bl2, {self.const(self.n)} : index")
        self.emit("%gid = arith.addi %gb, %lin : index")
        self.emit("%obase = arith.muli %gid, %KSLOTS : index")
        self.add(V("%lin", "index", False))
        self.add(V("%gid", "index", False))
        self.add(V("%bl2", "index", True))
        x0 = self.op("i32", "memref.load %in[%gid] : memref<?xi32>", False)
        self.op("f32", "memref.load %inf[%gid] : memref<?xf32>", False)
        arrays, self.arrays = self.arrays, []     # no reads before they are written
        for a, t in arrays:
            v = self.value(t)
            self.emit(f"memref.store {v.name}, {a}[%lin] : memref<{self.n}x{t}, {WG}>")
        self.arrays = arrays
        if atomics:
            z = self.op("i1", f"arith.cmpi eq, %lin, {self.const(0)} : index", False)
            self.emit(f"scf.if {z.name} {{")
            self.emit(f"  memref.store {x0.name}, %cnt[{self.const(0)}] : memref<2xi32, {WG}>")
            self.emit(f"  memref.store {x0.name}, %cnt[{self.const(1)}] : memref<2xi32, {WG}>")
            self.emit("}")
        if self.arrays or atomics:
            self.barrier()
        self.body(barriers=True, depth=0, length=self.budget)
        if atomics and self.state.can("%cnt", "r"):
            self.output(self.op("i32", f"memref.load %cnt[{self.const(1)}] : "
                                f"memref<2xi32, {WG}>", False))
        slots = max(self.slots, 1)
        self.const(slots)
        consts = [f"      {n} = arith.constant {v} : index" for v, n in
                  sorted(self.consts.items())]
        consts.append(f"      %KSLOTS = arith.constant {slots} : index")
        self.slots = slots
        wg = [f"%cnt: memref<2xi32, {WG}>"] + [f"{a}: memref<{self.n}x{t}, {WG}>"
                                                for a, t in self.attrs]
        head = (f"    gpu.func @{self.name}(%in: memref<?xi32>, %inf: memref<?xf32>, "
                f"%out: memref<?xi64>) workgroup({', '.join(wg)}) kernel {{")
        return "\n".join([head] + consts + body_lines + ["      gpu.return", "    }"]), \
            self.globals


@dataclass
class Case:
    text: str
    kernels: list[str]            # names, in launch order
    slots: list[int]              # output slots per thread of each kernel
    block: tuple
    grid: tuple
    printf: bool

    @property
    def threads(self) -> int:
        return self.block[0] * self.block[1] * self.block[2] * self.grid[0] * self.grid[1]


def make_case(seed: int, index: int, *, grid_scale: int = 1) -> Case:
    """Case ``index`` of ``seed``: 1-3 kernels sharing one block and grid shape."""
    rng = random.Random(f"{seed}:{index}")
    block = rng.choice(BLOCKS)
    grid = rng.choice(GRIDS)
    grid = (grid[0] * grid_scale, grid[1])
    printf = rng.random() < 0.1
    refuse = rng.choice((0.0, 0.0, 0.1, 0.3))
    kernels, texts, globals_, slots = [], [], [], []
    for k in range(rng.randint(1, 3)):
        gen = KernelGen(rng, f"k{k}", block, grid, refuse=refuse, printf=printf)
        text, gl = gen.text()
        kernels.append(f"k{k}")
        texts.append(text)
        globals_ += gl
        slots.append(gen.slots)
    outs = ", ".join(f"%o{k}: memref<?xi64>" for k in range(len(kernels)))
    launches = "\n".join(
        f"    gpu.launch_func @m::@{name} blocks in (%g0, %g1, %c1) threads in "
        f"(%b0, %b1, %b2) args(%in : memref<?xi32>, %inf : memref<?xf32>, "
        f"%o{k} : memref<?xi64>)" for k, name in enumerate(kernels))
    host = (f"  func.func @run(%in: memref<?xi32>, %inf: memref<?xf32>, {outs}) {{\n"
            f"    %c1 = arith.constant 1 : index\n"
            f"    %g0 = arith.constant {grid[0]} : index\n"
            f"    %g1 = arith.constant {grid[1]} : index\n"
            f"    %b0 = arith.constant {block[0]} : index\n"
            f"    %b1 = arith.constant {block[1]} : index\n"
            f"    %b2 = arith.constant {block[2]} : index\n{launches}\n    return\n  }}\n")
    text = ("module attributes {gpu.container_module} {\n  gpu.module @m {\n" +
            "".join(f"    {g}\n" for g in globals_) + "\n".join(texts) + "\n  }\n" + host +
            "}\n")
    return Case(text, kernels, slots, block, grid, printf)
