"""Execute every chapter notebook and report how long it takes: wall time per notebook,
the slowest cells (the training cells), and the kernel's peak memory.

    python benchmarks/course_time.py                      # all chapters, table to stdout
    python benchmarks/course_time.py --markdown times.md  # also write a Markdown table
    python benchmarks/course_time.py notebooks/05_multihead_attention.ipynb
    python benchmarks/course_time.py --scale gpu          # the notebooks' larger setting
    python benchmarks/course_time.py --from-build-log build.log --json t.json --markdown t.md

``--from-build-log`` runs nothing: it reads the chapters' times from the log of a book build
(``jupyter-book build`` prints "Executed notebook in N seconds" for each chapter it runs), for
example the log of ``.ci/run``. The chapters' *Time:* lines quote
``benchmarks/results/cpu_build_times.json``, written this way from a quiet CI run
(``tests/test_repository.py`` ties each line to it).

Budget (2-core CPU, scale="cpu"): every notebook <= 90 s, the whole course <= 10 minutes.
The exit status is 1 when a notebook fails or exceeds the budget.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import sys
import time
from pathlib import Path

import nbformat
import torch
from nbclient import NotebookClient
from notebook_parameters import with_parameters

ROOT = Path(__file__).resolve().parents[1]
BUDGET_NOTEBOOK_S = 90.0
BUDGET_COURSE_S = 600.0
SLOW_CELL_S = 3.0


def kernel_peak_mib(client: NotebookClient) -> float | None:
    """The kernel process's peak resident memory (VmHWM), read from /proc on Linux."""
    try:
        pid = client.km.provisioner.process.pid
        for line in Path(f"/proc/{pid}/status").read_text(encoding="utf-8").splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except (AttributeError, OSError, ValueError):
        return None
    return None


def cell_label(cell) -> str:
    for line in cell.source.splitlines():
        line = line.strip()
        if line and not line.startswith(("import ", "from ")):
            return line[:60]
    return "(cell)"


def time_notebook(path: Path, timeout: int, scale: str | None = None) -> dict:
    nb = nbformat.read(path, as_version=4)
    if scale is not None:  # an injected-parameters cell after the `parameters` cell, as papermill's
        nb = with_parameters(nb, scale=scale)
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", record_timing=True,
                            resources={"metadata": {"path": str(path.parent)}})
    peak = None
    start = time.perf_counter()
    error = None
    with client.setup_kernel():
        try:
            for index, cell in enumerate(nb.cells):
                client.execute_cell(cell, index)
        except Exception as exc:  # report, do not stop the whole run
            error = f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1] if str(exc).strip() else ''}"
        peak = kernel_peak_mib(client)
    total = time.perf_counter() - start
    cells = []
    for cell in nb.cells:
        timing = cell.get("metadata", {}).get("execution", {})
        if cell.cell_type == "code" and "iopub.execute_input" in timing and "shell.execute_reply" in timing:
            t0 = dt.datetime.fromisoformat(timing["iopub.execute_input"].replace("Z", "+00:00"))
            t1 = dt.datetime.fromisoformat(timing["shell.execute_reply"].replace("Z", "+00:00"))
            cells.append((cell_label(cell), (t1 - t0).total_seconds()))
    return {"notebook": path.name, "scale": scale or "cpu", "seconds": total, "peak_mib": peak, "error": error,
            "slow_cells": sorted([c for c in cells if c[1] >= SLOW_CELL_S], key=lambda c: -c[1])}


def markdown_table(results: list[dict]) -> str:
    lines = ["| Chapter | wall time (s) | kernel peak memory (MiB) | slowest cells (s) |", "|---|---:|---:|---|"]
    for r in results:
        if r["slow_cells"] is None:  # read from a build's log: cells not timed
            slow = "not recorded"
        else:
            slow = "; ".join(f"`{label}` {s:.0f}" for label, s in r["slow_cells"][:3]) or "none over 3 s"
        peak = f"{r['peak_mib']:.0f}" if r["peak_mib"] else "?"
        status = f" **failed: {r['error']}**" if r["error"] else ""
        lines.append(f"| {r['notebook']} | {r['seconds']:.0f}{status} | {peak} | {slow} |")
    total = sum(r["seconds"] for r in results)
    lines.append(f"| **all chapters** | **{total:.0f}** | | |")
    return "\n".join(lines)


BUILD_LINE = re.compile(r"notebooks/(\d\d_\w+\.ipynb): Executed notebook in ([\d.]+) seconds")


def from_build_log(log: Path) -> list[dict]:
    """The chapters' execution times from a book build's log (the first build in it: English)."""
    results = {}
    for name, seconds in BUILD_LINE.findall(log.read_text(encoding="utf-8", errors="replace")):
        results.setdefault(name, {"notebook": name, "scale": "cpu", "seconds": float(seconds), "peak_mib": None,
                                  "error": None, "slow_cells": None})
    if not results:
        raise SystemExit(f"{log}: no 'Executed notebook in N seconds' line (is it a book build's log?)")
    return [results[name] for name in sorted(results)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("notebooks", nargs="*", type=Path)
    parser.add_argument("--timeout", type=int, default=600, help="seconds per cell")
    parser.add_argument("--scale", choices=["cpu", "gpu"], help="override each notebook's scale parameter")
    parser.add_argument("--no-budget", action="store_true", help="report only; do not fail over budget")
    parser.add_argument("--markdown", type=Path, help="write the table as Markdown to this file")
    parser.add_argument("--json", type=Path, help="write the raw results to this file")
    parser.add_argument("--from-build-log", type=Path, help="read the times from a book build's log; run nothing")
    parser.add_argument("--label", help="--from-build-log: where and when the build ran (the table's first line)")
    args = parser.parse_args()
    if args.from_build_log:
        results = from_build_log(args.from_build_log)
        table = markdown_table(results)
        source = args.label or f"the book's build (log {args.from_build_log.name})"
        print(table)
        if args.markdown:
            args.markdown.write_text(f"Measured in {source}.\n\n{table}\n", encoding="utf-8")
        if args.json:
            args.json.write_text(json.dumps(results, indent=1), encoding="utf-8")
        return 0
    paths = args.notebooks or sorted((ROOT / "notebooks").glob("*.ipynb"))
    results = []
    for path in paths:
        print(f"running {path.name} ...", file=sys.stderr, flush=True)
        results.append(time_notebook(path, args.timeout, args.scale))
        r = results[-1]
        print(f"  {r['seconds']:.1f} s{'  FAILED: ' + r['error'] if r['error'] else ''}", file=sys.stderr, flush=True)
    table = markdown_table(results)
    machine = (f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
               f"torch {torch.__version__}, load average {os.getloadavg()[0]:.1f} at the end")
    print(f"\nMeasured on {machine}, {dt.date.today()}\n\n{table}")
    if args.markdown:
        args.markdown.write_text(f"Measured on {machine}, {dt.date.today()}.\n\n{table}\n", encoding="utf-8")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1), encoding="utf-8")
    total = sum(r["seconds"] for r in results)
    over = [r["notebook"] for r in results if r["seconds"] > BUDGET_NOTEBOOK_S or r["error"]]
    if not args.no_budget and (over or total > BUDGET_COURSE_S):
        print(f"\nover budget or failed: {over or ''} (course total {total:.0f} s, budget {BUDGET_COURSE_S:.0f} s)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
