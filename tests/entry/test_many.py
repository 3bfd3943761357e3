"""pywave.compile_many and ``python -m pywave precompile``: parallel compile into the cache,
input order kept, hits start no worker, a failed input reported by index and name while the
others compile. No GPU needed (kernels compiled for sm_90, PTX)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import pywave
from pywave import isolation
from pywave.entry import many
from conftest import TESTS

DATA = TESTS / "data"
VECTOR_ADD = (DATA / "vector_add.mlir").read_text(encoding="utf-8")
OPTIONS = {"target": "sm_90", "format": "ptx"}


def variant(tag: str) -> str:
    """The vector add with host function @main_<tag> and kernel @add_<tag>: distinct text."""
    return VECTOR_ADD.replace("@main", f"@main_{tag}").replace("@add", f"@add_{tag}")


@pytest.fixture
def cache_dir(monkeypatch, tmp_path) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("PYWAVE_CACHE_DIR", str(root))
    monkeypatch.delenv("PYWAVE_ISOLATE", raising=False)
    return root


@pytest.fixture
def pool_calls(monkeypatch):
    """Every request to the worker pool: (pipeline function names, workers=), and the most
    requests in flight at once."""
    calls, state = [], {"now": 0, "most": 0}
    lock = threading.Lock()
    real = isolation.POOL.run

    def run(kind, compiler, limit, workers=None):
        with lock:
            calls.append(workers)
            state["now"] += 1
            state["most"] = max(state["most"], state["now"])
        try:
            return real(kind, compiler, limit, workers=workers)
        finally:
            with lock:
                state["now"] -= 1
    monkeypatch.setattr(isolation.POOL, "run", run)
    return calls, state


def entries(root: Path) -> list[Path]:
    return sorted(root.glob("*.pwc"))


def test_order_preserved_and_cache_filled_then_all_hits(cache_dir, pool_calls):
    calls, state = pool_calls
    tags = ["c", "a", "d", "b"]
    mods = pywave.compile_many([variant(t) for t in tags], jobs=3, **OPTIONS)
    assert [m.functions for m in mods] == [[f"main_{t}"] for t in tags]
    assert all(isinstance(m, pywave.CompiledModule) for m in mods)
    assert calls == [3, 3, 3, 3] and 1 <= state["most"] <= 3
    assert len(entries(cache_dir)) == 4
    assert isolation.POOL.started() <= isolation.options.DEFAULT_WORKERS   # trimmed afterwards
    # the same modules again: in-memory hits return the same objects, no worker
    again = pywave.compile_many([variant(t) for t in tags], jobs=3, **OPTIONS)
    assert all(x is y for x, y in zip(again, mods)) and len(calls) == 4
    # and pywave.compile agrees on the key: a hit too
    assert pywave.compile(variant("d"), **OPTIONS) is mods[2] and len(calls) == 4


def test_load_false_returns_keys_and_a_second_call_is_all_disk_hits(cache_dir, pool_calls,
                                                                    monkeypatch):
    calls, _ = pool_calls
    texts = [variant(f"k{i}") for i in range(3)]
    keys = pywave.compile_many(texts, jobs=2, load=False, **OPTIONS)
    assert [p.stem for p in entries(cache_dir)] == sorted(keys) and len(set(keys)) == 3
    assert len(calls) == 3

    def refuse(*a, **k):
        raise AssertionError("a cache hit must start no worker")
    monkeypatch.setattr(isolation.POOL, "run", refuse)
    assert pywave.compile_many(texts, jobs=2, load=False, **OPTIONS) == keys
    outcomes = many.run(texts, jobs=2, load=False, **OPTIONS)
    assert [o.status for o in outcomes] == ["cached"] * 3
    mods = pywave.compile_many(texts, jobs=2, **OPTIONS)     # loaded from the disk entries
    assert [m.functions for m in mods] == [[f"main_k{i}"] for i in range(3)]


def test_one_bad_input_is_reported_with_its_index_while_the_others_compile(cache_dir,
                                                                           tmp_path):
    missing = tmp_path / "nowhere.mlir"
    texts = [variant("g0"), "this is not MLIR", variant("g2"), missing]
    with pytest.raises(pywave.CompileManyError) as info:
        pywave.compile_many(texts, jobs=2, **OPTIONS)
    err = info.value
    assert isinstance(err, pywave.CompileError)
    assert [(i, name) for i, name, _ in err.failures] == [(1, "<input 1>"), (3, str(missing))]
    assert all(isinstance(e, pywave.CompileError) for _, _, e in err.failures)
    assert "2 of 4 inputs failed" in str(err)
    assert "[1] <input 1>: CompileError: cannot parse" in str(err)
    assert f"[3] {missing}: CompileError: cannot read" in str(err)
    assert err.results[1] is None and err.results[3] is None
    assert err.results[0].functions == ["main_g0"] and err.results[2].functions == ["main_g2"]
    assert len(entries(cache_dir)) == 2


def test_in_process_mode_compiles_serially_without_the_pool(cache_dir, monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("isolate=False must not use the pool")
    monkeypatch.setattr(isolation.POOL, "run", refuse)
    keys = pywave.compile_many([variant("p0"), variant("p1")], jobs=4, load=False,
                               isolate=False, **OPTIONS)
    assert len(set(keys)) == 2 and len(entries(cache_dir)) == 2


@pytest.mark.parametrize("kwargs, exc, match", [
    ({"jobs": 0}, pywave.ArgumentError, "jobs must be >= 1, got 0"),
    ({"jobs": True}, TypeError, "jobs must be an int"),
    ({"jobs": 2.0}, TypeError, "jobs must be an int"),
    ({"load": False, "disk_cache": False}, pywave.ArgumentError, "disk_cache=True"),
    ({"timeout": -1}, pywave.Error, "timeout"),
])
def test_arguments_checked_before_any_compile(cache_dir, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        pywave.compile_many([variant("x")], **OPTIONS, **kwargs)
    assert not entries(cache_dir)


def test_load_false_needs_a_usable_cache(monkeypatch):
    monkeypatch.setenv("PYWAVE_CACHE", "0")
    with pytest.raises(pywave.ArgumentError, match="cache is off"):
        pywave.compile_many([variant("off")], load=False, **OPTIONS)


def precompile(*args: str, cache: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYWAVE_CACHE_DIR=str(cache))
    env.pop("PYWAVE_ISOLATE", None)
    return subprocess.run([sys.executable, "-m", "pywave", "precompile", *args,
                           "--target", "sm_90", "--format", "ptx"],
                          capture_output=True, text=True, timeout=300, cwd="/", env=env)


def test_cli_lines_and_exit_status(tmp_path):
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "a.mlir").write_text(variant("cli_a"), encoding="utf-8")
    (src / "sub" / "b.mlir").write_text(variant("cli_b"), encoding="utf-8")
    (src / "notes.txt").write_text("not an input", encoding="utf-8")
    bad = tmp_path / "bad.mlir"
    bad.write_text("func.func @f( {", encoding="utf-8")
    cache = tmp_path / "cache"

    proc = precompile(str(src), str(bad), "-j", "2", cache=cache)
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith(f"ok        {src / 'a.mlir'} (")
    assert lines[1].startswith(f"ok        {src / 'sub' / 'b.mlir'} (")
    assert lines[2].startswith(f"error     {bad}: CompileError: ")
    assert lines[-1].startswith("precompile: 3 inputs: 2 compiled, 0 cached, 1 failed in ")
    assert len(entries(cache)) == 2

    proc = precompile(str(src), "-j", "2", cache=cache)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        f"cached    {src / 'a.mlir'}", f"cached    {src / 'sub' / 'b.mlir'}",
        proc.stdout.splitlines()[-1]]
    assert "2 inputs: 0 compiled, 2 cached, 0 failed" in proc.stdout


def test_cli_refuses_missing_paths_and_empty_folders(tmp_path):
    proc = precompile(str(tmp_path / "absent"), cache=tmp_path / "cache")
    assert proc.returncode == 1 and "neither a file nor a folder" in proc.stderr
    (tmp_path / "empty").mkdir()
    proc = precompile(str(tmp_path / "empty"), cache=tmp_path / "cache")
    assert proc.returncode == 1 and "no .mlir files" in proc.stderr
