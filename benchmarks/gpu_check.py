"""The GPU check: run on a machine with CUDA, once, and paste its table into the notes.

    python benchmarks/gpu_check.py

1. the unit tests marked ``gpu`` (skipped on machines without CUDA);
2. every chapter notebook at ``scale="cpu"`` and ``scale="gpu"`` on the GPU, timed;
3. the speedup of each notebook over the CPU times recorded in
   ``benchmarks/results/cpu_course_time.json`` (made on a 2-core CPU by
   ``python benchmarks/course_time.py --json benchmarks/results/cpu_course_time.json``);
4. the attention benchmark (``benchmarks/attention.py --quick``).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
CPU_TIMES = ROOT / "benchmarks" / "results" / "cpu_course_time.json"


def run(cmd: list[str]) -> int:
    print("$", " ".join(cmd), flush=True)
    return subprocess.run(cmd, cwd=ROOT).returncode


def main() -> int:
    if not torch.cuda.is_available():
        print("No CUDA device: the GPU check needs one (the CPU numbers come from course_time.py).")
        return 2
    print("GPU:", torch.cuda.get_device_name(), "| torch", torch.__version__, flush=True)
    failures = run([sys.executable, "-m", "pytest", "-q", "-m", "gpu", "tests"])
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for scale in ("cpu", "gpu"):
            out = Path(tmp) / f"{scale}.json"
            failures += run([sys.executable, "benchmarks/course_time.py", "--scale", scale, "--no-budget", "--json", str(out)])
            results[scale] = {r["notebook"]: r for r in json.loads(out.read_text())}
    cpu_ref = {r["notebook"]: r for r in json.loads(CPU_TIMES.read_text())} if CPU_TIMES.exists() else {}
    print(f"\n{'notebook':<32} {'2-core CPU (s)':>14} {'GPU, scale=cpu (s)':>19} {'speedup':>8} {'GPU, scale=gpu (s)':>19}")
    for name, gpu_small in results["cpu"].items():
        ref = cpu_ref.get(name, {}).get("seconds")
        big = results["gpu"].get(name, {})
        speedup = f"{ref / gpu_small['seconds']:.1f}x" if ref else "?"
        status = " (failed)" if gpu_small["error"] or big.get("error") else ""
        print(f"{name:<32} {ref or float('nan'):>14.1f} {gpu_small['seconds']:>19.1f} {speedup:>8} "
              f"{big.get('seconds', float('nan')):>19.1f}{status}")
    failures += run([sys.executable, "benchmarks/attention.py", "--quick"])
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
