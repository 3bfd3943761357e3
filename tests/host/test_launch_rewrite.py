"""The launch rewriter (pywave.host.launch_rewrite.LaunchRewriter) on small LLVM-dialect modules,
as the host pipeline leaves them: no kernels compiled, no GPU; and, on the driver stand-in, that
host code stops at the first runtime call that failed."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import pywave
from pywave.program import RELEASE_KERNELS, Binary

ir = pytest.importorskip("mlir.ir")
from mlir.dialects import llvm  # noqa: E402

from pywave.host import launch_rewrite  # noqa: E402 - needs MLIR
from conftest import TESTS

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


def rewrite(text: str, binaries=(IMAGE,)) -> tuple[str, launch_rewrite.LaunchRewriter]:
    with ir.Context():
        module = ir.Module.parse(text)
        rewriter = launch_rewrite.LaunchRewriter(module, list(binaries))
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


def test_mgpu_calls_keep_their_names_and_are_followed_by_a_failure_check():
    text, _ = rewrite(LAUNCHES)
    assert "wavert_jit_stream" not in text
    assert "llvm.func @mgpuStreamCreate() -> !llvm.ptr" in text
    main = function(text, "main")
    create = main.index("llvm.call @mgpuStreamCreate()")
    assert main.index("llvm.call @wavert_jit_failed()", create) < main.index("llvm.cond_br")


#: One call of each kind of runtime function host code can call, as the host pipeline leaves
#: them: the streams, events and memory of gpu-to-llvm, host registration, a TMA descriptor,
#: a cuSPARSE call, and Wave's helper (renamed).
RUNTIME_CALLS = r"""
module {
  llvm.func @mgpuStreamCreate() -> !llvm.ptr
  llvm.func @mgpuEventCreate() -> !llvm.ptr
  llvm.func @mgpuEventRecord(!llvm.ptr, !llvm.ptr)
  llvm.func @mgpuMemAlloc(i64, !llvm.ptr, i8) -> !llvm.ptr
  llvm.func @mgpuMemHostRegisterMemRef(i64, !llvm.ptr, i64)
  llvm.func @mgpuTensorMapEncodeTiledMemref(i64, !llvm.ptr, i64, i64, i64, i64, i64,
                                            !llvm.ptr) -> !llvm.ptr
  llvm.func @mgpuCreateDnVec(i64, !llvm.ptr, i32, !llvm.ptr) -> !llvm.ptr
  llvm.func @_mlir_ciface_wave_get_int64(!llvm.ptr) -> i64
  llvm.func @mgpuStreamDestroy(!llvm.ptr)
  llvm.func @main(%p: !llvm.ptr, %n: i64) {
    %c1 = llvm.mlir.constant(1 : i64) : i64
    %b = llvm.mlir.constant(0 : i8) : i8
    %i = llvm.mlir.constant(0 : i32) : i32
    %s = llvm.call @mgpuStreamCreate() : () -> !llvm.ptr
    %e = llvm.call @mgpuEventCreate() : () -> !llvm.ptr
    llvm.call @mgpuEventRecord(%e, %s) : (!llvm.ptr, !llvm.ptr) -> ()
    %m = llvm.call @mgpuMemAlloc(%n, %s, %b) : (i64, !llvm.ptr, i8) -> !llvm.ptr
    llvm.call @mgpuMemHostRegisterMemRef(%c1, %p, %c1) : (i64, !llvm.ptr, i64) -> ()
    %t = llvm.call @mgpuTensorMapEncodeTiledMemref(%c1, %p, %c1, %c1, %c1, %c1, %c1, %p)
        : (i64, !llvm.ptr, i64, i64, i64, i64, i64, !llvm.ptr) -> !llvm.ptr
    %v = llvm.call @mgpuCreateDnVec(%n, %m, %i, %s) : (i64, !llvm.ptr, i32, !llvm.ptr) -> !llvm.ptr
    %w = llvm.call @_mlir_ciface_wave_get_int64(%p) : (!llvm.ptr) -> i64
    llvm.call @mgpuStreamDestroy(%s) : (!llvm.ptr) -> ()
    llvm.return
  }
}
"""


def unchecked_runtime_calls(llvm_ir: str) -> list[str]:
    """The calls in LLVM IR text ``llvm_ir`` of libwavert's runtime (``mgpu*``, Wave's
    ``wavert_jit_wave_*``) not directly followed by ``call i32 @wavert_jit_failed()``, an
    ``icmp`` of its result and a branch on that (or, in a launch helper, a return of that
    result); and the launch helper calls (``__pywave_launch_*``) whose status is not compared
    and branched on the same way."""
    lines = [line.strip() for line in llvm_ir.splitlines() if line.strip()]
    unchecked = []
    for i, line in enumerate(lines):
        runtime = re.search(r"\bcall \S+ @(mgpu\w+|wavert_jit_wave_\w+)\(", line)
        launch = re.search(r"^(%\S+) = call i32 @__pywave_launch_\d+\(", line)
        if not (runtime or launch) or line.startswith("declare "):
            continue
        following = lines[i + 1:i + 4]
        if runtime:
            failed = re.match(r"(%\S+) = call i32 @wavert_jit_failed\(\)", following[0])
            status = failed.group(1) if failed else None
            following = following[1:]
        else:
            status = launch.group(1)
        if runtime and status and following[0] == f"ret i32 {status}":
            continue    # a launch helper returns the check to its caller, which branches
        check = re.match(rf"(%\S+) = icmp eq i32 {re.escape(status)}, 0$", following[0]) \
            if status else None
        if check is None or not following[1].startswith(f"br i1 {check.group(1)}, "):
            unchecked.append(line)
    return unchecked


def translated(text: str, *, rewritten: bool) -> str:
    """LLVM IR of the LLVM-dialect module ``text``, after the LaunchRewriter if
    ``rewritten``."""
    with ir.Context():
        module = ir.Module.parse(text)
        if rewritten:
            launch_rewrite.LaunchRewriter(module, [IMAGE]).run()
        module.operation.verify()
        return llvm.translate_module_to_llvmir(module.operation)


def test_every_runtime_call_is_followed_by_the_failure_check():
    llvm_ir = translated(RUNTIME_CALLS, rewritten=True)
    calls = re.findall(r"call \S+ @(mgpu\w+|wavert_jit_wave_\w+)\(", llvm_ir)
    assert len(calls) == 9 and "wavert_jit_wave_get_int64" in calls
    assert unchecked_runtime_calls(llvm_ir) == []
    # the check itself: without the rewrite, every mgpu* call is found unchecked (Wave's
    # helper has its own name until the rewrite renames it)
    assert len(unchecked_runtime_calls(translated(RUNTIME_CALLS, rewritten=False))) == 8


#: Upstream-lowered programs whose host code calls the runtime: streams, memory, events, host
#: registration (runner programs), TMA descriptors (sm_90).
PROGRAMS = [("runner/memory_ops.mlir", "sm_90"), ("runner/host_memref.mlir", "sm_90"),
            ("runner/readme_example.mlir", "sm_90"), ("async_concurrent.mlir", "sm_90"),
            ("sm90/tma_load.mlir", "sm_90a")]


@pytest.mark.parametrize("path,target", PROGRAMS)
@pytest.mark.parametrize("run_entry", [None, "main"])
def test_generated_host_code_checks_after_every_runtime_call(path, target, run_entry):
    from pywave import pipeline
    text = (TESTS / "data" / path).read_text()
    if run_entry and f"func.func @{run_entry}()" not in text:
        pytest.skip(f"{path} has no @{run_entry}() to run")
    llvm_ir = pipeline.Pipeline(text, target=target, run_entry=run_entry).run().host.llvm_ir
    assert re.search(r"call \S+ @mgpu\w+\(", llvm_ir), "no runtime call to check"
    assert unchecked_runtime_calls(llvm_ir) == []


def test_runtime_functions_have_one_name_each():
    """libwavert exports MLIR's mgpu* functions once, under their upstream names: each is a
    runtime call of host code, and no wavert_jit_* mirror of one is left."""
    import ctypes
    from pywave import layout
    header = Path(layout.include_dir(), "wavert_mgpu.h").read_text()
    declared = set(re.findall(r"^WAVERT_MGPU_EXPORT [^;(]*?\b(\w+)\(", header, re.M))
    assert len(declared) > 60 and all(launch_rewrite.is_runtime_call(name) for name in declared)
    jit_header = Path(layout.include_dir(), "wavert_jit.h").read_text()
    exported = set(re.findall(r"^WAVERT_EXPORT [^;(]*?\b(\w+)\(", jit_header, re.M))
    assert {"wavert_jit_launch", "wavert_jit_failed"} <= exported
    library = ctypes.CDLL(layout.libwavert())
    for mirror in ("stream_create", "stream_destroy", "stream_synchronize", "stream_wait_event",
                   "event_create", "event_destroy", "event_synchronize", "event_record",
                   "mem_alloc", "mem_free", "memcpy", "memset32", "memset16"):
        assert f"wavert_jit_{mirror}" not in exported
        assert not hasattr(library, f"wavert_jit_{mirror}"), mirror
    assert all(hasattr(library, name) for name in declared)


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


#: Host code that registers its (strided) argument, then launches: mgpuMemHostRegisterMemRef
#: refuses a memref that is not compact, before any driver call.
REGISTER_THEN_LAUNCH = """
module attributes {gpu.container_module} {
  gpu.module @k {
    gpu.func @empty() kernel { gpu.return }
  }
  func.func @main(%a: memref<?xf32, strided<[?], offset: ?>>) {
    %u = memref.cast %a : memref<?xf32, strided<[?], offset: ?>> to memref<*xf32>
    gpu.host_register %u : memref<*xf32>
    %c1 = arith.constant 1 : index
    gpu.launch_func @k::@empty blocks in (%c1, %c1, %c1) threads in (%c1, %c1, %c1)
    return
  }
}
"""


def test_host_code_stops_after_a_failed_runtime_call(tmp_path):
    """mgpuMemHostRegisterMemRef got no early return before: the kernel was launched after
    the registration had failed. Now the call raises its error and launches nothing."""
    from conftest import fake_driver_env
    code = textwrap.dedent(f"""
        import ctypes
        import pywave
        import test_args as t
        from conftest import fake_driver
        drv = ctypes.CDLL(str(fake_driver()))
        mod = pywave.compile({REGISTER_THEN_LAUNCH!r}, target="sm_90")
        strided = t.Producer(t.FakeTensor(shape=(4,), strides=(2,)))
        try:
            mod.main(strided)
        except pywave.Error as exc:
            print(type(exc).__name__, exc)
        print("launches", drv.fake_cuda_launch_count())
        """)
    env = fake_driver_env(importable=True, PYWAVE_CACHE_DIR=str(tmp_path))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=300, cwd=TESTS)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "mgpuMemHostRegisterMemRef: only compact row-major memrefs can be registered" \
        in done.stdout, done.stdout
    assert done.stdout.strip().endswith("launches 0"), done.stdout
