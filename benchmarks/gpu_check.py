"""The GPU check: run on a machine with CUDA, once, and paste its table into the notes.

    python benchmarks/gpu_check.py [--deadline 500] [--scales cpu gpu] [--out results/]

1. the unit tests that need no browser, nbgrader or network (the ``gpu``-marked ones included);
2. every chapter notebook at ``scale="cpu"`` and then ``scale="gpu"`` on the GPU, timed;
3. the speedup of each notebook over the CPU times recorded in
   ``benchmarks/results/cpu_course_time.json`` (made on a 2-core CPU by
   ``python benchmarks/course_time.py --json benchmarks/results/cpu_course_time.json``);
4. the attention benchmark (``benchmarks/attention.py --quick``).

The notebooks run as plain Python scripts (their code cells in order, without the Colab
install cell), so the check needs only torch and the companion's dependencies, not Jupyter:
GPU machines often have no Jupyter kernel. Nothing new is started after ``--deadline``
seconds, so a time-limited GPU lease still returns a table; what did not run says so.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import jupytext
import nbformat
from notebook_parameters import with_parameters

ROOT = Path(__file__).resolve().parents[1]
CPU_TIMES = ROOT / "benchmarks" / "results" / "cpu_course_time.json"
NO_GPU_TESTS = ["test_browser.py", "test_teaching.py", "test_wheel.py", "test_repository.py", "test_links.py"]


def notebook_script(notebook: Path, scale: str) -> str:
    """The code cells of a chapter as one script (jupytext's percent format), without the
    Colab install cell, with ``scale`` set in an injected-parameters cell (papermill's
    convention, as course_time.py does). Magics become comments; Markdown becomes comments."""
    nb = nbformat.read(notebook, as_version=4)
    nb.cells = [c for c in nb.cells if not (c.cell_type == "code" and "%pip" in c.source)]
    nb = with_parameters(nb, scale=scale)
    return "import matplotlib\nmatplotlib.use('Agg')\n\n" + jupytext.writes(nb, fmt="py:percent")


class Runner:
    """Runs commands until a deadline; keeps their output in a log."""

    def __init__(self, deadline: float, log: Path):
        self.t0, self.deadline, self.log = time.time(), deadline, open(log, "a", buffering=1, encoding="utf-8")
        self.env = {**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg", "PYTHONUNBUFFERED": "1"}

    def __call__(self, cmd: list[str], limit: float) -> tuple[str, float, str]:
        left = self.deadline - (time.time() - self.t0)
        if left < 15:
            return "not run (deadline)", 0.0, ""
        start = time.time()
        try:
            done = subprocess.run(cmd, cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=min(limit, left), encoding="utf-8")
            status, text = ("ok" if done.returncode == 0 else f"failed (exit {done.returncode})"), done.stdout + done.stderr
        except subprocess.TimeoutExpired as e:
            status, text = f"stopped at {min(limit, left):.0f} s", (e.stdout or b"").decode(errors="ignore")
        seconds = time.time() - start
        print(f"\n===== {' '.join(cmd)}: {status}, {seconds:.1f} s\n{text[-8000:]}", file=self.log)
        return status, seconds, text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--deadline", type=float, default=1800, help="start nothing new after this many seconds")
    parser.add_argument("--scales", nargs="+", default=["cpu", "gpu"], choices=["cpu", "gpu"])
    parser.add_argument("--chapters", nargs="*", help="only these notebooks (e.g. 05 07); default: all")
    parser.add_argument("--out", type=Path, default=Path("gpu_check"), help="folder for the log and the scripts")
    parser.add_argument("--per-notebook", type=float, default=300, help="time limit per notebook (s)")
    args = parser.parse_args()

    import torch

    if not torch.cuda.is_available():
        print("No CUDA device: the GPU check needs one (the CPU numbers come from course_time.py).")
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    run = Runner(args.deadline, args.out / "gpu_check_log.txt")
    print("GPU:", torch.cuda.get_device_name(), "| torch", torch.__version__, "| CPUs", os.cpu_count(), flush=True)

    status, seconds, text = run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests", "-m", "not slow",
                                 *[f"--ignore=tests/{t}" for t in NO_GPU_TESTS]], 300)
    last = text.strip().splitlines()[-1] if text.strip() else ""
    print(f"unit tests: {status}, {seconds:.0f} s: {last}", flush=True)
    failures = status != "ok"

    notebooks = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    if args.chapters:
        notebooks = [nb for nb in notebooks if any(nb.stem.startswith(c) for c in args.chapters)]
    results: dict[tuple[str, str], tuple[str, float]] = {}
    for scale in args.scales:
        for nb in notebooks:
            script = args.out / f"{nb.stem}__{scale}.py"
            script.write_text(notebook_script(nb, scale), encoding="utf-8")
            status, seconds, text = run([sys.executable, str(script)], args.per_notebook)
            results[nb.stem, scale] = (status, seconds)
            failures |= status.startswith("failed")
            why = "" if status == "ok" else " | " + " | ".join(text.strip().splitlines()[-2:])
            print(f"{nb.stem:<28} scale={scale}: {status}, {seconds:.1f} s{why}", flush=True)

    cpu_times = json.loads(CPU_TIMES.read_text(encoding="utf-8")) if CPU_TIMES.exists() else []
    cpu_ref = {Path(r["notebook"]).stem: r["seconds"] for r in cpu_times}
    print("\n| chapter | 2-core CPU (s) | GPU, scale=cpu (s) | speedup | GPU, scale=gpu (s) |\n|---|---:|---:|---:|---|")
    for nb in notebooks:
        small, big = results.get((nb.stem, "cpu")), results.get((nb.stem, "gpu"))
        ref = cpu_ref.get(nb.stem)
        cell = lambda r: "not run" if r is None else (f"{r[1]:.1f}" if r[0] == "ok" else f"{r[0]} at {r[1]:.0f} s")  # noqa: E731
        speedup = f"{ref / small[1]:.1f}x" if ref and small and small[0] == "ok" else "-"
        print(f"| {nb.stem} | {ref if ref else '-'} | {cell(small)} | {speedup} | {cell(big)} |")

    status, seconds, text = run([sys.executable, "benchmarks/attention.py", "--quick"], 300)
    print(f"\nattention benchmark: {status}, {seconds:.0f} s\n{text[-3000:]}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
