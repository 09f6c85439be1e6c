"""Mutation testing of the core modules: how many small bugs do the quick tests catch?

A benchmark run, not part of CI. It copies the companion and its tests to a scratch
folder, points ``mutmut`` (``pip install mutmut``, 3.x) at the modules below, runs it, and
prints the share of mutants the tests kill, with every survivor listed.

    python benchmarks/mutation.py                     # attention, masks, multihead, positional
    python benchmarks/mutation.py --modules masks     # one module
    python benchmarks/mutation.py --modules decoding train models/blocks --jobs 2
    python benchmarks/mutation.py --keep /tmp/mut     # keep the scratch folder (mutmut show <name>)

Survivors are judged one by one: either a test is added that kills them, or they are
listed in the report as harmless (e.g. a changed error message that no test reads).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_MODULES = ["attention", "masks", "multihead", "positional"]
# the quick test set of these modules (test_transformer.py also covers them, but costs 5x the time)
TESTS = ["conftest.py", "test_attention.py", "test_masks.py", "test_multihead.py", "test_positional.py",
         "test_validation.py", "test_identities.py", "test_dft.py", "test_conv_as_attention.py",
         # decoding, train, models/blocks
         "test_decoding.py", "test_beam.py", "test_train.py", "test_train_warmup.py", "test_blocks.py"]
# the slow tests left out: a 15-30 s training run per mutant of train() would take hours
DESELECT = ["tests/test_train.py::test_tiny_run_overfits_a_handful_of_examples"]


def module_path(name: str) -> str:
    """``decoding``, ``models/blocks`` or ``models.blocks`` -> ``companion/models/blocks.py``."""
    name = name.removesuffix(".py").replace(".", "/").removeprefix("companion/")
    if not (ROOT / "companion" / f"{name}.py").is_file():
        raise SystemExit(f"no module companion/{name}.py")
    return f"companion/{name}.py"


def setup(work: Path, modules: list[str]) -> None:
    """Copy the companion and the quick tests to ``work`` and configure mutmut there."""
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    shutil.copytree(ROOT / "companion", work / "companion", ignore=shutil.ignore_patterns("__pycache__"))
    (work / "tests").mkdir()
    for name in TESTS:
        shutil.copy(ROOT / "tests" / name, work / "tests" / name)
    only = ", ".join(f'"{module_path(m)}"' for m in modules)
    tests = ", ".join(f'"tests/{t}"' for t in TESTS if t.startswith("test_"))
    deselect = ", ".join(f'"--deselect", "{d}"' for d in DESELECT)
    # Whole `raise` statements are left alone: rewording an error message (mutmut's "XX…XX")
    # gives one mutant per string; the validation *conditions* before them are still mutated.
    (work / "setup.cfg").write_text("", encoding="utf-8")
    (work / "pyproject.toml").write_text(
        "[tool.pytest.ini_options]\n"
        'filterwarnings = ["ignore::UserWarning"]\n'
        "[tool.mutmut]\n"
        'source_paths = ["companion"]\n'
        f"only_mutate = [{only}]\n"
        f"pytest_add_cli_args_test_selection = [{tests}]\n"
        f"pytest_add_cli_args = [{deselect}]\n"
        'do_not_mutate_patterns = ["^\\\\s*raise "]\n', encoding="utf-8"
    )


def run_mutmut(work: Path, jobs: int, names: list[str] = ()) -> None:
    # one thread per worker: mutmut forks its workers, and a fork of a process whose OpenMP
    # threads are running can hang (such hangs would be counted as "timeouts")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    subprocess.run(["mutmut", "run", "--max-children", str(jobs), *names], cwd=work, capture_output=True, text=True,
                   env=env, encoding="utf-8")


def results(work: Path) -> dict[str, str]:
    out = subprocess.run(["mutmut", "results", "--all", "true"], cwd=work, capture_output=True, text=True, encoding="utf-8").stdout
    status = {}
    for line in out.splitlines():
        if ":" in line:
            name, state = (s.strip() for s in line.rsplit(":", 1))
            status[name] = state
    return status


def report(work: Path, modules: list[str]) -> int:
    status = results(work)
    counts = Counter(status.values())
    total = sum(counts.values())
    if not total:
        print("no mutants found: is mutmut set up in", work)
        return 1
    killed = counts["killed"]
    print(f"modules: {', '.join(modules)}; tests: {', '.join(t for t in TESTS if t.startswith('test_'))}")
    print(f"mutants: {total}; " + "; ".join(f"{k}: {v}" for k, v in sorted(counts.items())))
    checked = total - counts["not checked"]
    print(f"killed: {killed}/{checked} checked = {100 * killed / max(checked, 1):.1f} % "
          f"(timeouts, counted apart: {counts['timeout']})")
    for name, state in status.items():
        if state != "survived":
            continue
        diff = subprocess.run(["mutmut", "show", name], cwd=work, capture_output=True, text=True, encoding="utf-8").stdout
        changed = [ln for ln in diff.splitlines() if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]
        print(f"\nsurvived: {name}\n  " + "\n  ".join(changed[:6]))
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modules", nargs="+", default=DEFAULT_MODULES, help="companion modules to mutate")
    parser.add_argument("--jobs", type=int, default=2, help="mutmut's --max-children")
    parser.add_argument("--keep", type=Path, help="scratch folder to use and keep")
    parser.add_argument("--resume", action="store_true", help="go on in the --keep folder (re-checking timeouts)")
    args = parser.parse_args(argv)

    if shutil.which("mutmut") is None:
        print("mutmut is not installed: pip install mutmut", file=sys.stderr)
        return 2
    work = args.keep or Path(tempfile.mkdtemp(prefix="companion-mutation-"))
    if args.resume and (work / "mutants").exists():
        for name in TESTS:  # the tests may have grown since
            shutil.copy(ROOT / "tests" / name, work / "tests" / name)
            shutil.copy(ROOT / "tests" / name, work / "mutants" / "tests" / name)
        run_mutmut(work, args.jobs)  # the mutants not checked yet
        again = [n for n, s in results(work).items() if s in ("timeout", "survived")]
        if again:
            run_mutmut(work, args.jobs, again)
    else:
        setup(work, args.modules)
        run_mutmut(work, args.jobs)
    code = report(work, args.modules)
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
