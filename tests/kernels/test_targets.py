"""Targets and chips (issue #24, item 2): the rule between ``target=`` and the chips a
``gpu.module``'s ``#nvvm.target`` names, and builds for several chips at once (one fatbin per
gpu.module holding each chip's cubin and PTX)."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest

import pywave
from pywave import api
from pywave.frontend import validate
from pywave.kernels import nvvm, toolkit
from pywave.program import Target

from conftest import DATA

needs_ptxas = pytest.mark.skipif(not nvvm.has_ptxas(toolkit.cuda_toolkit()),
                                 reason="needs ptxas from a CUDA toolkit")

VECTOR_ADD = (DATA / "vector_add.mlir").read_text()


def with_targets(targets: str) -> str:
    """vector_add.mlir whose gpu.module lists ``targets`` (attribute text)."""
    return VECTOR_ADD.replace("gpu.module @kernels", f"gpu.module @kernels [{targets}]", 1)


def fatbin_chips(data: bytes) -> list[str]:
    """The sm_XX of each ELF image inside a fatbin (or of a cubin): the SM number is in
    e_flags, bits 8-15 for CUDA's ELF ABI version 8 and later (CUDA 13), else bits 0-7."""
    chips, pos = [], 0
    while (pos := data.find(b"\x7fELF", pos)) >= 0:
        e_flags = int.from_bytes(data[pos + 48:pos + 52], "little")
        chips.append(f"sm_{(e_flags >> 8) & 0xff if data[pos + 8] >= 8 else e_flags & 0xff}")
        pos += 4
    return chips


# ---- the target value -------------------------------------------------------------------------
@pytest.mark.parametrize("given", ["sm_80,sm_90", ["sm_80", "sm_90"], ("sm_80", " sm_90")])
def test_several_chips_are_one_value(given):
    assert validate.targets(given) == "sm_80,sm_90"
    assert Target.parse("sm_80,sm_90").chips == ("sm_80", "sm_90")


@pytest.mark.parametrize("given, match", [
    ([], "names no chip"), ("sm_90,sm_90", "names a chip twice"),
    ("sm_90,gfx942", "mixes NVIDIA and AMD"), ("sm_90,sm_9000", "'sm_9000' is not a chip")])
def test_bad_chip_lists_are_compile_errors(given, match):
    with pytest.raises(pywave.CompileError, match=match):
        api.build(VECTOR_ADD, target=given)


def test_a_list_of_non_str_is_a_type_error():
    with pytest.raises(TypeError, match="target"):
        api.build(VECTOR_ADD, target=["sm_90", 90])


# ---- the IR's chips and target= ----------------------------------------------------------------
@needs_ptxas
def test_requested_chip_wins_over_the_ir_chip_with_a_warning(caplog):
    with caplog.at_level(logging.WARNING, logger="pywave.kernels"):
        art = api.build(with_targets('#nvvm.target<chip = "sm_80">'), target="sm_90")
    assert art.target.chip == "sm_90"
    (binary,) = art.binaries
    assert binary.chip == "sm_90"
    assert [k.chip for k in binary.kernels if k.name == "add"] == ["sm_90"]
    assert fatbin_chips(binary.data) == ["sm_90"]
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "@kernels" in warning and "sm_80" in warning and "sm_90" in warning


@needs_ptxas
def test_ir_target_parameters_are_kept_when_the_chip_changes():
    art = api.build(with_targets('#nvvm.target<chip = "sm_80", O = 1>'), target="sm_90",
                    keep_stages=True)
    assert '#nvvm.target<O = 1, chip = "sm_90"' in art.stages["kernels"]


@needs_ptxas
def test_same_chip_in_ir_and_request_is_quiet(caplog):
    with caplog.at_level(logging.WARNING, logger="pywave.kernels"):
        art = api.build(with_targets('#nvvm.target<chip = "sm_90">'), target="sm_90")
    assert art.binaries[0].chip == "sm_90"
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]


@needs_ptxas
def test_ir_chips_requested_in_another_order_warn_and_follow_the_request(caplog):
    with caplog.at_level(logging.WARNING, logger="pywave.kernels"):
        art = api.build(with_targets('#nvvm.target<chip = "sm_90">, '
                                     '#nvvm.target<chip = "sm_80">'), target="sm_80,sm_90")
    assert art.binaries[0].chips == ("sm_80", "sm_90")
    assert [r for r in caplog.records if r.levelno == logging.WARNING]


@needs_ptxas
def test_ir_listing_two_chips_builds_both_without_target():
    """No target= and no GPU needed: every module has chips of its own."""
    code = ("import pywave.api as api, sys\n"
            "art = api.build(sys.stdin.read())\n"
            "b = art.binaries[0]\n"
            "print(art.target.chip, b.format, b.chip, "
            "[k.chip for k in b.kernels if k.name == 'add'])\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          input=with_targets('#nvvm.target<chip = "sm_80">, '
                                             '#nvvm.target<chip = "sm_90">'),
                          timeout=600, cwd="/")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[0] == "sm_80,sm_90 fatbin sm_80,sm_90 ['sm_80', 'sm_90']"


@pytest.mark.parametrize("fmt", ["ptx", pytest.param("auto", marks=needs_ptxas)])
def test_requested_features_reach_the_irs_own_targets(fmt):
    """``lowering={"features": ...}`` (``--features``) was dropped for a gpu.module with a
    target of its own: the IR's target kept MLIR's default, or got the toolkit's PTX ISA."""
    art = api.build(with_targets('#nvvm.target<chip = "sm_90">'), target="sm_90", format=fmt,
                    lowering={"features": "+ptx80"}, keep_stages=True)
    assert '#nvvm.target<chip = "sm_90", features = "+ptx80">' in art.stages["kernels"]


def test_requested_features_unlike_the_irs_are_a_compile_error():
    with pytest.raises(pywave.CompileError, match=r"@kernels has the target .*\+ptx81.* "
                                                  r"requested features are \+ptx80"):
        api.build(with_targets('#nvvm.target<chip = "sm_90", features = "+ptx81">'),
                  target="sm_90", format="ptx", lowering={"features": "+ptx80"})


# ---- the printed attribute: read and written back exactly --------------------------------------
#: Odd but valid targets: no parameters, O = 0, quoted strings with commas, brackets and escaped
#: quotes, nested dicts and unit flags, link arrays, function types and affine maps in flags.
ODD_TARGETS = [
    '#nvvm.target',
    '#nvvm.target<O = 0>',
    '#nvvm.target<chip = "sm_90", features = "+ptx80">',
    '#nvvm.target<chip = "sm_90", flags = {"ptxas-cmd-options" = ["-v", "a,b"], fast, '
    'k = {x = 1, y = [1, 2]}}>',
    '#nvvm.target<chip = "sm_90", link = ["/a,b.bc", "/c\\22d].bc"]>',
    '#nvvm.target<chip = "sm_90", flags = {s = "a = b, c>", '
    'm = affine_map<(d0, d1) -> (d1, d0)>, t = (i32) -> (i32, i64)}>',
    '#nvvm.target<triple = "nvptx64-nvidia-cuda", chip = "sm_80", O = 3, verifyTarget = false>',
    '#nvvm.target<O = 1, chip = "sm_90", flags = {s = "\\\\"}>',
    '#rocdl.target',
    '#rocdl.target<chip = "gfx942", abi = "500", flags = {unsafe_math, daz}>',
]


def _gpu_module(targets: str):
    from mlir import ir
    module = ir.Module.parse(
        f"gpu.module @k [{targets}] {{ gpu.func @f() kernel {{ gpu.return }} }}")
    return module, module.body.operations[0]


@pytest.mark.parametrize("attr", ODD_TARGETS)
def test_targets_round_trip_exactly(attr):
    from mlir import ir
    from pywave.kernels import targets
    with ir.Context():
        _, gmod = _gpu_module(attr)
        printed = [str(a) for a in ir.ArrayAttr(gmod.attributes["targets"])]
        read = targets.read(gmod)
        assert [str(t) for t in read] == printed and read[0].dialect == attr[1:attr.index(".")]
        targets.write(gmod, read)
        assert [str(a) for a in ir.ArrayAttr(gmod.attributes["targets"])] == printed
        chip = read[0].chip
        targets.write(gmod, [read[0].with_param("chip", '"sm_75"' if read[0].dialect == "nvvm"
                                                 else '"gfx90a"')])
        (changed,) = targets.read(gmod)
        assert changed.chip in ("sm_75", "gfx90a") and chip != changed.chip
        assert [p for p in changed.params if p[0] != "chip"] == \
            [p for p in read[0].params if p[0] != "chip"]


@pytest.mark.parametrize("option", ["-v", "--x=[1]", "a,b", 'q="x"', "back\\slash", "é",
                                    "tab\there", "O = 0"])
def test_ptxas_reads_the_cmd_options_mlir_holds(option):
    """ptxas gets each ``ptxas-cmd-options`` string exactly as MLIR holds it (brackets, commas,
    quotes, backslashes, non-ASCII), and ``O`` only from the target's own parameter."""
    from mlir import ir
    from pywave.kernels import ptxas
    with ir.Context():
        flags = ir.DictAttr.get({"ptxas-cmd-options": ir.ArrayAttr.get(
            [ir.StringAttr.get(option), ir.StringAttr.get("-lineinfo")]),
            "O": ir.IntegerAttr.get(ir.IntegerType.get_signless(64), 0)})
        _, gmod = _gpu_module(f'#nvvm.target<chip = "sm_90", flags = {flags}>')
        printed = str(ir.ArrayAttr(gmod.attributes["targets"])[0])
    assert ptxas.TargetOptions.parse(printed) == ptxas.TargetOptions("sm_90", 2,
                                                                     (option, "-lineinfo"))


@pytest.mark.parametrize("attr, match", [
    ('#nvvm.target<flags = {"ptxas-cmd-options" = [1]}>', "not a string"),
    ('#nvvm.target<flags = {"ptxas-cmd-options" = "-v"}>', "not an array of strings"),
    ('#nvvm.target<flags = {"ptxas-cmd-options" = ["\\FF"]}>', "not UTF-8"),
    ('#rocdl.target<chip = "gfx942">', "#nvvm.target")])
def test_ptxas_options_it_cannot_read_are_compile_errors(attr, match):
    from pywave.kernels import ptxas
    with pytest.raises(pywave.CompileError, match=match):
        ptxas.TargetOptions.parse(attr)


# ---- several chips ------------------------------------------------------------------------------
@needs_ptxas
def test_two_chips_give_one_fatbin_per_module():
    art = api.build(VECTOR_ADD, target=["sm_80", "sm_90"])
    assert art.target == Target("nvvm", "sm_80,sm_90")
    (binary,) = art.binaries
    assert binary.format == "fatbin" and binary.chips == ("sm_80", "sm_90")
    assert sorted(fatbin_chips(binary.data)) == ["sm_80", "sm_90"]
    assert [(k.name, k.chip) for k in binary.kernels if k.name == "add"] == \
        [("add", "sm_80"), ("add", "sm_90")]


@pytest.mark.parametrize("fmt", ["cubin", "ptx"])
def test_two_chips_in_a_one_chip_format_are_an_error(fmt):
    with pytest.raises(pywave.CompileError, match=rf"format='{fmt}' holds code for one chip.*"
                                                  r"sm_80, sm_90.*fatbin"):
        api.build(VECTOR_ADD, target="sm_80,sm_90", format=fmt)


@needs_ptxas
def test_the_chips_are_part_of_the_cache_key():
    one = pywave.compile(VECTOR_ADD, target="sm_90", disk_cache=False)
    two = pywave.compile(VECTOR_ADD, target="sm_80,sm_90", disk_cache=False)
    same = pywave.compile(VECTOR_ADD, target=["sm_80", "sm_90"], disk_cache=False)
    assert one is not two and two is same
    assert one.target == "sm_90" and two.target == "sm_80,sm_90"


@needs_ptxas
def test_cli_target_list(tmp_path):
    out = tmp_path / "add.fatbin"
    proc = subprocess.run([sys.executable, "-m", "pywave", "compile", str(DATA / "vector_add.mlir"),
                           "--target", "sm_80,sm_90", "-o", str(out)],
                          capture_output=True, text=True, timeout=600, cwd="/")
    assert proc.returncode == 0, proc.stderr
    assert "kernel binary @kernels: fatbin" in proc.stdout and "chip sm_80,sm_90" in proc.stdout
    assert "kernel @add (sm_80)" in proc.stdout and "kernel @add (sm_90)" in proc.stdout
    assert sorted(fatbin_chips(out.read_bytes())) == ["sm_80", "sm_90"]


@pytest.mark.gpu
def test_the_driver_loads_its_chip_from_a_two_chip_fatbin(torch_cuda):
    torch = torch_cuda
    from pywave import runtime
    chip = runtime.device_chip()
    other = "sm_80" if chip != "sm_80" else "sm_75"
    mod = pywave.compile(VECTOR_ADD, target=[other, chip], disk_cache=False)
    assert mod.binaries[0].format == "fatbin"
    attrs = mod.kernel_attributes("add", device=0)
    assert attrs.chip == chip and attrs.binary_version == int(chip[3:].rstrip("a"))
    a = torch.randn(1000, device="cuda")
    b = torch.randn(1000, device="cuda")
    c = torch.empty_like(a)
    mod(a, b, c)
    assert torch.equal(c, a + b)


# --------------------------------------------------------------------------------------------
# kernels/targets.py: a target attribute as parameters, read and written back unchanged
# --------------------------------------------------------------------------------------------
ROUND_TRIPS = [
    "#nvvm.target",
    '#nvvm.target<chip = "sm_90">',
    '#nvvm.target<O = 3, chip = "sm_90a", features = "+ptx80">',
    '#nvvm.target<chip = "sm_90", flags = {"ptxas-cmd-options" = ["-v", "--maxrregcount=32"]}>',
    '#nvvm.target<chip = "sm_80", link = ["/a,b/lib.bc"]>',
    '#rocdl.target<chip = "gfx942", abi = "500">',
]


@pytest.mark.parametrize("text", ROUND_TRIPS)
def test_a_target_attribute_reads_and_writes_back_as_mlir_prints_it(text):
    from mlir import ir

    from pywave.kernels import targets
    with ir.Context():
        module = ir.Module.parse(f"module {{ gpu.module @k [{text}] {{ }} }}")
        gmod = module.body.operations[0]
        printed = str(ir.ArrayAttr(gmod.attributes["targets"])[0])
        (attr,) = targets.read(gmod)
        assert str(attr) == printed
        targets.write(gmod, [attr])
        assert str(ir.ArrayAttr(gmod.attributes["targets"])[0]) == printed


def test_a_parameter_change_keeps_the_others():
    from pywave.kernels.targets import TargetAttr
    attr = TargetAttr.parse('#nvvm.target<O = 2, chip = "sm_80", features = "+ptx80">')
    assert str(attr.with_param("chip", '"sm_90"')) == \
        '#nvvm.target<O = 2, chip = "sm_90", features = "+ptx80">'
    assert attr.with_param("flags", "{}").get("flags") == "{}"
    assert TargetAttr.parse("#nvvm.target").chip == "sm_50"      # MLIR's default chip
