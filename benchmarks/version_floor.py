"""The PyTorch floor, installed for real: the unit tests and two chapters under the oldest torch
that pyproject.toml allows (``torch>=X``), in a throwaway virtual environment.

tests/test_version_floor.py only fakes ``torch.__version__``; that cannot catch an API the floor
lacks. This script installs the floor release, so it can. It is a benchmark-style script (it
downloads a torch wheel), not part of CI:

    python benchmarks/version_floor.py --venv /tmp/floor             # creates it if missing
    python benchmarks/version_floor.py --venv /tmp/floor --wheel torch-2.5.1-...whl

and writes ``benchmarks/results/version_floor.md``. Without ``--wheel`` pip installs
``torch==<floor>.*`` from its index (PyPI's build: CUDA libraries included, a few GB).
"""

from __future__ import annotations

import argparse
import datetime as dt
import re
import subprocess
import sys
import time
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = ("04_masking", "07_transformer")  # masks (the floor's reason: fully masked rows) and a whole model
RUN_CHAPTER = """
import sys, nbformat, nbclient
nb = nbformat.read(sys.argv[1], as_version=4)
nbclient.NotebookClient(nb, timeout=600, resources={"metadata": {"path": sys.argv[2]}}).execute()
"""


def floor() -> str:
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    return re.search(r'"torch>=([\d.]+)"', text).group(1)


def python_of(env: Path) -> Path:
    return env / ("Scripts" if sys.platform == "win32" else "bin") / ("python.exe" if sys.platform == "win32" else "python")


def run(cmd: list[str], timeout: float = 3600) -> tuple[int, str, float]:
    t0 = time.perf_counter()
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, encoding="utf-8", errors="replace",
                          timeout=timeout)
    return done.returncode, done.stdout + done.stderr, time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--venv", type=Path, required=True, help="the throwaway environment (created if missing)")
    parser.add_argument("--wheel", type=Path, help="a torch wheel of the floor release to install from a file")
    parser.add_argument("--markdown", type=Path, default=ROOT / "benchmarks" / "results" / "version_floor.md")
    args = parser.parse_args()
    want = floor()
    python = python_of(args.venv)
    if not python.exists():
        venv.create(args.venv, with_pip=True)
        torch_spec = str(args.wheel) if args.wheel else f"torch=={want}.*"
        for spec in ([torch_spec], ["-r", str(ROOT / "requirements.txt"), f"torch=={want}.*"]):
            code, out, _ = run([str(python), "-m", "pip", "install", "--quiet", *spec])
            if code:
                sys.exit(f"installing {spec} failed:\n{out[-3000:]}")
    code, version, _ = run([str(python), "-c", "import torch, numpy; print(torch.__version__, numpy.__version__)"])
    torch_version, numpy_version = version.split()[-2:]
    if not torch_version.startswith(want):
        sys.exit(f"{args.venv} has torch {torch_version}, not the floor {want}")
    rows = []
    code, out, seconds = run([str(python), "-m", "pytest", "-q", "-m", "not slow", "-p", "no:cacheprovider", "tests"])
    summary = [line for line in out.splitlines() if re.search(r"\d+ (passed|failed)", line)]
    failed = [line for line in out.splitlines() if line.startswith(("FAILED", "ERROR"))]
    rows.append(("unit tests (`-m 'not slow'`)", "pass" if code == 0 else "FAIL", summary[-1] if summary else out[-300:],
                 seconds))
    for chapter in CHAPTERS:
        code, out, seconds = run([str(python), "-c", RUN_CHAPTER, str(ROOT / "notebooks" / f"{chapter}.ipynb"),
                                  str(ROOT / "notebooks")])
        why = "" if code == 0 else out.strip().splitlines()[-1][:200]
        rows.append((f"chapter {chapter}", "pass" if code == 0 else "FAIL", why, seconds))
    table = "\n".join(f"| {what} | {status} | {detail} | {s:.0f} |" for what, status, detail, s in rows)
    text = (f"# The PyTorch floor, installed\n\nMeasured {dt.date.today()} by `python benchmarks/version_floor.py`: "
            f"torch {torch_version} (pyproject.toml: `torch>={want}`), numpy {numpy_version}, "
            f"Python {sys.version.split()[0]}, CPU.\n\n| what | result | detail | seconds |\n|---|---|---|---:|\n{table}\n")
    if failed:
        text += "\nFailures:\n\n" + "\n".join(f"- `{line}`" for line in failed) + "\n"
    args.markdown.write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
