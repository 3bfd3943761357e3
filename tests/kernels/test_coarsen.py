"""Block coarsening of elementwise kernels (:mod:`pywave.kernels.rewrites.coarsen`).

What the coarsened copy computes is what the kernel computes: on the CPU device everywhere
and on the GPU where one is (the ``device`` fixture), with ``coarsen_threads=1`` so that every
launch runs the copy. Then which kernels get a copy, what the host's launches choose, and that
the kernel API knows only the kernel as written (compile-only: no device needed)."""

from __future__ import annotations

import numpy as np
import pytest

import pywave
from pywave import pipeline
from pywave.lowering import LoweringOptions
from pywave.program import COARSENED_SUFFIX

EVERY_LAUNCH = {"coarsen_threads": 1}


def module(kernel_body: str, *, grid: str = "%g", block: int = 256, extra_args: str = "",
           extra_types: str = "") -> str:
    """@k(%a, %b, %c: memref<?xf32>, %n: index{extra}) with ``kernel_body``, launched by
    @main(%a, %b, %c{extra}) over ``grid`` blocks of ``block`` threads; %g is
    ceildiv(n, block), %f floor(n / block), %n the size of %c."""
    launched = ", %s : memref<?xf32>" if extra_types else ""
    return f"""
module attributes {{gpu.container_module}} {{
  gpu.module @m {{
    gpu.func @k(%a: memref<?xf32>, %b: memref<?xf32>, %c: memref<?xf32>, %n: index{extra_types})
        kernel {{
      %bid = gpu.block_id x
      %bdim = gpu.block_dim x
      %tid = gpu.thread_id x
      %t0 = arith.muli %bid, %bdim : index
      %i = arith.addi %t0, %tid : index
{kernel_body}
      gpu.return
    }}
  }}
  func.func @main(%a: memref<?xf32>, %b: memref<?xf32>, %c: memref<?xf32>{extra_args}) {{
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %cb = arith.constant {block} : index
    %n = memref.dim %c, %c0 : memref<?xf32>
    %g = arith.ceildivui %n, %cb : index
    %f = arith.divui %n, %cb : index
    gpu.launch_func @m::@k blocks in ({grid}, %c1, %c1) threads in (%cb, %c1, %c1)
        args(%a : memref<?xf32>, %b : memref<?xf32>, %c : memref<?xf32>, %n : index{launched})
    return
  }}
}}
"""


GUARDED_ADD = """
      %in = arith.cmpi ult, %i, %n : index
      scf.if %in {
        %x = memref.load %a[%i] : memref<?xf32>
        %y = memref.load %b[%i] : memref<?xf32>
        %z = arith.addf %x, %y : f32
        memref.store %z, %c[%i] : memref<?xf32>
      }"""

#: Two stores, values computed between the loads and the stores, a constant index.
TWO_STORES = """
      %in = arith.cmpi ult, %i, %n : index
      scf.if %in {
        %x = memref.load %a[%i] : memref<?xf32>
        %y = memref.load %b[%i] : memref<?xf32>
        %z = arith.mulf %x, %y : f32
        %w = arith.subf %x, %y : f32
        memref.store %z, %c[%i] : memref<?xf32>
        memref.store %w, %b[%i] : memref<?xf32>
      }"""

#: No guard: every thread of the grid writes (the host launches exactly n / 64 blocks).
FLAT = """
      %x = memref.load %a[%i] : memref<?xf32>
      %two = arith.constant 2.0 : f32
      %z = arith.mulf %x, %two : f32
      memref.store %z, %c[%i] : memref<?xf32>"""

#: gpu.grid_dim x is the grid of the launch as written, not of the coarsened one.
GRID_DIM = """
      %gd = gpu.grid_dim x
      %gi = arith.index_cast %gd : index to i64
      %gf = arith.sitofp %gi : i64 to f32
      %in = arith.cmpi ult, %i, %n : index
      scf.if %in {
        %x = memref.load %a[%i] : memref<?xf32>
        %z = arith.addf %x, %gf : f32
        memref.store %z, %c[%i] : memref<?xf32>
      }"""

#: A load before the guard (every thread reads the scale).
SCALED = """
      %c0 = arith.constant 0 : index
      %s0 = memref.load %s[%c0] : memref<?xf32>
      %in = arith.cmpi ult, %i, %n : index
      scf.if %in {
        %x = memref.load %a[%i] : memref<?xf32>
        %z = arith.mulf %x, %s0 : f32
        memref.store %z, %c[%i] : memref<?xf32>
      }"""

#: A division before the guard: the load phase keeps it under "the virtual block exists".
DIVIDED = """
      %two = arith.constant 2 : index
      %twice = arith.muli %i, %two : index
      %j = arith.divui %twice, %two : index
      %in = arith.cmpi ult, %j, %n : index
      scf.if %in {
        %x = memref.load %a[%j] : memref<?xf32>
        %y = memref.load %b[%j] : memref<?xf32>
        %z = arith.subf %x, %y : f32
        memref.store %z, %c[%j] : memref<?xf32>
      }"""

SIZES = [1, 255, 256, 257, 1023, 1024, 1025, 4097, 100_003]


def inputs(n: int):
    rng = np.random.default_rng(n)
    return rng.standard_normal((2, n), dtype=np.float32)


@pytest.mark.parametrize("n", SIZES)
def test_guarded_add_is_unchanged(device, n):
    mod = device.compile(module(GUARDED_ADD), lowering=EVERY_LAUNCH)
    a0, b0 = inputs(n)
    a, b, c = device.put(a0), device.put(b0), device.zeros(n)
    mod(a, b, c)
    assert np.array_equal(device.get(c), a0 + b0)


@pytest.mark.parametrize("n", [255, 256, 1025, 4097, 5 * 256 + 3])
def test_blocks_past_the_grid_stay_unrun(device, n):
    """The host launches floor(n / 256) blocks: the elements past them stay 0, also when the
    coarsened grid's last block has virtual blocks past the grid."""
    mod = device.compile(module(GUARDED_ADD, grid="%f"), lowering=EVERY_LAUNCH)
    a0, b0 = inputs(n)
    a, b, c = device.put(a0), device.put(b0), device.zeros(n)
    mod(a, b, c)
    done = n // 256 * 256
    expected = np.zeros(n, np.float32)
    expected[:done] = a0[:done] + b0[:done]
    assert np.array_equal(device.get(c), expected)


@pytest.mark.parametrize("n", [64, 64 * 5, 64 * 7, 64 * 1001])
def test_flat_kernel(device, n):
    mod = device.compile(module(FLAT, block=64), lowering=EVERY_LAUNCH)
    a0, _ = inputs(n)
    a, b, c = device.put(a0), device.zeros(n), device.zeros(n)
    mod(a, b, c)
    assert np.array_equal(device.get(c), a0 * np.float32(2))


@pytest.mark.parametrize("n", [1, 1025, 100_003])
def test_two_stores_and_in_place(device, n):
    """c = a * b and b = a - b in one kernel, then again with c the same tensor as a."""
    mod = device.compile(module(TWO_STORES), lowering=EVERY_LAUNCH)
    a0, b0 = inputs(n)
    a, b, c = device.put(a0), device.put(b0), device.zeros(n)
    mod(a, b, c)
    assert np.array_equal(device.get(c), a0 * b0)
    assert np.array_equal(device.get(b), a0 - b0)
    a, b = device.put(a0), device.put(b0)
    mod(a, b, a)
    assert np.array_equal(device.get(a), a0 * b0)
    assert np.array_equal(device.get(b), a0 - b0)


@pytest.mark.parametrize("n", [1, 257, 4097, 100_003])
def test_grid_dim_is_the_written_grid(device, n):
    mod = device.compile(module(GRID_DIM), lowering=EVERY_LAUNCH)
    a0, _ = inputs(n)
    a, b, c = device.put(a0), device.zeros(n), device.zeros(n)
    mod(a, b, c)
    assert np.array_equal(device.get(c), a0 + np.float32(-(-n // 256)))


@pytest.mark.parametrize("n", [1, 1025, 100_003])
def test_division_before_the_guard(device, n):
    mod = device.compile(module(DIVIDED), lowering=EVERY_LAUNCH)
    a0, b0 = inputs(n)
    a, b, c = device.put(a0), device.put(b0), device.zeros(n)
    mod(a, b, c)
    assert np.array_equal(device.get(c), a0 - b0)


@pytest.mark.parametrize("n", [1, 1025, 100_003])
def test_load_before_the_guard(device, n):
    text = module(SCALED, extra_args=", %s: memref<?xf32>", extra_types=", %s: memref<?xf32>")
    mod = device.compile(text, lowering=EVERY_LAUNCH)
    a0, _ = inputs(n)
    scale = np.array([3.5], np.float32)
    a, b, c, s = device.put(a0), device.zeros(n), device.zeros(n), device.put(scale)
    mod(a, b, c, s)
    assert np.array_equal(device.get(c), a0 * scale[0])


# ----------------------------------------------------------------------------------------
# Which kernels get a copy, and what the host and the kernel API see (compile-only)
# ----------------------------------------------------------------------------------------

def prepared(text: str, target: str = "sm_90", **lowering) -> str:
    """The module after the prepare stage, for ``target`` (PTX: no ptxas needed)."""
    compiler = pipeline.Pipeline(text, target=target, format="ptx" if target != "cpu" else
                                 "auto", lowering=LoweringOptions(**lowering))
    compiler.keep_stages = True
    return compiler.run().stages["prepare"]


def test_nvidia_launch_chooses_by_size():
    """On NVIDIA targets by default: the copy for launches of at least 2^22 threads whose grid
    a CUDA launch allows, the kernel as written otherwise."""
    text = prepared(module(GUARDED_ADD))
    assert f"@m::@k{COARSENED_SUFFIX} blocks in" in text
    assert "@m::@k blocks in" in text
    assert f"{1 << 22} : index" in text and "2147483647 : index" in text
    assert "pywave.coarsened" in text


def test_cpu_target_and_off():
    assert COARSENED_SUFFIX not in prepared(module(GUARDED_ADD), target="cpu")
    assert COARSENED_SUFFIX not in prepared(module(GUARDED_ADD), coarsen_threads=0)
    assert f"@m::@k{COARSENED_SUFFIX}" in prepared(module(GUARDED_ADD), target="cpu",
                                                  coarsen_threads=1)


LEFT_ALONE = {
    "a barrier": GUARDED_ADD.replace("scf.if %in {", "gpu.barrier\n      scf.if %in {"),
    "a load after a store": GUARDED_ADD.replace(
        "memref.store %z, %c[%i] : memref<?xf32>",
        "memref.store %z, %c[%i] : memref<?xf32>\n"
        "        %r = memref.load %c[%i] : memref<?xf32>\n"
        "        memref.store %r, %b[%i] : memref<?xf32>"),
    "an atomic": GUARDED_ADD.replace(
        "memref.store %z, %c[%i] : memref<?xf32>",
        "%old = memref.atomic_rmw addf %z, %c[%i] : (f32, memref<?xf32>) -> f32"),
    "a loop": """
      %c1 = arith.constant 1 : index
      %in = arith.cmpi ult, %i, %n : index
      scf.if %in {
        scf.for %j = %i to %n step %n {
          %x = memref.load %a[%j] : memref<?xf32>
          memref.store %x, %c[%j] : memref<?xf32>
        }
      }""",
    "an else branch": GUARDED_ADD.replace(
        "memref.store %z, %c[%i] : memref<?xf32>\n      }",
        "memref.store %z, %c[%i] : memref<?xf32>\n      } else {\n"
        "        %zero = arith.constant 0.0 : f32\n"
        "        memref.store %zero, %b[%tid] : memref<?xf32>\n      }"),
    "no load": """
      %in = arith.cmpi ult, %i, %n : index
      scf.if %in {
        %z = arith.constant 1.0 : f32
        memref.store %z, %c[%i] : memref<?xf32>
      }""",
}


@pytest.mark.parametrize("why", sorted(LEFT_ALONE))
def test_kernels_left_alone(why):
    assert COARSENED_SUFFIX not in prepared(module(LEFT_ALONE[why]), coarsen_threads=1), why


def test_async_and_constant_small_launches_stay_as_written():
    """A launch with async tokens, and one whose grid and block are constants below the
    threshold, run the kernel as written (and then no copy is made)."""
    text = module(GUARDED_ADD).replace(
        "    gpu.launch_func @m::@k", "    %t0 = gpu.wait async\n"
        "    %t1 = gpu.launch_func async [%t0] @m::@k").replace(
        "    return\n", "    gpu.wait [%t1]\n    return\n")
    assert COARSENED_SUFFIX not in prepared(text, coarsen_threads=1)
    small = module(GUARDED_ADD, grid="%c1")
    assert COARSENED_SUFFIX not in prepared(small, coarsen_threads=257)
    assert COARSENED_SUFFIX in prepared(small, coarsen_threads=256)


def test_shared_memory_kernel_left_alone():
    text = module(GUARDED_ADD).replace(
        "        kernel {", "        workgroup(%w : memref<256xf32, #gpu.address_space<workgroup>>)"
        " kernel {")
    assert COARSENED_SUFFIX not in prepared(text, coarsen_threads=1)


def test_kernel_api_knows_the_kernel_as_written():
    mod = pywave.compile(module(GUARDED_ADD), target="cpu", lowering=EVERY_LAUNCH)
    assert list(mod.kernels) == ["m::k"]
    with pytest.raises(pywave.NotFoundError, match="no launchable kernel"):
        mod.kernels["k" + COARSENED_SUFFIX]
    n = 1000
    a0, b0 = inputs(n)
    c = np.zeros(n, np.float32)
    mod.kernels["k"](a0, b0, c, n, grid=(4, 1, 1), block=(256, 1, 1))
    assert np.array_equal(c, a0 + b0)


@pytest.mark.parametrize("value", [-1, True, 1.5, "4", (2**31 - 1) * 1024 + 1])
def test_option_is_checked(value):
    with pytest.raises(pywave.CompileError, match="coarsen_threads") as caught:
        LoweringOptions(coarsen_threads=value)
    assert repr(value) in str(caught.value) and f"[0, {(2**31 - 1) * 1024}]" in str(caught.value)


def test_the_command_line_takes_coarsen_threads():
    import argparse
    from pywave.entry import run
    parser = argparse.ArgumentParser()
    run.add_lowering_options(parser)
    assert run.lowering_options(parser.parse_args([])).coarsen_threads is None
    assert run.lowering_options(parser.parse_args(["--coarsen-threads", "0"])).coarsen_threads == 0
