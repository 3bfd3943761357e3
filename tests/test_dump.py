"""Dumping compile intermediates (pywave.dump): compile-only, no GPU needed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pywave import api, dump, pipeline

DATA = Path(__file__).parent / "data"


def only_folder(root: Path) -> Path:
    [folder] = sorted(root.iterdir())
    return folder


def test_build_dumps_every_stage_and_manifest(mlir, tmp_path):
    text = mlir("vector_add.mlir")
    art = api.build(text, target="sm_90", dump_dir=str(tmp_path))
    folder = only_folder(tmp_path)
    assert art.dump_path == str(folder)
    assert folder.name.startswith("0001-") and len(folder.name) == len("0001-") + 10
    names = sorted(p.name for p in folder.iterdir())
    assert names[0] == "00-input.mlir"
    assert (folder / "00-input.mlir").read_text() == text
    numbered = [n for n in names if n != "manifest.json"]
    assert [int(n[:2]) for n in numbered] == list(range(len(numbered)))
    stems = [n[3:] for n in numbered]
    for expected in ("parse.mlir", "prepare.mlir", "nvvm.mlir", "kernels.ll", "kernels.ptx",
                     "kernels.mlir", "host.mlir", "host.ll", "host.s", "host.o"):
        assert expected in stems, stems
    binary = art.binaries[0]
    assert f"kernels.{binary.format}" in stems
    by_stem = {n[3:]: folder / n for n in numbered}
    assert "nvvm.target" in by_stem["nvvm.mlir"].read_text()
    assert "gpu.binary" not in by_stem["nvvm.mlir"].read_text()
    assert "gpu.binary" in by_stem["kernels.mlir"].read_text()
    assert "nvptx64" in by_stem["kernels.ll"].read_text()
    assert ".entry add" in by_stem["kernels.ptx"].read_text()
    assert "wavert_jit_launch" in by_stem["host.mlir"].read_text()
    assert by_stem["host.ll"].read_text() == art.host.llvm_ir
    assert by_stem["host.o"].read_bytes() == art.object_code
    assert by_stem["host.s"].read_text() == art.assembly

    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["complete"] is True
    assert manifest["target"] == {"backend": "nvvm", "chip": "sm_90"}
    assert manifest["tool_versions"] == pipeline.tool_versions()
    assert manifest["options"]["target"] == "sm_90" and manifest["options"]["opt_level"] == 2
    from pywave.frontend import prepare
    from pywave.host import stage as host_stage
    from pywave.kernels import nvvm
    assert manifest["pipelines"]["prepare"] == prepare.PREPARE_PIPELINE
    assert manifest["pipelines"]["nvvm"] == nvvm.NVVM_PIPELINE
    assert manifest["pipelines"]["host"] == host_stage.HOST_PIPELINE
    assert "gpu-module-to-binary" in manifest["pipelines"]["binary"]
    assert set(manifest["seconds"]) >= {"parse", "prepare", "kernels", "host", "llvm-codegen"}
    assert manifest["files"] == numbered
    assert manifest["binaries"][0]["name"] == "kernels"


def test_each_compile_gets_the_next_number(mlir, tmp_path):
    text = mlir("scale_in_place.mlir")
    (tmp_path / "0007-unrelated").mkdir()
    (tmp_path / "notes.txt").write_text("not a dump")
    api.build(text, target="sm_90", dump_dir=tmp_path)
    api.build(text, target="sm_90", dump_dir=tmp_path, format="ptx")
    folders = sorted(p.name for p in tmp_path.iterdir() if p.is_dir())
    assert [f[:4] for f in folders] == ["0007", "0008", "0009"]
    assert folders[1][5:] == folders[2][5:]          # same text, same hash
    ptx = sorted((tmp_path / folders[2]).glob("*-kernels.ptx"))
    assert len(ptx) == 2                              # the kernel PTX and the binary itself


def test_env_variable_dumps(mlir, tmp_path, monkeypatch):
    monkeypatch.setenv(dump.ENV, str(tmp_path / "env"))
    api.build(mlir("scale_in_place.mlir"), target="sm_90")
    assert (only_folder(tmp_path / "env") / "manifest.json").exists()


def test_no_dump_without_dir(mlir, tmp_path, monkeypatch):
    monkeypatch.delenv(dump.ENV, raising=False)
    art = api.build(mlir("scale_in_place.mlir"), target="sm_90")
    assert art.dump_path is None


def test_failed_compile_leaves_incomplete_manifest(mlir, tmp_path):
    bad = "func.func @main(%u: memref<*xf32>) {\n  return\n}\n"   # refused: unranked
    with pytest.raises(api.CompileError):
        api.build(bad, target="sm_90", dump_dir=tmp_path)
    folder = only_folder(tmp_path)
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["complete"] is False
    assert "parse" in manifest["seconds"]
    assert (folder / "00-input.mlir").read_text() == bad


def test_cli_dump_dir(tmp_path):
    here = str(Path(api.__file__).resolve().parent.parent)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (here, os.environ.get("PYTHONPATH")) if p))
    proc = subprocess.run([sys.executable, "-m", "pywave", "compile",
                           str(DATA / "vector_add.mlir"), "--target", "sm_90",
                           "--dump-dir", str(tmp_path)], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    folder = only_folder(tmp_path)
    assert f"dumped into: {folder}" in proc.stdout
    assert json.loads((folder / "manifest.json").read_text())["complete"] is True


def test_compile_with_dump_dir_skips_the_caches(mlir, tmp_path, monkeypatch):
    pytest.importorskip("pywave._native")
    import pywave
    monkeypatch.setenv("PYWAVE_CACHE_DIR", str(tmp_path / "cache"))
    text = mlir("scale_in_place.mlir")
    first = pywave.compile(text, target="sm_90", dump_dir=str(tmp_path / "d"))
    second = pywave.compile(text, target="sm_90", dump_dir=str(tmp_path / "d"))
    try:
        assert len(list((tmp_path / "d").iterdir())) == 2
    finally:
        first.close()
        second.close()
