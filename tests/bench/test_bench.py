"""The benchmark scripts' parts that need no GPU: bench/launch.py's dry run (every module
compiles for sm_90 with the expected kernel parameters), its interleaved rounds, its floor
library against the driver stand-in, its curve table and ratios,
bench/report.py's Markdown and plots from given results, and report.py end to end with
--cpu-only (the compile benchmark only).

And every script and command line the READMEs name under bench/, tools/ and examples/, read
from the READMEs (a rename in either place fails here): each script answers --help; each
command runs as written at its smallest size (:data:`SMALLEST`) and ends with status 0, or
with 77 (skipped) and one line naming what this machine lacks, never a traceback; the C
benchmark builds with the README's cc line and starts. No timing is asserted.
"""

from __future__ import annotations

import importlib
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

BENCH = ROOT / "bench"
#: The README and the documentation pages that hold the command lines (docs/benchmarks.md).
READMES = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
           ROOT / "libwavert" / "examples" / "README.md")

RESULTS = {
    "date": "2026-01-01", "pywave": "0.1.0", "python": "3.11", "cpus": 16, "gpu": "H200",
    "launch": {"pywave add (torch)": {"min": 4.0, "median": 4.3},
               "raw cuLaunchKernel (C)": {"min": 3.2, "median": 3.2},
               "pywave add (cupy)": {"min": 4.5, "median": 4.6},
               "cupy RawKernel": {"min": 5.0, "median": 5.5}},
    "arg_curve": {"1": {"C floor n": 3.0, "C floor 5n": 3.0, "pywave (torch)": 3.6},
                  "64": {"C floor n": 3.2, "C floor 5n": 4.0, "torch exchange": 2.5,
                         "cupy RawKernel": 12.0,
                         "pywave (torch)": 9.0, "pywave (cupy)": 15.0}},
    "bandwidth": {"torch.add(out=)": 3000.0, "pywave vector_add.mlir": 2700.0},
    "peer_compile": {"pywave": {"cold": 0.7, "warm": 0.1}},
    "compile": {"target": "sm_90",
                "runs": {"python -c pass": {"min": 0.01, "median": 0.01},
                         "cold cache, no compile server": {"min": 0.9, "median": 1.2},
                         "cold cache": {"min": 0.4, "median": 0.5},
                         "warm cache (disk hit)": {"min": 0.05, "median": 0.06}}},
}


@pytest.fixture
def bench(monkeypatch):
    """bench/ importable: bench("launch") -> bench/launch.py as a module."""
    monkeypatch.syspath_prepend(str(BENCH))
    return importlib.import_module


def test_launch_dry_run(tmp_path):
    done = subprocess.run([sys.executable, str(BENCH / "launch.py"), "--dry-run",
                           "--arg-counts", "1,4,64"], capture_output=True, text=True,
                          cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr
    for n in (1, 4, 64):
        assert f"args{n}: {n} kernel parameters" in done.stderr
    assert "launch floor library: " in done.stderr
    assert "exchange floor library: built" in done.stderr


def test_measure_interleaved_rotates_rounds(bench):
    launch = bench("launch")
    order: list[tuple[str, int]] = []
    seconds = {"a": iter([9.0, 0.004, 0.002, 0.003]), "b": iter([9.0, 0.001, 0.005, 0.003])}

    def loop(name):
        def run(calls):
            order.append((name, calls))
            return next(seconds[name])
        return run

    syncs = []
    rows = launch.measure_interleaved({"a": loop("a"), "b": loop("b")},
                                      lambda: syncs.append(1), 1000, 3)
    # warm-up (min(calls, 1000) each), then rounds a,b / b,a / a,b
    assert order == [("a", 1000), ("b", 1000), ("a", 1000), ("b", 1000), ("b", 1000),
                     ("a", 1000), ("a", 1000), ("b", 1000)]
    assert rows["a"] == pytest.approx((2.0, 3.0)) and rows["b"] == pytest.approx((1.0, 3.0))
    assert len(syncs) == 1 + 2 * 6   # after the warm-up, around every timed loop


def test_floor_library_on_driver_stand_in(bench, monkeypatch):
    """The floor's C loop against libwavert's recording driver stand-in: the context it makes
    current, the kernels' module loads, and exactly `calls` launches on the given stream."""
    import ctypes
    from conftest import need_fake_driver
    fake = need_fake_driver()
    launch = bench("launch")
    driver = ctypes.CDLL(str(fake))
    driver.fake_cuda_current_context.restype = ctypes.c_void_p
    driver.fake_cuda_primary_context.restype = ctypes.c_void_p
    driver.fake_cuda_launch_count.restype = ctypes.c_int
    before = driver.fake_cuda_current_context()
    driver.cuCtxSetCurrent(None)   # none current: the floor makes ordinal 1's primary current
    try:
        floor = launch.Floor(str(fake), ordinal=1)
        assert driver.fake_cuda_current_context() == driver.fake_cuda_primary_context(1)
        check_floor_loop(floor, driver)
    finally:
        driver.cuCtxSetCurrent(ctypes.c_void_p(before))


def check_floor_loop(floor, driver) -> None:
    loop = floor.loop(3, stream=0x5100)
    assert floor.kernel(3) is floor.kernel(3)   # loaded once
    driver.fake_cuda_reset()
    assert loop(250) >= 0.0
    assert driver.fake_cuda_calls(b"cuLaunchKernel") == 250
    assert driver.fake_cuda_calls(b"cuModuleLoadDataEx") == 0
    with pytest.raises(RuntimeError, match="params must be in 0..512"):
        floor.kernel(513)
    driver.fake_cuda_fail_next(b"cuLaunchKernel", 1)
    with pytest.raises(RuntimeError, match=r"cuLaunchKernel \(result 1\)"):
        loop(10)


def test_exchange_floor_on_the_exchange_stand_in(bench, tmp_path):
    """The exchange floor's C loop converts every tensor of the tuple through its type's
    exchange API; a conversion that fails, mixed types and a type without the API raise."""
    launch = bench("launch")
    standin = bench("launch_instructions").build_standin(tmp_path)
    tensors, _fakes = bench("launch_instructions").standin_tensors(str(standin), 3)
    floor = launch.ExchangeFloor()
    assert floor.loop(tuple(tensors))(500) >= 0.0
    tensors[2].dl = 0
    with pytest.raises(ValueError, match="dl is 0"):
        floor.loop(tuple(tensors))(5)
    with pytest.raises(TypeError, match="tensors of one type only"):
        floor.loop((tensors[0], 1.0))(5)
    with pytest.raises(AttributeError, match="__dlpack_c_exchange_api__"):
        floor.loop((1.0,))(5)


@pytest.mark.parametrize("case", ["empty", "streams", "exchange3"])
def test_instruction_count_worker_on_the_stand_in(case, tmp_path, bench):
    """bench/launch_instructions.py's measured program (without valgrind): each call of the
    case launches once on the driver stand-in, through the exchange-API stand-in for tensors."""
    from conftest import fake_driver_env
    env = fake_driver_env()
    pytest.importorskip("pywave._native")
    standin = bench("launch_instructions").build_standin(tmp_path)
    done = subprocess.run([sys.executable, str(BENCH / "launch_instructions.py"), "--worker",
                           case, "7", str(standin)], capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("launches: 7"), done.stdout


def test_launch_rejects_bad_counts(tmp_path):
    done = subprocess.run([sys.executable, str(BENCH / "launch.py"), "--arg-counts", "0,4"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert done.returncode == 2 and "each count must be in 1..100" in done.stderr


def test_args_module_and_rawkernel_source(bench):
    launch = bench("launch")
    text = launch.args_module((3,))
    assert "gpu.func @args3(%a0: memref<?xf32>, %a1: memref<?xf32>, %a2: memref<?xf32>)" in text
    assert "memref.store %s3, %a0[%c0]" in text
    assert launch.cupy_args_source(2) == ('extern "C" __global__ void args2(float* a0, '
                                          'float* a1) { a0[0] = 1.0f + a0[0] + a1[0]; }')


def test_curve_table_and_ratios(bench):
    launch = bench("launch")
    curve = {int(n): row for n, row in RESULTS["arg_curve"].items()}
    assert launch.curve_ratios(curve[64]) == pytest.approx(
        {"torch / floor n": 9.0 / 3.2, "torch / floor 5n": 9.0 / 4.0,
         "torch / floor+exchange": 9.0 / 5.7,
         "torch / RawKernel": 0.75, "cupy / RawKernel": 1.25, "RawKernel / floor n": 12.0 / 3.2})
    assert launch.curve_ratios(curve[1]) == pytest.approx({"torch / floor n": 1.2,
                                                           "torch / floor 5n": 1.2})
    lines = launch.curve_table(curve)
    assert len(lines) == 3 and lines[1].split()[0] == "1" and lines[2].split()[0] == "64"
    assert lines[1].split()[5] == "3.600" and lines[2].split()[7] == "2.81"
    assert lines[2].split()[3] == "2.500" and lines[2].split()[8:10] == ["2.25", "1.58"]
    rows = {k: (v["min"], v["median"]) for k, v in RESULTS["launch"].items()}
    ratios = {label: (value, target) for label, value, target in launch.peer_ratios(rows)}
    assert ratios["pywave(torch) / C floor"] == (pytest.approx(1.25), "<= 1.15")
    assert ratios["pywave(cupy) / cupy RawKernel"] == (pytest.approx(0.9), "<= 0.90")
    assert "pywave empty / C floor (0 params)" not in ratios   # its rows are missing


def test_report_markdown(bench):
    report = bench("report")
    results = dict(RESULTS)
    launch = bench("launch")
    rows = {k: (v["min"], v["median"]) for k, v in results["launch"].items()}
    results["launch_ratios"] = [{"ratio": a, "value": b, "target": c}
                                for a, b, c in launch.peer_ratios(rows)]
    text = report.markdown(results, [], "Plots skipped: matplotlib is not installed.")
    assert text.startswith("# pywave benchmarks, 2026-01-01\n")
    assert "| pywave(torch) / C floor | 1.25 | <= 1.15 |" in text
    assert ("| 64 | 3.200 | 4.000 | 2.500 | 12.000 | 9.000 | 15.000 | 2.81 | 2.25 | 1.58 | 0.75 "
            "| 1.25 | 3.75 |") in text
    assert "| pywave vector_add.mlir | 2700.0 | 0.900 |" in text
    assert "| pywave | 0.700 | 0.100 |" in text
    assert "Warm / cold cache, no compile server: 5.0% (median; target <= 15%)." in text
    assert "Warm / cold cache: 12.0% (median; target <= 15%)." in text
    assert "python -c pass / cold cache: 2.0% (median)." in text
    assert text.rstrip().endswith("Plots skipped: matplotlib is not installed.")


def test_report_plots(bench, tmp_path):
    pytest.importorskip("matplotlib")
    report = bench("report")
    written, note = report.plot(RESULTS, str(tmp_path))
    assert note == ""
    assert written == ["launch.png", "arg_curve.png", "bandwidth.png", "compile.png"]
    for name in written:
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_peer_script_times_only_its_part(bench, tmp_path):
    """The fresh-process script runs the set-up untimed, then the part, from a file named so
    that it shadows no package, and prints the part's seconds; a part that fails is an
    error, not a number."""
    report = bench("report")
    script = tmp_path / "peer_demo.py"
    script.write_text(report._peer_script("import time\ntime.sleep(0.3)\n",
                                          "assert {path!r} == '/p'\n", "/p"))
    seconds = report._timed(str(script), dict(os.environ), str(tmp_path))
    assert 0 <= seconds < 0.25
    script.write_text(report._peer_script("", "raise SystemExit(3)\n", "/p"))
    with pytest.raises(subprocess.CalledProcessError):
        report._timed(str(script), {}, str(tmp_path))


def test_report_without_gpu(tmp_path):
    pytest.importorskip("pywave._native")
    out = tmp_path / "report"
    done = subprocess.run([sys.executable, str(BENCH / "report.py"), str(out), "--quick",
                           "--cpu-only"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr
    text = (out / "report.md").read_text()
    assert "## Fresh process: pywave compile for sm_90, no GPU (ms)" in text
    assert "| warm cache (disk hit) |" in text and "Warm / cold cache:" in text
    assert "| cold cache, no compile server |" in text
    assert (out / "results.json").exists()


def test_pinned_pins_and_restores(bench):
    import os
    launch = bench("launch")
    before = os.sched_getaffinity(0)
    with launch.pinned(True):
        assert os.sched_getaffinity(0) == {max(before)}
    assert os.sched_getaffinity(0) == before
    with launch.pinned(False):
        assert os.sched_getaffinity(0) == before
    with pytest.raises(SystemExit, match="--cpu 100000: not among"):
        launch.pin_cpu(100000)


def test_peer_ratios_of_medians(bench):
    launch = bench("launch")
    rows = {k: (v["min"], v["median"]) for k, v in RESULTS["launch"].items()}
    medians = {label: value for label, value, _ in launch.peer_ratios(rows, 1)}
    assert medians["pywave(torch) / C floor"] == pytest.approx(4.3 / 3.2)


# ------------------------------------------------------------------------------------------
# Every script and command the READMEs name
# ------------------------------------------------------------------------------------------
#: A script path under bench/, tools/ or examples/ anywhere in a README (not a folder of
#: that name elsewhere: tests/bench/test_bench.py is this file).
_SCRIPT = re.compile(r"(?<![\w/])((?:bench|tools|examples)/[\w-]+\.py)\b")
#: A command line of a README code block (4-space indent) that runs such a script.
_COMMAND = re.compile(r"python3 ((?:bench|tools|examples)/[\w-]+\.py)([^#&`]*)")

#: Per script the READMEs run: the arguments appended to the README's command for its
#: smallest size (argparse keeps the last value of an option given twice), or, for
#: positional placeholders, what replaces them ({tmp}: a fresh folder).
SMALLEST = {
    "bench/report.py": ["--quick"],
    "bench/launch.py": ["--calls", "1", "--reps", "1", "--arg-counts", "1", "--no-pin"],
    "bench/compile_many.py": ["--modules", "1", "--workers", "1"],
    "bench/bandwidth.py": ["--log2n", "10", "--reps", "1"],
    "bench/compile.py": ["--runs", "1", "--reps", "1", "--hits", "1"],
    "bench/isolation.py": ["--runs", "1", "--modules", "0"],
    "bench/launch_instructions.py": ["--cases", "empty"],
    "examples/vector_add.py": [],
}
#: README placeholders and what a test run puts there.
PLACEHOLDERS = {"OUT_DIR": "{tmp}/report"}


def readme_lines() -> list[str]:
    return [line for readme in READMES for line in readme.read_text().splitlines()]


def named_scripts() -> list[str]:
    return sorted({m.group(1) for line in readme_lines() for m in _SCRIPT.finditer(line)})


def readme_commands() -> list[tuple[str, list[str]]]:
    """(script, arguments) of every README code line that runs a script, in order."""
    out = []
    for line in readme_lines():
        if not line.startswith("    "):
            continue
        for m in _COMMAND.finditer(line):
            out.append((m.group(1), shlex.split(m.group(2))))
    return out


def c_commands() -> list[str]:
    """README code lines that build a C program of bench/ with cc."""
    return [line.strip().split("   #")[0] for line in readme_lines()
            if line.startswith("    cc ") and " bench/" in line]


def check_skip_or_pass(done: subprocess.CompletedProcess, what: str) -> None:
    """Status 0, or 77 with one line on stderr that names the program and says nothing was
    measured; never a Python traceback."""
    assert "Traceback" not in done.stderr, f"{what}:\n{done.stderr}"
    assert done.returncode in (0, 77), f"{what}: status {done.returncode}\n{done.stderr}"
    if done.returncode == 77:
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1, f"{what}: expected one line, got\n{done.stderr}"
        assert lines[0].startswith(what.split()[0]) and \
            lines[0].endswith("nothing measured"), lines[0]


def test_readmes_name_scripts_that_exist_and_each_command_has_a_smallest_size():
    scripts = named_scripts()
    assert "bench/launch.py" in scripts and "examples/vector_add.py" in scripts
    missing = [s for s in scripts if not (ROOT / s).is_file()]
    assert not missing, f"the README names scripts that do not exist: {missing}"
    commands = {script for script, _ in readme_commands()}
    assert commands == set(SMALLEST), \
        f"README commands {sorted(commands)} against SMALLEST {sorted(SMALLEST)}"
    assert len(c_commands()) == 1 and "bench/launch_c.c" in c_commands()[0]


def _env() -> dict[str, str]:
    """The environment of a README command: this interpreter's bin/ first on PATH (its
    ``python3`` and ``pywave`` commands)."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


@pytest.mark.parametrize("script", named_scripts())
def test_every_named_script_answers_help(script):
    done = subprocess.run([sys.executable, script, "--help"], capture_output=True, text=True,
                          cwd=ROOT, env=_env(), timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: ") and "Traceback" not in done.stderr


@pytest.mark.parametrize("script, args", readme_commands(),
                         ids=[" ".join([s] + a) for s, a in readme_commands()])
def test_every_readme_command_runs_at_its_smallest_size(script, args, tmp_path):
    fill = {k: v.format(tmp=tmp_path) for k, v in PLACEHOLDERS.items()}
    argv = [fill.get(a, a) for a in args] + SMALLEST[script]
    assert not [a for a in argv if re.fullmatch(r"[A-Z_]+|\[.*\]|<.*>", a)], \
        f"unfilled README placeholder in {argv}"
    done = subprocess.run([sys.executable, script, *argv], capture_output=True, text=True,
                          cwd=ROOT, env=_env(), timeout=600)
    check_skip_or_pass(done, script)


def test_c_benchmark_builds_as_the_readme_says_and_starts(tmp_path):
    """The README's cc line, as written (``$(pywave config ...)`` from this environment),
    builds bench/launch_c.c; the program starts without LD_LIBRARY_PATH and answers --help,
    and a run of one launch ends with 0, or 77 and one line without a GPU."""
    if shutil.which("cc") is None:
        pytest.skip("no C compiler (cc)")
    if shutil.which("pywave", path=_env()["PATH"]) is None:
        pytest.skip("no pywave command next to this interpreter")
    (line,) = c_commands()
    build, run = line.split(" && ")
    binary = str(tmp_path / "launch_c")
    assert "/tmp/launch_c" in build and run.startswith("/tmp/launch_c ")
    env = _env()
    env.pop("LD_LIBRARY_PATH", None)
    built = subprocess.run(["bash", "-c", build.replace("/tmp/launch_c", binary)],
                           capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    assert built.returncode == 0, built.stderr
    helped = subprocess.run([binary, "--help"], capture_output=True, text=True, env=env,
                            timeout=60)
    assert helped.returncode == 0 and helped.stdout.startswith("usage: launch_c "), \
        helped.stderr
    assert run.split()[1:] == ["[launches]", "[params]"]
    done = subprocess.run([binary, "1", "0"], capture_output=True, text=True, env=env,
                          timeout=120)
    check_skip_or_pass(done, "bench/launch_c.c")
