"""The launch rewriter (pywave.host.LaunchRewriter) on small LLVM-dialect modules, as the host
pipeline leaves them: no kernels compiled, no GPU."""

from __future__ import annotations

import re

import pytest

import pywave
from pywave.program import RELEASE_KERNELS, Binary

ir = pytest.importorskip("mlir.ir")
from pywave import host  # noqa: E402 - needs MLIR

IMAGE = Binary("kernels", "ptx", b".version 8.0\0", "sm_90")

LAUNCHES = r"""
module attributes {gpu.container_module} {
  gpu.binary @kernels [#gpu.object<#nvvm.target<chip = "sm_90">, "ptx">]
  llvm.func @mgpuStreamCreate() -> !llvm.ptr
  llvm.func @main(%n: i64, %p: !llvm.ptr) {
    %c1 = llvm.mlir.constant(1 : i64) : i64
    %s = llvm.call @mgpuStreamCreate() : () -> !llvm.ptr
    gpu.launch_func @kernels::@scale blocks in (%n, %c1, %c1) threads in (%c1, %c1, %c1) : i64
        args(%p : !llvm.ptr)
    gpu.launch_func @kernels::@scale blocks in (%n, %c1, %c1) threads in (%c1, %c1, %c1) : i64
        args(%p : !llvm.ptr)
    gpu.launch_func @kernels::@shift blocks in (%n, %c1, %c1) threads in (%c1, %c1, %c1) : i64
        args(%p : !llvm.ptr)
    llvm.return
  }
}
"""


def rewrite(text: str, binaries=(IMAGE,)) -> tuple[str, host.LaunchRewriter]:
    with ir.Context():
        module = ir.Module.parse(text)
        rewriter = host.LaunchRewriter(module, list(binaries))
        rewriter.run()
        module.operation.verify()
        return str(module), rewriter


def function(text: str, name: str) -> str:
    """The printed body of ``llvm.func @name``."""
    match = re.search(rf"llvm\.func (?:internal )?@{name}\(.*?\n  }}\n", text, re.S)
    assert match, f"no @{name} in:\n{text}"
    return match.group(0)


def test_every_launch_becomes_a_checked_wavert_jit_launch():
    text, rewriter = rewrite(LAUNCHES)
    main = function(text, "main")
    assert "gpu.launch_func" not in text
    assert main.count("llvm.call @__pywave_launch_") == 3
    # each launch and the runtime call is followed by an early return on failure
    assert main.count("llvm.cond_br") == 4
    assert len(re.findall(r"\^bb\d+:  // 4 preds", main)) == 1
    for i in range(3):
        assert "llvm.call @wavert_jit_launch(" in function(text, f"__pywave_launch_{i}")


def test_launches_of_one_kernel_share_a_slot_and_modules_share_an_image():
    text, rewriter = rewrite(LAUNCHES)
    assert rewriter.slots == {("kernels", "scale"): "__pywave_slot_0",
                              ("kernels", "shift"): "__pywave_slot_1"}
    assert text.count("llvm.mlir.global internal constant @__pywave_image_kernels") == 1
    assert "@__pywave_slot_0" in function(text, "__pywave_launch_1")
    assert "@__pywave_slot_1" in function(text, "__pywave_launch_2")


def test_mgpu_calls_become_wavert_jit_calls_followed_by_a_failure_check():
    text, _ = rewrite(LAUNCHES)
    assert "mgpu" not in text
    assert "llvm.func @wavert_jit_stream_create() -> !llvm.ptr" in text
    main = function(text, "main")
    create = main.index("@wavert_jit_stream_create()")
    assert main.index("llvm.call @wavert_jit_failed()", create) < main.index("llvm.cond_br")


def test_release_entry_releases_and_clears_every_slot():
    text, _ = rewrite(LAUNCHES)
    release = function(text, RELEASE_KERNELS)
    for slot in ("__pywave_slot_0", "__pywave_slot_1"):
        loaded = re.search(rf"(%\d+) = llvm\.mlir\.addressof @{slot}", release).group(1)
        kernel = re.search(rf"(%\d+) = llvm\.load {loaded} ", release).group(1)
        assert f"llvm.call @wavert_kernel_release({kernel})" in release
        assert re.search(rf"llvm\.store %\d+, {loaded} ", release)


def test_module_without_launches_still_has_a_release_entry():
    text, rewriter = rewrite("module {\n  llvm.func @main() {\n    llvm.return\n  }\n}\n")
    assert rewriter.slots == {}
    release = function(text, RELEASE_KERNELS)
    assert "wavert_kernel_release" not in text and "llvm.return" in release


def test_launch_into_a_missing_binary_names_it():
    with pytest.raises(pywave.CompileError, match=r"@kernels, which is not a gpu.binary"):
        rewrite(LAUNCHES, binaries=())
