"""One report of pywave's benchmarks: a Markdown table per benchmark plus PNG plots.

    python3 bench/report.py OUT_DIR [--quick] [--cpu-only] [--target sm_90]

Runs what this machine can run and writes OUT_DIR/report.md, OUT_DIR/results.json and, when
matplotlib is installed, OUT_DIR/*.png (otherwise the report says the plots were skipped):

- with torch and an NVIDIA GPU: launch overhead against the peers (bench/launch.py), the
  argument-count curve, bandwidth against torch.add (bench/bandwidth.py), and the fresh-process
  compile + first launch of the vector add with a cold and a warm cache for pywave, Triton and
  CuPy RawKernel (seconds from importing the launcher to the end of the first launch,
  timed inside a fresh process that has imported torch or CuPy and made a tensor);
- always: pywave's fresh-process compile with a cold and a warm cache for --target, no GPU
  needed (bench/compile.py).

--quick runs fewer calls and processes (a smoke run; the numbers are noisier); --cpu-only
skips the GPU benchmarks on a machine that has a GPU.
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import compile as compile_bench  # noqa: E402  (bench/compile.py)
import launch as launch_bench    # noqa: E402  (bench/launch.py)

import pywave  # noqa: E402

LOG = logging.getLogger("bench.report")
VECTOR_ADD = os.path.abspath(os.path.join(HERE, "..", "examples", "vector_add.mlir"))


def gpu_torch():
    """torch when it sees a CUDA GPU, else None."""
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


# ---- fresh-process compile + first launch against peers (GPU) -------------------------------

#: Per launcher: (cache variable, set-up, measured part). A fresh process runs the set-up (the
#: framework imported, a tensor made: the CUDA context exists), then the measured part, which
#: imports the launcher, compiles the vector add and launches it once on 1024 elements, and
#: prints that part's seconds. Timing inside the process keeps the framework's own import (about
#: 3.5 s for torch, varying by tenths of a second) out of the number.
_TORCH_SETUP = """
        import torch
        a = torch.ones(1024, device='cuda'); c = torch.empty_like(a); torch.cuda.synchronize()
        """

PEER_SCRIPTS = {
    "pywave": ("PYWAVE_CACHE_DIR", _TORCH_SETUP, """
        import pywave
        mod = pywave.compile(open({path!r}).read())
        mod(a, a, c); torch.cuda.synchronize(); assert c[0].item() == 2
        """),
    "triton": ("TRITON_CACHE_DIR", _TORCH_SETUP, """
        import triton, triton.language as tl
        @triton.jit
        def add(x, y, z, n, BLOCK: tl.constexpr):
            i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            m = i < n
            tl.store(z + i, tl.load(x + i, mask=m) + tl.load(y + i, mask=m), mask=m)
        add[(4,)](a, a, c, 1024, BLOCK=256); torch.cuda.synchronize(); assert c[0].item() == 2
        """),
    "cupy RawKernel": ("CUPY_CACHE_DIR", """
        import cupy
        a = cupy.ones(1024, dtype=cupy.float32); c = cupy.empty_like(a)
        cupy.cuda.Device().synchronize()
        """, """
        k = cupy.RawKernel(r'''extern "C" __global__ void add(const float* a, const float* b,
            float* c, int n) {{ int i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n) c[i] = a[i] + b[i]; }}''', 'add')
        k((4,), (256,), (a, a, c, cupy.int32(1024))); cupy.cuda.Device().synchronize()
        assert float(c[0]) == 2
        """),
}


def _peer_script(setup: str, body: str, path: str) -> str:
    """The fresh process's program: set-up, then the timed part, printing its seconds."""
    return (textwrap.dedent(setup) + "import time as _time\n_start = _time.perf_counter()\n"
            + textwrap.dedent(body).format(path=path)
            + "print(_time.perf_counter() - _start)\n")


def _timed(script: str, env: dict[str, str], cwd: str) -> float:
    """Seconds printed by ``script`` (a file: Triton reads its kernels' source)."""
    done = subprocess.run([sys.executable, script], env=env, cwd=cwd, check=True,
                          capture_output=True, text=True)
    return float(done.stdout.split()[-1])


def peer_compile(runs: int) -> dict[str, dict[str, float]]:
    """{launcher: {"cold": s, "warm": s}}: median over ``runs`` fresh processes of the seconds
    from importing the launcher to the end of the first launch of the vector add, with an
    empty cache and with a filled one; launchers whose script fails are left out (logged)."""
    out: dict[str, dict[str, float]] = {}
    root = tempfile.mkdtemp(prefix="pywave-report-")
    try:
        for name, (variable, setup, body) in PEER_SCRIPTS.items():
            script = os.path.join(root, "peer_" + name.replace(" ", "_") + ".py")  # not the package's name
            with open(script, "w", encoding="utf-8") as fh:
                fh.write(_peer_script(setup, body, VECTOR_ADD))
            env = {k: v for k, v in os.environ.items() if k != variable}
            warm_dir = os.path.join(root, name.replace(" ", "_") + "-warm")
            try:
                _timed(script, dict(env, **{variable: warm_dir}), root)   # fills the warm cache
            except subprocess.CalledProcessError as exc:
                LOG.warning("%s: the compile-and-launch script failed: %s", name,
                            (exc.stderr or "").strip().splitlines()[-1:])
                continue
            cold, warm = [], []
            for i in range(runs):   # interleaved, so that drifting noise hits both alike
                cold_dir = os.path.join(root, f"{name.replace(' ', '_')}-cold{i}")
                cold.append(_timed(script, dict(env, **{variable: cold_dir}), root))
                warm.append(_timed(script, dict(env, **{variable: warm_dir}), root))
            out[name] = {"cold": statistics.median(cold), "warm": statistics.median(warm)}
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return out


# ---- collection -------------------------------------------------------------------------------

def collect(quick: bool, target: str, cpu_only: bool = False) -> dict:
    """Every benchmark this machine can run (no GPU one with ``cpu_only``), as plain data
    (results.json)."""
    calls, reps, runs = (2000, 3, 3) if quick else (20000, 7, 7)
    torch = None if cpu_only else gpu_torch()
    results: dict = {
        "date": datetime.date.today().isoformat(),
        "pywave": pywave.__version__,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "gpu": torch.cuda.get_device_name(0) if torch else None,
    }
    if torch is not None:
        import bandwidth
        LOG.info("launch overhead against peers ...")
        rows = launch_bench.peer_rows(calls, reps)
        results["launch"] = {k: {"min": lo, "median": med} for k, (lo, med) in rows.items()}
        results["launch_ratios"] = [{"ratio": label, "value": value, "target": tgt}
                                    for label, value, tgt in launch_bench.peer_ratios(rows)]
        LOG.info("argument-count curve ...")
        curve = launch_bench.arg_curve(calls, reps)
        results["arg_curve"] = {str(n): row for n, row in curve.items()}
        LOG.info("bandwidth ...")
        results["bandwidth"] = bandwidth.measure_bandwidth(26 if quick else 28, 5 if quick else 20)
        LOG.info("fresh-process compile and first launch against peers ...")
        results["peer_compile"] = peer_compile(runs)
    else:
        LOG.info("%s: launch, argument-count, bandwidth and peer compile benchmarks skipped",
                 "--cpu-only" if cpu_only else "no GPU (or no torch)")
    LOG.info("fresh-process compile for %s (no GPU needed) ...", target)
    walls = compile_bench.fresh_process(VECTOR_ADD, target, runs)
    results["compile"] = {"target": target,
                          "runs": {k: {"min": lo, "median": med} for k, (lo, med) in walls.items()}}
    return results


# ---- Markdown -------------------------------------------------------------------------------

def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return (["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
            + ["| " + " | ".join(r) + " |" for r in rows] + [""])


def markdown(results: dict, plots: list[str], plot_note: str) -> str:
    """The report's text."""
    lines = [f"# pywave benchmarks, {results['date']}", "",
             f"pywave {results['pywave']}, Python {results['python']}, {results['cpus']} CPUs, "
             f"GPU: {results['gpu'] or 'none'}.", ""]
    if "launch" in results:
        lines += ["## Launch overhead (µs per call)", ""]
        lines += _table(["launcher", "min", "median"],
                        [[k, f"{v['min']:.3f}", f"{v['median']:.3f}"]
                         for k, v in results["launch"].items()])
        lines += _table(["ratio", "value", "target"],
                        [[r["ratio"], f"{r['value']:.2f}", r["target"] or "-"]
                         for r in results["launch_ratios"]])
    if "arg_curve" in results:
        lines += ["## Argument-count curve (min µs per call)", ""]
        columns = launch_bench.CURVE_COLUMNS
        ratio_names = tuple(launch_bench.CURVE_RATIOS)
        rows = []
        for n, row in results["arg_curve"].items():
            ratios = launch_bench.curve_ratios(row)
            rows.append([n] + [f"{row[c]:.3f}" if c in row else "-" for c in columns]
                        + [f"{ratios[r]:.2f}" if r in ratios else "-" for r in ratio_names])
        lines += _table(["tensors", *columns, *ratio_names], rows)
    if "bandwidth" in results:
        bw = results["bandwidth"]
        ref = bw["torch.add(out=)"]
        lines += ["## Bandwidth, vector add (GB/s)", ""]
        lines += _table(["kernel", "GB/s", "ratio to torch"],
                        [[k, f"{v:.1f}", f"{v / ref:.3f}"] for k, v in bw.items()])
    if "peer_compile" in results:
        lines += ["## Fresh process: import, compile and first launch of the vector add "
                  "(s, timed in a process where the framework is imported and a tensor made; "
                  "median)", ""]
        lines += _table(["launcher", "cold cache", "warm cache"],
                        [[k, f"{v['cold']:.3f}", f"{v['warm']:.3f}"]
                         for k, v in results["peer_compile"].items()])
    comp = results["compile"]
    runs = comp["runs"]
    lines += [f"## Fresh process: pywave compile for {comp['target']}, no GPU (ms)", ""]
    lines += _table(["process", "min", "median"],
                    [[k, f"{1e3 * v['min']:.1f}", f"{1e3 * v['median']:.1f}"]
                     for k, v in runs.items()])
    walls = {k: (v["min"], v["median"]) for k, v in runs.items()}
    lines += [f"Warm / {cold}: {100 * med:.1f}% (median; target <= 15%)."
              for cold, (_, med) in compile_bench.warm_ratios(walls).items()]
    floor = runs["python -c pass"]["median"] / runs["cold cache"]["median"]
    lines += [f"python -c pass / cold cache: {100 * floor:.1f}% (median).", ""]
    lines += ["## Plots", ""]
    lines += [f"![{p}]({p})" for p in plots] if plots else [plot_note]
    return "\n".join(lines) + "\n"


# ---- plots ----------------------------------------------------------------------------------

def plot(results: dict, out_dir: str) -> tuple[list[str], str]:
    """PNG files written into ``out_dir`` (names), and a note when none could be."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return [], "Plots skipped: matplotlib is not installed (pip install matplotlib)."
    written = []

    def bars(name: str, title: str, unit: str, data: dict[str, float]) -> None:
        fig, ax = plt.subplots(figsize=(8, 0.45 * len(data) + 1.5))
        ax.barh(list(data), list(data.values()))
        ax.set_xlabel(unit)
        ax.set_title(title)
        ax.invert_yaxis()
        fig.tight_layout()
        fig.savefig(os.path.join(out_dir, name), dpi=120)
        plt.close(fig)
        written.append(name)

    if "launch" in results:
        bars("launch.png", "Launch overhead (min)", "µs per call",
             {k: v["min"] for k, v in results["launch"].items()})
    if "arg_curve" in results:
        fig, ax = plt.subplots(figsize=(8, 5))
        counts = [int(n) for n in results["arg_curve"]]
        for column in launch_bench.CURVE_COLUMNS:
            points = [(int(n), row[column]) for n, row in results["arg_curve"].items()
                      if column in row]
            if points:
                ax.plot(*zip(*points), marker="o", label=column)
        ax.set_xscale("log", base=2)
        ax.set_xticks(counts, [str(n) for n in counts])
        ax.set_xlabel("tensor arguments")
        ax.set_ylabel("µs per call (min)")
        ax.set_title("Argument-count curve")
        ax.legend()
        fig.tight_layout()
        fig.savefig(os.path.join(out_dir, "arg_curve.png"), dpi=120)
        plt.close(fig)
        written.append("arg_curve.png")
    if "bandwidth" in results:
        bars("bandwidth.png", "Vector add bandwidth", "GB/s", results["bandwidth"])
    compile_bars = {f"pywave {k} ({results['compile']['target']}, no GPU)": v["median"]
                    for k, v in results["compile"]["runs"].items()}
    for name, v in results.get("peer_compile", {}).items():
        compile_bars[f"{name} cold (+launch)"] = v["cold"]
        compile_bars[f"{name} warm (+launch)"] = v["warm"]
    bars("compile.png", "Fresh process: compile (cold / warm cache)", "seconds", compile_bars)
    return written, ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", help="folder for report.md, results.json and the plots")
    parser.add_argument("--quick", action="store_true", help="fewer calls and processes")
    parser.add_argument("--cpu-only", action="store_true", help="skip the GPU benchmarks")
    parser.add_argument("--target", default="sm_90", help="chip of the no-GPU compile bench")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    os.makedirs(args.out_dir, exist_ok=True)
    results = collect(args.quick, args.target, args.cpu_only)
    with open(os.path.join(args.out_dir, "results.json"), "w", encoding="utf-8") as fh:
        json.dump(results, fh, indent=1)
    plots, note = plot(results, args.out_dir)
    if note:
        LOG.info("%s", note)
    report = os.path.join(args.out_dir, "report.md")
    with open(report, "w", encoding="utf-8") as fh:
        fh.write(markdown(results, plots, note))
    LOG.info("wrote %s", report)


if __name__ == "__main__":
    main()
