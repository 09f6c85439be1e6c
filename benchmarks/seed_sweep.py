"""Run chapters for several seeds and print a seed x chapter table.

Every claim the book asserts must hold for every seed, not only for the default ``seed = 0``.
This script executes each chosen chapter once per seed, one notebook at a time, with the
``parameters`` cell overridden (a cell ``seed = N`` inserted after it, as papermill does; the
run uses ``nbclient``, which the book's build already installs), and reports pass/fail
and the wall time of each run. It is a benchmark-style tool, not a test: a full sweep of the
training chapters takes many minutes on a 2-core CPU.

    python benchmarks/seed_sweep.py                              # training chapters, seeds 0-5
    python benchmarks/seed_sweep.py 01 07 --seeds 3 4 5          # chosen chapters and seeds
    python benchmarks/seed_sweep.py --keep /tmp/sweep            # keep the executed notebooks
    python benchmarks/seed_sweep.py --markdown sweep.md          # also write a Markdown table

A chapter is named by its notebook path or its two-digit number. Run it with the repository
root on ``PYTHONPATH`` so the kernels import this checkout's ``companion``; on a shared
machine, under ``nice``. The exit status is 1 when any run fails.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from notebook_parameters import with_parameters

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
# the chapters whose claims depend on the seed (they train models or draw data from it)
TRAINING_CHAPTERS = ["01", "02", "03", "04", "06", "07", "08"]


def resolve(chapter: str) -> Path:
    """A notebook path, or the notebook whose name starts with a two-digit chapter number."""
    path = Path(chapter)
    if path.suffix == ".ipynb":
        return path.resolve()
    matches = sorted(NOTEBOOKS.glob(f"{int(chapter):02d}_*.ipynb"))
    if len(matches) != 1:
        raise SystemExit(f"chapter {chapter!r}: expected one notebook, found {len(matches)}")
    return matches[0]


def first_error_line(error: BaseException) -> str:
    """The exception's name and message (an assertion's message says which claim failed)."""
    ename = getattr(error, "ename", type(error).__name__)
    evalue = str(getattr(error, "evalue", error)).strip().splitlines()
    return f"{ename}: {evalue[0] if evalue else ''}"[:100]


def run_one(notebook: Path, seed: int, out_dir: Path, scale: str, timeout: int) -> tuple[bool, float, str]:
    """Execute one notebook with ``seed``; returns (passed, seconds, error message)."""
    output = out_dir / f"{notebook.stem}_seed{seed}.ipynb"
    nb = with_parameters(nbformat.read(notebook, as_version=4), seed=seed, scale=scale)
    start = time.perf_counter()
    try:
        NotebookClient(nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(notebook.parent)}}).execute()
    except Exception as error:  # noqa: BLE001 -- any failure of the run is a FAIL in the table
        return False, time.perf_counter() - start, first_error_line(error)
    finally:
        nbformat.write(nb, output)
    return True, time.perf_counter() - start, ""


def table(notebooks: list[Path], seeds: list[int], results: dict) -> str:
    names = [nb.stem for nb in notebooks]
    lines = ["| seed | " + " | ".join(names) + " |", "|---:|" + "---|" * len(names)]
    for seed in seeds:
        cells = []
        for nb in notebooks:
            if (nb, seed) not in results:  # not run yet
                cells.append("-")
                continue
            ok, seconds, _ = results[nb, seed]
            cells.append(f"{'pass' if ok else 'FAIL'} {seconds:.0f} s")
        lines.append(f"| {seed} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "chapters",
        nargs="*",
        default=TRAINING_CHAPTERS,
        help="notebook paths or two-digit chapter numbers (default: the training chapters)",
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(6)), help="seeds (default 0-5)")
    parser.add_argument("--scale", default="cpu", help='the notebooks\' scale parameter (default "cpu")')
    parser.add_argument("--keep", type=Path, help="folder for the executed notebooks (default: discarded)")
    parser.add_argument("--markdown", type=Path, help="also write the table to this Markdown file")
    parser.add_argument("--timeout", type=int, default=600, help="seconds allowed per cell (default 600)")
    args = parser.parse_args()

    if str(ROOT) not in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        print(f"note: PYTHONPATH does not contain {ROOT}; the kernels may import another companion", file=sys.stderr)
    notebooks = [resolve(c) for c in args.chapters]
    results: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        out_dir = args.keep or Path(tmp)
        out_dir.mkdir(parents=True, exist_ok=True)
        for nb in notebooks:
            for seed in args.seeds:
                ok, seconds, message = run_one(nb, seed, out_dir, args.scale, args.timeout)
                results[nb, seed] = (ok, seconds, message)
                print(
                    f"{nb.stem} seed {seed}: {'pass' if ok else 'FAIL'} in {seconds:.0f} s" + (f"  {message}" if message else ""),
                    flush=True,
                )
                if args.markdown:  # the table so far, in case the sweep is stopped
                    args.markdown.write_text(table(notebooks, args.seeds, results) + "\n", encoding="utf-8")

    text = table(notebooks, args.seeds, results)
    failures = [f"- {nb.stem}, seed {seed}: {results[nb, seed][2]}" for nb in notebooks for seed in args.seeds if not results[nb, seed][0]]
    print()
    print(text)
    if failures:
        print("\nFailures:\n" + "\n".join(failures))
    if args.markdown:
        args.markdown.write_text(text + ("\n\nFailures:\n" + "\n".join(failures) if failures else "") + "\n", encoding="utf-8")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
