"""Mutation testing of the core modules: how many small bugs do the quick tests catch?

A benchmark run, not part of CI. It copies the companion and its tests to a scratch
folder, points ``mutmut`` (``pip install mutmut``, 3.x) at the modules below, runs it, and
prints the share of mutants the tests kill, with every survivor listed.

    python benchmarks/mutation.py                     # attention, masks, multihead, positional
    python benchmarks/mutation.py --modules masks     # one module
    python benchmarks/mutation.py --keep /tmp/mut     # keep the scratch folder (mutmut show <name>)

Survivors are judged one by one: either a test is added that kills them, or they are
listed in the report as harmless (e.g. a changed error message that no test reads).
"""

from __future__ import annotations

import argparse
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
         "test_validation.py", "test_identities.py", "test_selfattention.py"]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modules", nargs="+", default=DEFAULT_MODULES, help="companion modules to mutate")
    parser.add_argument("--jobs", type=int, default=2, help="mutmut's --max-children")
    parser.add_argument("--keep", type=Path, help="scratch folder to use and keep")
    args = parser.parse_args(argv)

    if shutil.which("mutmut") is None:
        print("mutmut is not installed: pip install mutmut", file=sys.stderr)
        return 2
    work = args.keep or Path(tempfile.mkdtemp(prefix="companion-mutation-"))
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    shutil.copytree(ROOT / "companion", work / "companion", ignore=shutil.ignore_patterns("__pycache__"))
    (work / "tests").mkdir()
    for name in TESTS:
        shutil.copy(ROOT / "tests" / name, work / "tests" / name)
    (work / "benchmarks").mkdir()
    shutil.copy(ROOT / "benchmarks" / "training.py", work / "benchmarks" / "training.py")
    only = ", ".join(f'"companion/{m}.py"' for m in args.modules)
    tests = ", ".join(f'"tests/{t}"' for t in TESTS if t.startswith("test_"))
    # Whole `raise` statements are left alone: rewording an error message (mutmut's "XX…XX")
    # gives one mutant per string; the validation *conditions* before them are still mutated.
    (work / "setup.cfg").write_text("")
    (work / "pyproject.toml").write_text(
        "[tool.pytest.ini_options]\n"
        'filterwarnings = ["ignore::UserWarning"]\n'
        "[tool.mutmut]\n"
        'source_paths = ["companion"]\n'
        f"only_mutate = [{only}]\n"
        f"pytest_add_cli_args_test_selection = [{tests}]\n"
        'do_not_mutate_patterns = ["^\\\\s*raise "]\n'
        'also_copy = ["benchmarks/"]\n'
    )
    run = subprocess.run(["mutmut", "run", "--max-children", str(args.jobs)], cwd=work, capture_output=True, text=True)
    results = subprocess.run(["mutmut", "results", "--all", "true"], cwd=work, capture_output=True, text=True)
    counts: Counter = Counter()
    survivors = []
    for line in results.stdout.splitlines():
        if ":" not in line:
            continue
        name, status = (s.strip() for s in line.rsplit(":", 1))
        counts[status] += 1
        if status == "survived":
            survivors.append(name)
    total = sum(counts.values())
    if not total:
        print(run.stdout[-3000:], run.stderr[-3000:], results.stdout[-2000:], results.stderr[-2000:], sep="\n")
        return 1
    killed = counts["killed"] + counts["timeout"]
    print(f"modules: {', '.join(args.modules)}; tests: {len(TESTS) - 1} files; scratch folder: {work}")
    print(f"mutants: {total}; " + "; ".join(f"{k}: {v}" for k, v in sorted(counts.items())))
    print(f"killed (incl. timeouts): {killed}/{total} = {100 * killed / total:.1f} %")
    for name in survivors:
        diff = subprocess.run(["mutmut", "show", name], cwd=work, capture_output=True, text=True).stdout
        changed = [ln for ln in diff.splitlines() if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]
        print(f"\nsurvived: {name}\n  " + "\n  ".join(changed[:6]))
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
