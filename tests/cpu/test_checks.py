"""The CPU device's checked mode (``checks=True``, ``$PYWAVE_CHECKS=1``): deliberately broken
kernels raise KernelFaultError naming the kernel, block, thread, index and memref (each run
in a child process with a time-out: never a hang, never a crash); the same kernels fixed
give exact results in checked mode; unchecked mode is unchanged."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import pywave

# One block of 32 threads (x) over 4 blocks unless a kernel says otherwise; @main launches
# kernel @K of gpu.module @k on (a, b) (both memref<?xf32>).
HOST = r"""
  func.func @main(%a: memref<?xf32>, %b: memref<?xf32>) {
    %c1 = arith.constant 1 : index
    %g = arith.constant GRID : index
    %t = arith.constant 32 : index
    gpu.launch_func @k::@K blocks in (%g, %c1, %c1) threads in (%t, %c1, %c1)
        args(%a : memref<?xf32>, %b : memref<?xf32>)
    return
  }
"""

KERNELS = {
    # b[i] = a[i + 1]: the last thread reads one past the end.
    "load_past_end": (4, r"""
      %i = gpu.global_id x
      %c1 = arith.constant 1 : index
      %j = arith.addi %i, %c1 : index
      %v = memref.load %a[%j] : memref<?xf32>
      memref.store %v, %b[%i] : memref<?xf32>
    """),
    # b[i + 1] = a[i]: the last thread stores one past the end.
    "store_past_end": (4, r"""
      %i = gpu.global_id x
      %c1 = arith.constant 1 : index
      %j = arith.addi %i, %c1 : index
      %v = memref.load %a[%i] : memref<?xf32>
      memref.store %v, %b[%j] : memref<?xf32>
    """),
    # b[i - 1] = a[i]: thread 0 of block 0 stores at index -1.
    "store_negative": (4, r"""
      %i = gpu.global_id x
      %c1 = arith.constant 1 : index
      %j = arith.subi %i, %c1 : index
      %v = memref.load %a[%i] : memref<?xf32>
      memref.store %v, %b[%j] : memref<?xf32>
    """),
    # a seen as 4 x 32 (rows of the blocks), read at [block + 1, thread]: block 3 reads row 4.
    "load_2d": (4, r"""
      %tx = gpu.thread_id x
      %bx = gpu.block_id x
      %c1 = arith.constant 1 : index
      %c0 = arith.constant 0 : index
      %r = arith.addi %bx, %c1 : index
      %m = memref.reinterpret_cast %a to offset: [0], sizes: [4, 32], strides: [32, 1]
          : memref<?xf32> to memref<4x32xf32>
      %v = memref.load %m[%r, %tx] : memref<4x32xf32>
      %i = gpu.global_id x
      memref.store %v, %b[%i] : memref<?xf32>
    """),
    # Workgroup buffer of 32 elements written at thread + 1.
    "shared_oob": (1, r"""
      %tx = gpu.thread_id x
      %c1 = arith.constant 1 : index
      %j = arith.addi %tx, %c1 : index
      %v = memref.load %a[%tx] : memref<?xf32>
      memref.store %v, %s[%j] : memref<32xf32, #gpu.address_space<workgroup>>
      gpu.barrier
      %w = memref.load %s[%tx] : memref<32xf32, #gpu.address_space<workgroup>>
      memref.store %w, %b[%tx] : memref<?xf32>
    """),
    # Only even threads reach the barrier.
    "divergent_barrier": (1, r"""
      %tx = gpu.thread_id x
      %c2 = arith.constant 2 : index
      %c0 = arith.constant 0 : index
      %r = arith.remui %tx, %c2 : index
      %even = arith.cmpi eq, %r, %c0 : index
      %v = memref.load %a[%tx] : memref<?xf32>
      memref.store %v, %s[%tx] : memref<32xf32, #gpu.address_space<workgroup>>
      scf.if %even {
        gpu.barrier
      }
      memref.store %v, %b[%tx] : memref<?xf32>
    """),
    # Thread 5 returns before the barrier.
    "early_return": (1, r"""
      %tx = gpu.thread_id x
      %c5 = arith.constant 5 : index
      %quit = arith.cmpi eq, %tx, %c5 : index
      cf.cond_br %quit, ^done, ^work
    ^work:
      %v = memref.load %a[%tx] : memref<?xf32>
      memref.store %v, %s[%tx] : memref<32xf32, #gpu.address_space<workgroup>>
      gpu.barrier
      %w = memref.load %s[%tx] : memref<32xf32, #gpu.address_space<workgroup>>
      memref.store %w, %b[%tx] : memref<?xf32>
      gpu.return
    ^done:
    """),
    # Thread 0 returns first; thread 1 then waits at the barrier thread 0 never reaches.
    "early_return_first": (1, r"""
      %tx = gpu.thread_id x
      %c0 = arith.constant 0 : index
      %quit = arith.cmpi eq, %tx, %c0 : index
      cf.cond_br %quit, ^done, ^work
    ^work:
      %v = memref.load %a[%tx] : memref<?xf32>
      memref.store %v, %s[%tx] : memref<32xf32, #gpu.address_space<workgroup>>
      gpu.barrier
      memref.store %v, %b[%tx] : memref<?xf32>
      gpu.return
    ^done:
    """),
    # Even threads wait at one gpu.barrier, odd threads at another.
    "two_barriers": (1, r"""
      %tx = gpu.thread_id x
      %c2 = arith.constant 2 : index
      %c0 = arith.constant 0 : index
      %r = arith.remui %tx, %c2 : index
      %even = arith.cmpi eq, %r, %c0 : index
      %v = memref.load %a[%tx] : memref<?xf32>
      scf.if %even {
        gpu.barrier
      } else {
        gpu.barrier
      }
      memref.store %v, %b[%tx] : memref<?xf32>
    """),
    # Every thread writes element 0 of the workgroup buffer, no barrier between.
    "race_write_write": (1, r"""
      %tx = gpu.thread_id x
      %c0 = arith.constant 0 : index
      %v = memref.load %a[%tx] : memref<?xf32>
      memref.store %v, %s[%c0] : memref<32xf32, #gpu.address_space<workgroup>>
      gpu.barrier
      %w = memref.load %s[%c0] : memref<32xf32, #gpu.address_space<workgroup>>
      memref.store %w, %b[%tx] : memref<?xf32>
    """),
    # Each thread writes s[t] and reads its neighbour's s[t + 1 mod 32] with no barrier.
    "race_read_after_write": (1, r"""
      %tx = gpu.thread_id x
      %c1 = arith.constant 1 : index
      %c32 = arith.constant 32 : index
      %v = memref.load %a[%tx] : memref<?xf32>
      memref.store %v, %s[%tx] : memref<32xf32, #gpu.address_space<workgroup>>
      %n0 = arith.addi %tx, %c1 : index
      %n = arith.remui %n0, %c32 : index
      %w = memref.load %s[%n] : memref<32xf32, #gpu.address_space<workgroup>>
      memref.store %w, %b[%tx] : memref<?xf32>
    """),
}

# The fixed kernels: (grid, body, expected b from a).
FIXED = {
    "load_in_bounds": (4, r"""
      %i = gpu.global_id x
      %c1 = arith.constant 1 : index
      %c127 = arith.constant 127 : index
      %j0 = arith.addi %i, %c1 : index
      %j = arith.minui %j0, %c127 : index
      %v = memref.load %a[%j] : memref<?xf32>
      memref.store %v, %b[%i] : memref<?xf32>
    """, lambda a: np.concatenate([a[1:], a[-1:]])),
    "load_2d_in_bounds": (4, r"""
      %tx = gpu.thread_id x
      %bx = gpu.block_id x
      %c1 = arith.constant 1 : index
      %c4 = arith.constant 4 : index
      %r0 = arith.addi %bx, %c1 : index
      %r = arith.remui %r0, %c4 : index
      %m = memref.reinterpret_cast %a to offset: [0], sizes: [4, 32], strides: [32, 1]
          : memref<?xf32> to memref<4x32xf32>
      %v = memref.load %m[%r, %tx] : memref<4x32xf32>
      %i = gpu.global_id x
      memref.store %v, %b[%i] : memref<?xf32>
    """, lambda a: np.roll(a.reshape(4, 32), -1, axis=0).reshape(-1)),
    # The neighbour exchange with its barrier (and the divergent one made uniform).
    "shared_rotate": (1, r"""
      %tx = gpu.thread_id x
      %c1 = arith.constant 1 : index
      %c32 = arith.constant 32 : index
      %v = memref.load %a[%tx] : memref<?xf32>
      memref.store %v, %s[%tx] : memref<32xf32, #gpu.address_space<workgroup>>
      gpu.barrier
      %n0 = arith.addi %tx, %c1 : index
      %n = arith.remui %n0, %c32 : index
      %w = memref.load %s[%n] : memref<32xf32, #gpu.address_space<workgroup>>
      gpu.barrier
      memref.store %w, %s[%tx] : memref<32xf32, #gpu.address_space<workgroup>>
      memref.store %w, %b[%tx] : memref<?xf32>
    """, lambda a: np.concatenate([np.roll(a[:32], -1), np.zeros(96, np.float32)])),
    # One thread writes element 0 (the others only read it after the barrier).
    "one_writer": (1, r"""
      %tx = gpu.thread_id x
      %c0 = arith.constant 0 : index
      %first = arith.cmpi eq, %tx, %c0 : index
      scf.if %first {
        %v = memref.load %a[%c0] : memref<?xf32>
        memref.store %v, %s[%c0] : memref<32xf32, #gpu.address_space<workgroup>>
      }
      gpu.barrier
      %w = memref.load %s[%c0] : memref<32xf32, #gpu.address_space<workgroup>>
      memref.store %w, %b[%tx] : memref<?xf32>
    """, lambda a: np.concatenate([np.full(32, a[0], np.float32), np.zeros(96, np.float32)])),
}


def module_text(name: str, grid: int, body: str) -> str:
    shared = "" if "%s" not in body else \
        " workgroup(%s : memref<32xf32, #gpu.address_space<workgroup>>)"
    return ("module attributes {gpu.container_module} {\n  gpu.module @k {\n"
            f"    gpu.func @{name}(%a: memref<?xf32>, %b: memref<?xf32>){shared} kernel {{"
            f"{textwrap.indent(textwrap.dedent(body), '      ')}      gpu.return\n"
            "    }\n  }\n" + HOST.replace("GRID", str(grid)).replace("@K", "@" + name) + "}\n")


# Runs one kernel in a child: prints the exception's class and message, or "OK" and b.
CHILD = r"""
import sys, numpy as np, pywave
text = sys.stdin.read()
mod = pywave.compile(text, target="cpu", disk_cache=False, checks=True)
a = np.arange(128, dtype=np.float32) + 1
b = np.zeros(128, np.float32)
try:
    mod.main(a, b)
except pywave.Error as exc:
    print(type(exc).__name__)
    print(exc)
else:
    print("OK")
"""


def run_child(text: str, env: dict | None = None) -> str:
    done = subprocess.run([sys.executable, "-c", CHILD], input=text, capture_output=True,
                          text=True, timeout=120, env={**os.environ, **(env or {})})
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


# name -> what the message must also say (besides kernel, block and thread).
EXPECT = {
    "load_past_end": [r"block \(3, 0, 0\)", r"thread \(31, 0, 0\)", "memref.load out of bounds",
                      r"index \[128\]", r"sizes \[128\]", r"memref<\?xf32>", "line 7, column 12"],
    "store_past_end": [r"block \(3, 0, 0\)", r"thread \(31, 0, 0\)",
                       "memref.store out of bounds", r"index \[128\]", r"sizes \[128\]",
                       r"memref<\?xf32>", "line 8, column 7"],
    "store_negative": [r"block \(0, 0, 0\)", r"thread \(0, 0, 0\)",
                       "memref.store out of bounds", r"index \[-1\]", r"sizes \[128\]"],
    "load_2d": [r"block \(3, 0, 0\)", r"thread \(0, 0, 0\)", "memref.load out of bounds",
                r"index \[4, 0\]", r"sizes \[4, 32\]", r"memref<4x32xf32>"],
    "shared_oob": [r"block \(0, 0, 0\)", r"thread \(31, 0, 0\)", "memref.store out of bounds",
                   r"index \[32\]", r"sizes \[32\]", "workgroup"],
    "divergent_barrier": [r"block \(0, 0, 0\)", r"thread \(1, 0, 0\) returned",
                          r"thread \(0, 0, 0\) waits for it at gpu.barrier at line 12"],
    "early_return": [r"block \(0, 0, 0\)", r"thread \(5, 0, 0\) returned",
                     r"thread \(0, 0, 0\) waits for it at gpu.barrier at line 11"],
    "early_return_first": [r"thread \(1, 0, 0\) waits at gpu.barrier at line 11",
                           r"thread \(0, 0, 0\) never reached"],
    "two_barriers": [r"thread \(1, 0, 0\) waits at gpu.barrier at line 13",
                     r"while thread \(0, 0, 0\) waits at gpu.barrier at line 11"],
    "race_write_write": [r"block \(0, 0, 0\)", "data race on workgroup memory",
                         r"thread \(1, 0, 0\) writes index \[0\]",
                         r"thread \(0, 0, 0\) wrote the same element",
                         r"memref<32xf32, #gpu.address_space<workgroup>>"],
    "race_read_after_write": [r"block \(0, 0, 0\)", "data race on workgroup memory",
                              r"thread \(1, 0, 0\) writes index \[1\]",
                              r"thread \(0, 0, 0\) read the same element",
                              r"memref<32xf32, #gpu.address_space<workgroup>>"],
}


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_broken_kernel_is_a_kernel_fault_naming_it(name):
    grid, body = KERNELS[name]
    out = run_child(module_text(name, grid, body))
    kind, _, message = out.partition("\n")
    assert kind == "KernelFaultError", out
    assert f"kernel {name}, " in message, message
    for pattern in EXPECT[name]:
        assert re.search(pattern, message), (pattern, message)


@pytest.mark.parametrize("name", sorted(FIXED))
def test_fixed_kernel_exact_in_checked_mode(name):
    grid, body, expected = FIXED[name]
    mod = pywave.compile(module_text(name, grid, body), target="cpu", disk_cache=False,
                         checks=True)
    a = np.arange(128, dtype=np.float32) + 1
    b = np.zeros(128, np.float32)
    mod.main(a, b)
    assert np.array_equal(b, expected(a))


def test_unchecked_mode_does_not_check():
    # The in-bounds part of a broken kernel runs as before (no fault raised without checks;
    # the race kernel's result is the last writer's in thread order).
    grid, body = KERNELS["race_write_write"]
    mod = pywave.compile(module_text("race_write_write", grid, body), target="cpu",
                         disk_cache=False)
    a = np.arange(128, dtype=np.float32) + 1
    b = np.zeros(128, np.float32)
    mod.main(a, b)
    assert np.array_equal(b[:32], np.full(32, a[31]))


def test_environment_variable_turns_checks_on():
    grid, body = KERNELS["store_negative"]
    child = CHILD.replace(", checks=True", "")
    done = subprocess.run([sys.executable, "-c", child], input=module_text(
        "store_negative", grid, body), capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYWAVE_CHECKS": "1"})
    assert done.stdout.startswith("KernelFaultError"), done.stdout + done.stderr[-2000:]
    done = subprocess.run([sys.executable, "-c", child], input=module_text(
        "load_in_bounds", *FIXED["load_in_bounds"][:2]), capture_output=True, text=True,
        timeout=120, env={**os.environ, "PYWAVE_CHECKS": "0"})
    assert done.stdout.startswith("OK"), done.stdout + done.stderr[-2000:]


def test_checks_need_the_cpu_target():
    grid, body = KERNELS["load_past_end"]
    with pytest.raises(pywave.CompileError, match="checks=True needs target='cpu'"):
        pywave.compile(module_text("load_past_end", grid, body), target="sm_90",
                       disk_cache=False, checks=True)
    with pytest.raises(TypeError, match="checks must be a bool"):
        pywave.compile(module_text("load_past_end", grid, body), target="cpu",
                       disk_cache=False, checks=1)


def test_checks_are_part_of_the_cache_key():
    grid, body, _ = FIXED["load_in_bounds"]
    text = module_text("load_in_bounds", grid, body)
    plain = pywave.compile(text, target="cpu", disk_cache=False)
    checked = pywave.compile(text, target="cpu", disk_cache=False, checks=True)
    assert plain is not checked
    assert pywave.compile(text, target="cpu", disk_cache=False, checks=True) is checked


def test_fault_of_one_launch_leaves_the_next_one_working():
    grid, body = KERNELS["load_past_end"]
    mod = pywave.compile(module_text("load_past_end", grid, body), target="cpu",
                         disk_cache=False, checks=True)
    a = np.arange(128, dtype=np.float32) + 1
    with pytest.raises(pywave.KernelFaultError, match=r"index \[128\]"):
        mod.main(a, np.zeros(128, np.float32))
    # The same kernel on a longer input (129 elements, 128 threads) is in bounds.
    a2 = np.arange(129, dtype=np.float32)
    b2 = np.zeros(129, np.float32)
    mod.main(a2, b2)
    assert np.array_equal(b2[:128], a2[1:])
