"""pywave.frontend.validate: values MLIR/LLVM assert on are typed errors before they reach them."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

import pywave
from pywave import mlirutil
from pywave.api import build
from pywave.kernels import nvvm, toolkit
from conftest import TESTS

DATA = os.path.join(TESTS, "data")
V = open(os.path.join(DATA, "vector_add.mlir"), encoding="utf-8").read()


def compile_error(text: str, **kw) -> str:
    with pytest.raises(pywave.CompileError) as info:
        build(text, target=kw.pop("target", "sm_90"), format="ptx", **kw)
    return str(info.value)


def isolated_compile_error(text: str) -> str:
    """The CompileError of compiling ``text`` in a worker: an abort inside MLIR (what these
    checks prevent) fails the test instead of killing the test process."""
    with pytest.raises(pywave.CompileError) as info:
        pywave.compile(text, target="sm_90", format="ptx", disk_cache=False, isolate=True)
    return str(info.value)


@pytest.mark.parametrize("target", ["gfx9420", "sm_900", 'sm_90"', "sm_90 ", ""])
def test_unknown_targets_list_valid_names(target):
    message = compile_error(V, target=target)
    assert repr(target) in message and "sm_90a" in message or "gfx942" in message


def test_target_of_wrong_type_names_the_parameter():
    with pytest.raises(TypeError, match="target must be a chip name.*int 90"):
        pywave.compile(V, target=90)


def test_chip_inside_the_module_is_checked():
    text = V.replace("gpu.module @kernels", 'gpu.module @kernels [#nvvm.target<chip = "sm_900">]')
    assert "gpu.module @kernels 'sm_900'" in compile_error(text)


@pytest.mark.parametrize("kw, exc, words", [
    ({"opt_level": 5}, pywave.CompileError, "opt_level=5"),
    ({"opt_level": "2"}, TypeError, "opt_level"),
    ({"format": "elf"}, pywave.CompileError, "format='elf'"),
    ({"isolate": "yes"}, TypeError, "isolate"),
    ({"binaries": [b"x"]}, TypeError, "binaries")])
def test_options_are_validated(kw, exc, words):
    with pytest.raises(exc, match=words):
        pywave.compile(V, target="sm_90", disk_cache=False, **kw)


def test_pipeline_values_are_quoted_and_unquotable_ones_refused():
    pipeline = nvvm.binary_pipeline("isa", "/opt/cu da} dump-intermediates=/tmp")
    assert 'toolkit="/opt/cu da} dump-intermediates=/tmp"' in pipeline
    with pytest.raises(pywave.CompileError, match="double quote"):
        nvvm.binary_pipeline("isa", '/opt/x" opts="-v')


def test_pipeline_value_reaches_mlir_as_one_option():
    from mlir import ir, passmanager
    with ir.Context():
        pm = passmanager.PassManager.parse(
            nvvm.binary_pipeline("isa", "/opt/cu da format=bin"))
    assert "toolkit={/opt/cu da format=bin}" in str(pm) and "format=isa" in str(pm)


@pytest.mark.skipif(not nvvm.has_ptxas(toolkit.cuda_toolkit()), reason="needs ptxas")
def test_cuda_path_with_a_space(tmp_path, monkeypatch):
    real = toolkit.cuda_toolkit()
    root = tmp_path / "cuda toolkit"
    (root / "bin").mkdir(parents=True)
    (root / "nvvm").symlink_to(os.path.join(real, "nvvm"))
    (root / "bin" / "ptxas").symlink_to(os.path.realpath(os.path.join(real, "bin", "ptxas")))
    monkeypatch.setenv("PYWAVE_CUDA_PATH", str(root))
    art = build(V, target="sm_90", format="cubin")
    assert art.binaries[0].format == "cubin"


@pytest.mark.parametrize("space", ["-1", "16777216"])
def test_memory_space_out_of_range(space):
    message = compile_error(V.replace("memref<?xf32>", f"memref<?xf32, {space}>"))
    assert f"memory space {space}" in message and "0..16777215" in message


@pytest.mark.parametrize("space", ['"x"', '"global"', "#gpu<shuffle_mode xor>"])
def test_memory_space_no_lowering_maps(space):
    """An attribute that is not an address space (fuzz seed 31, case 2727: a string memory
    space on a host argument aborted the host lowering inside the MLIR bindings)."""
    message = compile_error(V.replace("memref<?xf32>", f"memref<?xf32, {space}>"))
    assert f"memory space {space}, which no lowering maps to an LLVM address space" in message
    assert "#gpu.address_space<global|workgroup|private>" in message


@pytest.mark.parametrize("space", ["#gpu.address_space<global>", "#gpu.address_space<private>",
                                   "#amdgpu.address_space<fat_raw_buffer>"])
@pytest.mark.parametrize("where", ["private", "public"])
def test_gpu_memory_space_in_host_code(space, where):
    """The host lowering maps no #gpu/#amdgpu memory space; a host function typed with one
    made a pass report a failed conversion yet succeed, which aborts the MLIR bindings (fuzz
    seed 34, case 90). Compiled in a worker, so that a regression fails instead of aborting."""
    t = f"memref<?xf32, {space}>"
    text = V.rstrip()[:-1] + (f"  func.func private @h(%a: {t}) {{ return }}\n}}\n"
                              if where == "private" else
                              f"  func.func @h(%a: {t}) {{ return }}\n}}\n")
    message = isolated_compile_error(text)
    assert f"uses the type {t} in host code" in message, message
    assert "memory space 1 (or none)" in message


@pytest.mark.parametrize("decl, t", [
    ("memref.global \"private\" @g : {t} = uninitialized",
     "memref<4xf32, #gpu.address_space<global>>"),
    ("func.func private @h(%a: {t}) {{ return }}",
     "!async.value<memref<4xf32, #gpu.address_space<global>>>"),
    ("func.func private @h(%a: {t}) {{ return }}",
     "memref<4xmemref<4xf32, #gpu.address_space<global>>>")])
def test_gpu_memory_space_nested_or_in_an_attribute_in_host_code(decl, t):
    """The type in a memref.global's attribute, or nested in another type, is checked too."""
    text = V.rstrip()[:-1] + "  " + decl.format(t=t) + "\n}\n"
    message = isolated_compile_error(text)
    assert f"uses the type {t} in host code" in message, message


def test_gpu_memory_space_in_a_launch_body_is_kernel_code():
    """A gpu.launch body is outlined into a kernel: workgroup memory there is allowed."""
    text = V.replace("func.func @main", """func.func @uses_launch(%a: memref<?xf32>) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    gpu.launch blocks(%bx, %by, %bz) in (%x = %c1, %y = %c1, %z = %c1)
        threads(%tx, %ty, %tz) in (%u = %c1, %v = %c1, %w = %c1)
        workgroup(%buf : memref<4xf32, #gpu.address_space<workgroup>>) {
      %g = memref.load %buf[%c0] : memref<4xf32, #gpu.address_space<workgroup>>
      memref.store %g, %a[%c0] : memref<?xf32>
      gpu.terminator
    }
    return
  }
  func.func @main""")
    assert "uses_launch" in pywave.compile(text, target="sm_90", format="ptx",
                                           disk_cache=False).functions


@pytest.mark.parametrize("space", ["#gpu.address_space<workgroup>", "3"])
def test_alloca_in_workgroup_memory_in_a_kernel(space):
    t = f"memref<4xf32, {space}>"
    text = V.replace("%tid = gpu.thread_id x", f"""%tid = gpu.thread_id x
      %sm = memref.alloca() : {t}
      %one = arith.constant 1.0 : f32
      memref.store %one, %sm[%tid] : {t}""")
    message = compile_error(text)
    assert message.startswith("memref.alloca at line") and "memory space" in message
    assert "workgroup attribution" in message


@pytest.mark.parametrize("attr", ["known_block_size = array<i32: -1, 1, 1>",
                                  "known_grid_size = array<i32: 0, 1, 1>",
                                  "nvvm.maxntid = array<i32: -1, 1, 1>",
                                  "nvvm.reqntid = array<i32: 1, 1, 2147483647>"])
def test_launch_bounds_out_of_range(attr):
    message = compile_error(V.replace(") kernel {", f") kernel attributes {{{attr}}} {{"))
    assert attr.split(" =")[0] in message and "1..2147483646" in message


def test_duplicate_gpu_func_is_a_compile_error_not_an_abort():
    i = V.index("    gpu.func")
    j = V.index("    }\n  }\n") + 6
    text = V[:j] + V[i:j] + V[j:]
    code = ("import sys; from pywave.api import build; import pywave\n"
            "for _ in range(40):\n"
            "    try: build(sys.stdin.read() or text, target='sm_90')\n"
            "    except pywave.CompileError as e: text = e\n"
            "print('redefinition of symbol' in str(text))")
    code = code.replace("sys.stdin.read() or text", "TEXT").replace(
        "import pywave\n", f"import pywave\nTEXT = {text!r}\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "True"


def test_lone_surrogate_is_a_compile_error():
    with pytest.raises(pywave.CompileError, match="lone UTF-16 surrogate") as info:
        pywave.compile(V.replace("%a", "%a\udc80", 1), target="sm_90", disk_cache=False)
    assert info.value.line is not None


def test_twenty_thousand_arguments_fail_fast():
    params = ", ".join(f"%x{i}: index" for i in range(20000))
    text = V[:V.rfind("}")] + f"  func.func @wide({params}) {{\n    return\n  }}\n}}\n"
    start = time.monotonic()
    message = compile_error(text)
    assert "20000 argument words" in message and "4096" in message
    assert time.monotonic() - start < 60


def test_op_no_stage_lowers_is_named_with_its_location():
    text = V.replace("%tid = gpu.thread_id x",
                     "%tid = gpu.thread_id x\n      linalg.copy ins(%a : memref<?xf32>) "
                     "outs(%c : memref<?xf32>)")
    message = compile_error(text)
    assert message.startswith("linalg.copy at line 8, column")
    assert "kernels" in message and len(message) < 800


@pytest.mark.parametrize("access", [
    "%v = memref.load %a[%c0] : memref<?xf32>\n    memref.store %v, %c[%c0] : memref<?xf32>",
    "memref.copy %a, %c : memref<?xf32> to memref<?xf32>"])
def test_host_access_to_a_device_argument(access):
    text = V.replace("    return\n  }\n}", f"    {access}\n    return\n  }}\n}}")
    message = compile_error(text)
    assert "argument #0 of host function @main" in message or \
        "argument #2 of host function @main" in message
    assert message.split(" ")[0] in ("memref.load", "memref.copy", "memref.store")


def test_host_memory_may_be_accessed_on_the_host():
    text = V.replace("    return\n  }\n}", """    %h = memref.alloc() : memref<4xf32>
    %v = memref.load %h[%c0] : memref<4xf32>
    memref.store %v, %h[%c1] : memref<4xf32>
    memref.dealloc %h : memref<4xf32>
    return
  }
}""")
    build(text, target="sm_90", format="ptx")


def test_chip_lists_are_known_to_llvm():
    """Every listed chip is a processor of llvmlite's LLVM (no 'not a recognized
    processor' warning)."""
    code = ("import llvmlite.binding as l; l.initialize_all_targets(); "
            "l.initialize_all_asmprinters(); from pywave.frontend import validate\n"
            "for triple, chips in (('nvptx64-nvidia-cuda', validate.NVPTX_CHIPS), "
            "('amdgcn-amd-amdhsa', validate.AMDGPU_CHIPS)):\n"
            "    t = l.Target.from_triple(triple)\n"
            "    for c in chips: t.create_target_machine(cpu=c)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "not a recognized processor" not in out.stderr, out.stderr[:2000]


def test_ptx_isa_follows_the_ptxas_release():
    from pywave.kernels import toolkit
    assert toolkit.ptx_isa("12.1.105") == 81
    assert toolkit.ptx_isa("12.6.20") == 85
    assert toolkit.ptx_isa("13.0.88") == 90
    assert toolkit.ptx_isa("14.2.1") == toolkit.LLVM_MAX_PTX
    assert toolkit.ptx_isa("11.0.1") is None and toolkit.ptx_isa("") is None


@pytest.mark.parametrize("given, expected", [
    ('#nvvm.target<O = 3, chip = "sm_90">', '#nvvm.target<O = 3, chip = "sm_90", '
     'features = "+ptx90">'),
    ("#nvvm.target", '#nvvm.target<features = "+ptx90">'),
    ('#nvvm.target<chip = "sm_90", features = "+ptx80">',
     '#nvvm.target<chip = "sm_90", features = "+ptx80">'),
    ('#rocdl.target<chip = "gfx942">', '#rocdl.target<chip = "gfx942">')])
def test_ptx_version_is_raised_only_where_no_features_were_given(given, expected):
    from mlir import ir

    from pywave.kernels import targets
    version = toolkit.ptx_isa("13.0.88")
    assert version == 90
    with ir.Context() as ctx:
        ctx.allow_unregistered_dialects = False
        module = ir.Module.parse(f"module {{ gpu.module @k [{given}] {{ }} }}")
        targets.raise_ptx_version(module, version)
        gmod = mlirutil.gpu_modules(module)[0]
        assert str(ir.ArrayAttr(gmod.attributes["targets"])[0]) == expected


@pytest.mark.skipif(not nvvm.has_ptxas(toolkit.cuda_toolkit()), reason="needs ptxas")
def test_kernel_with_5472_bytes_of_parameters_compiles():
    """137 memref<?xf32> descriptors of 40 bytes: 5,480 bytes, over PTX 7.8's 4 KiB limit
    (ptxas: "requires PTX ISA .version 8.1")."""
    n = 137
    params = ", ".join(f"%a{i}: memref<?xf32>" for i in range(n))
    args = ", ".join(f"%a{i} : memref<?xf32>" for i in range(n))
    text = f"""module attributes {{gpu.container_module}} {{
  gpu.module @k {{
    gpu.func @wide({params}) kernel {{
      %c0 = arith.constant 0 : index
      %x = memref.load %a0[%c0] : memref<?xf32>
      memref.store %x, %a{n - 1}[%c0] : memref<?xf32>
      gpu.return
    }}
  }}
  func.func @main({params}) {{
    %c1 = arith.constant 1 : index
    gpu.launch_func @k::@wide blocks in (%c1, %c1, %c1) threads in (%c1, %c1, %c1)
        args({args})
    return
  }}
}}"""
    art = build(text, target="sm_90", format="cubin")
    assert art.binaries[0].format == "cubin"


def test_deep_nesting_is_refused_before_parsing():
    text = f"#map = affine_map<(d0) -> ({'(' * 100000}d0{')' * 100000})>\n" + V
    with pytest.raises(pywave.CompileError, match="deeper than 1000 levels at line 1") as info:
        pywave.compile(text, target="sm_90", disk_cache=False)
    assert info.value.column == 1027


def test_many_shallow_or_commented_brackets_are_not_nesting():
    """More than 1,000 opening brackets in all (so the text is scanned), none deeper than 2
    outside a comment: the scan counts depth, not brackets."""
    text = V + "// " + "(" * 5000 + "\n" + "".join(
        f"#m{i} = affine_map<(d0) -> (d0)>\n" for i in range(600))
    pywave.compile(text, target="sm_90", format="ptx", disk_cache=False)


def test_nesting_below_the_limit_compiles():
    text = f"#map = affine_map<(d0) -> ({'(' * 900}d0{')' * 900})>\n" + V
    pywave.compile(text, target="sm_90", format="ptx", disk_cache=False)


@pytest.mark.parametrize("size", ["65536", "2147483648"])
def test_constant_launch_sizes_beyond_the_limits_compile(size):
    """Outlining turns them into known_block_size hints that NVVM's range metadata asserts
    on (ConstantRange, APInt); the launch itself is refused at run time."""
    text = open(os.path.join(DATA, "launch_outline.mlir"), encoding="utf-8").read()
    text = text.replace("%sy = %c1", "%sy = %cbig").replace(
        "%c256 = arith.constant 256 : index",
        f"%c256 = arith.constant 256 : index\n    %cbig = arith.constant {size} : index")
    pywave.compile(text, target="sm_90", format="ptx", disk_cache=False)


def test_private_host_functions_may_read_their_arguments():
    """A private function is called by host code (with host memory), never from Python; the
    same function made public may be called from Python with a GPU tensor."""
    helper = """  func.func VIS@first(%m: memref<4xf32>) -> f32 {
    %c0 = arith.constant 0 : index
    %v = memref.load %m[%c0] : memref<4xf32>
    return %v : f32
  }
  func.func @main"""
    build(V.replace("  func.func @main", helper.replace("VIS", "private ")), target="sm_90",
          format="ptx")
    message = compile_error(V.replace("  func.func @main", helper.replace("VIS", "")))
    assert "argument #0 of host function @first" in message


@pytest.mark.parametrize("shared", [True, False])
def test_gpu_alloc_written_on_the_host_unless_host_shared(shared):
    alloc = "gpu.alloc host_shared ()" if shared else "gpu.alloc ()"
    text = V.replace("    return\n  }\n}", f"""    %h = {alloc} : memref<4xf32>
    %one = arith.constant 1.0 : f32
    memref.store %one, %h[%c0] : memref<4xf32>
    return
  }}
}}""")
    if shared:
        build(text, target="sm_90", format="ptx")
    else:
        assert compile_error(text).startswith("memref.store at line")


@pytest.mark.parametrize("index", ["-1", "1", "2147483648"])
def test_memref_dim_of_a_constant_index_out_of_range(index):
    """Canonicalisation folds such a memref.dim and asserts (ShapedType::isDynamicDim)."""
    text = V.replace("%n = memref.dim %c, %c0", "%n = memref.dim %c, %cbad").replace(
        "%c0 = arith.constant 0 : index",
        f"%c0 = arith.constant 0 : index\n    %cbad = arith.constant {index} : index")
    message = compile_error(text)
    assert message.startswith("memref.dim at line") and f"dimension {index} of" in message
    assert "0..0" in message


def test_host_op_left_unlowered_is_named_not_a_crash():
    """convert-to-llvm and convert-vector-to-llvm leave an op they cannot lower (here a
    vector.scan: MLIR lowers it with a test-only pattern set only); translating the module
    would crash the bindings. (A transfer_read at an index vector-to-scf gives up on, once the
    example here, is now lowered by convert-vector-to-llvm.)"""
    text = """
      func.func @main(%out: memref<3xi32>) {
        %v = arith.constant dense<[1, 2, 3]> : vector<3xi32>
        %i = arith.constant dense<0> : vector<i32>
        %s:2 = vector.scan <add>, %v, %i {inclusive = true, reduction_dim = 0}
            : vector<3xi32>, vector<i32>
        %c0 = arith.constant 0 : index
        vector.store %s#0, %out[%c0] : memref<3xi32>, vector<3xi32>
        return
      }"""
    message = compile_error(text)
    assert message.startswith("vector.scan at line 5") and "host stage" in message
