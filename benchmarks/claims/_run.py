"""Shared runner of the claim-distribution scripts (issue #41): one script per chapter,
``benchmarks/claims/chNN.py``, measures each quantity a chapter asserts over many seeds of that
experiment alone and writes ``benchmarks/results/claims/chNN.md``.

Two pieces:

* ``notebook_namespace(chapter, seed, cells)`` runs chosen code cells of the chapter's
  notebook itself (never a copy of them), with ``seed`` and ``scale`` set as the
  ``parameters`` cell would set them and every ``assert`` removed, so that a failing claim
  is measured rather than stopping the run. It returns the cells' variables. A cell is named
  by a string its source contains (its first line, say), so a script keeps working when
  cells move.
* ``summarise(name, values, threshold, direction)`` turns one quantity's values over the
  seeds into a Markdown row: how many seeds pass, the worst value, the 2nd percentile from
  the worst side, the median, and the margin between that percentile and the threshold.

``chapter_cells(chapter, extra)`` lists a chapter's code cells before its exercises (and the
exercise cells named by ``extra``), for a script that runs all of them.

A script calls ``main(chapter, measure, claims)``: ``measure(seed) -> {quantity: value}``
and ``claims``: ``[(quantity, threshold, direction, what the prose says), ...]``, where
``direction`` is ``">"`` (the claim is ``value > threshold``) or ``"<"``; ``exact``
lists the chapter's assertions that no seed changes (identities, shapes, counts, fixed
tables), shown in the table as exact. A quantity may be a
list (a cell that trains two seeds gives two values); ``stride=2`` then steps the cell's
seed by 2, so that every value comes from another seed.
Run from the repository root, under ``nice`` on a shared machine:

    PYTHONPATH=$PWD nice -n 10 python benchmarks/claims/ch05.py --seeds 40
    PYTHONPATH=$PWD python benchmarks/claims/ch05.py --report   # the cached seeds only
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import statistics
import sys
import time
import types
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results" / "claims"

HEADER = (
    "| quantity | claim | seeds passing | worst | 2nd pct (worst side) | median | margin |\n"
    "|---|---|---:|---:|---:|---:|---:|"
)


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) by linear interpolation between order statistics."""
    xs = sorted(values)
    if not xs:
        raise ValueError("percentile of no values")
    pos = (len(xs) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def summarise(name: str, values: Sequence[float], threshold: float, direction: str) -> str:
    """One Markdown row: ``name``'s values over the seeds against the claim
    ``value > threshold`` (direction ``">"``) or ``value < threshold`` (``"<"``).
    The worst side is the low end for ``">"`` and the high end for ``"<"``; the margin is
    how far the 2nd percentile of that side lies beyond the threshold (negative: more
    than 2 % of the seeds fail, or nearly)."""
    if direction not in (">", "<"):
        raise ValueError(f"direction must be '>' or '<', got {direction!r}")
    values = [float(v) for v in values]
    if direction == ">":
        passing = sum(v > threshold for v in values)
        worst, tail = min(values), percentile(values, 2)
        margin = tail - threshold
    else:
        passing = sum(v < threshold for v in values)
        worst, tail = max(values), percentile(values, 98)
        margin = threshold - tail
    return (
        f"| {name} | {direction} {threshold:g} | {passing} of {len(values)} | {worst:.3g} "
        f"| {tail:.3g} | {statistics.median(values):.3g} | {margin:+.3g} |"
    )


class _DropAsserts(ast.NodeTransformer):
    def visit_Assert(self, node: ast.Assert) -> ast.Pass:  # noqa: N802 (ast's name)
        return ast.copy_location(ast.Pass(), node)


def notebook_namespace(
    chapter: str,
    seed: int,
    cells: Sequence[str],
    scale: str = "cpu",
    keep: dict[str, Sequence[str]] | None = None,
) -> dict:
    """Run the code cells of ``notebooks/<chapter>_*.ipynb`` whose source contains one of
    ``cells`` (in the notebook's order), after its parameters cell with ``seed`` and
    ``scale``; asserts removed. Returns the variables the cells defined. ``keep`` maps a
    piece of a cell's source to names whose values right after that cell are kept as
    ``name@piece``, for a name that a later cell reuses."""
    import matplotlib
    import torch

    torch.set_num_threads(1)  # one process per core: threads only fight on a shared machine
    matplotlib.use("Agg")  # plt.show() draws nothing
    import matplotlib.pyplot as plt
    import nbformat

    (path,) = sorted((ROOT / "notebooks").glob(f"{chapter}_*.ipynb"))
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    params = [c for c in code if "parameters" in c.metadata.get("tags", [])]
    chosen = [c for c in code if any(key in c.source for key in cells)]
    missing = [key for key in cells if not any(key in c.source for c in chosen)]
    if missing:
        raise ValueError(f"{path.name}: no code cell contains {missing}")
    # the cells' globals are a real module's, as in a kernel: torch.compile imports the
    # module that its traced functions' globals name
    module = types.ModuleType("__claims__")
    sys.modules[module.__name__] = module
    namespace: dict = module.__dict__
    os.environ.setdefault("COMPANION_PROGRESS", "text")
    exec(compile(params[0].source, "parameters", "exec"), namespace)  # noqa: S102
    namespace.update(seed=seed, scale=scale)
    for cell in chosen:
        tree = ast.fix_missing_locations(_DropAsserts().visit(ast.parse(cell.source)))
        exec(compile(tree, f"{path.name} cell", "exec"), namespace)  # noqa: S102
        plt.close("all")
        for key, names in (keep or {}).items():
            if key in cell.source:
                namespace.update({f"{name}@{key}": namespace[name] for name in names})
    return namespace


def chapter_cells(chapter: str, extra: Sequence[str] = ()) -> list[str]:
    """The sources of the chapter's code cells before '## Exercises' (each names its own
    cell), the install and parameters cells aside, then the exercise cells that contain one
    of ``extra`` (a solution whose assertion is a claim, say)."""
    import nbformat

    (path,) = sorted((ROOT / "notebooks").glob(f"{chapter}_*.ipynb"))
    nb = nbformat.read(path, as_version=4)
    out, exercises = [], False
    for cell in nb.cells:
        if cell.cell_type == "markdown" and cell.source.startswith("## Exercises"):
            exercises = True
        if cell.cell_type != "code":
            continue
        install = "importlib.util.find_spec" in cell.source
        params = "parameters" in cell.metadata.get("tags", [])
        if exercises:
            if any(key in cell.source for key in extra):
                out.append(cell.source)
        elif not install and not params:
            out.append(cell.source)
    return out


def seed_text(seeds: Sequence[int], stride: int) -> str:
    """``seeds`` in words: a range with its step, or the list when it is not one."""
    seeds = list(seeds)
    if seeds == list(range(seeds[0], seeds[-1] + 1, stride)):
        return f"{seeds[0]} to {seeds[-1]}, step {stride}"
    return ", ".join(map(str, seeds))


def main(
    chapter: str,
    measure: Callable[[int], dict],
    claims: Sequence[tuple[str, float, str, str]],
    notes: str = "",
    stride: int = 1,
    exact: Sequence[str] = (),
) -> None:
    """Measure ``seeds`` seeds (a JSON line per seed on stdout, kept in a .jsonl cache so that
    an interrupted sweep resumes), then write ``benchmarks/results/claims/ch<chapter>.md``."""
    parser = argparse.ArgumentParser(description=f"claim distributions of chapter {chapter}")
    parser.add_argument("--seeds", type=int, default=40, help="how many seeds (default 40)")
    parser.add_argument("--first", type=int, default=0, help="the first seed (default 0)")
    parser.add_argument("--fresh", action="store_true", help="ignore the cached seeds")
    parser.add_argument(
        "--report", action="store_true",
        help="run nothing: the table of the seeds already cached, however many (a sweep cut short)",
    )
    args = parser.parse_args()
    RESULTS.mkdir(parents=True, exist_ok=True)
    cache = RESULTS / f"ch{chapter}.jsonl"
    done = {}
    if cache.exists() and not args.fresh:
        for line in cache.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            done[row["seed"]] = row
    seeds = range(args.first, args.first + args.seeds * stride, stride)
    if args.report:
        seeds = sorted(done)
    with cache.open("a", encoding="utf-8") as out:
        for seed in seeds:
            if seed in done:
                continue
            t0 = time.perf_counter()
            values = measure(seed).items()
            row = {"seed": seed, **{k: [float(x) for x in v] if isinstance(v, list) else float(v) for k, v in values}}
            row["seconds"] = round(time.perf_counter() - t0, 2)
            done[seed] = row
            out.write(json.dumps(row) + "\n")
            out.flush()
            print(json.dumps(row), file=sys.stderr, flush=True)
    rows = [done[s] for s in seeds]

    def flat(quantity: str) -> list[float]:
        return [x for r in rows for x in (r[quantity] if isinstance(r[quantity], list) else [r[quantity]])]
    lines = [
        f"# Chapter {chapter}: the asserted quantities over {len(rows)} runs of the experiment",
        "",
        f"Written by `benchmarks/claims/ch{chapter}.py` (the cell's `seed` = {seed_text(seeds, stride)}, "
        f"`scale = \"cpu\"`, on the CPU). *Margin*: how far the 2nd percentile of the "
        "worst side lies beyond the claim's threshold."
        + (
            f" **{len(rows) * stride} seeds, fewer than the 40 issue #41 asks for:** the 2nd percentile "
            "is close to the worst value and says little about the tail."
            if len(rows) * stride < 40 else ""
        ),
        "",
        HEADER,
    ]
    for quantity, threshold, direction, what in claims:
        lines.append(
            summarise(f"{what} (`{quantity}`)", flat(quantity), threshold, direction)
        )
    lines += [f"| {what} | exact: no randomness, not measured | | | | | |" for what in exact]
    seconds = [r["seconds"] for r in rows]
    lines += ["", f"Median time per run of the experiment {statistics.median(seconds):.1f} s "
              "(one process, one thread; see the notes for the machine).", ""]
    now = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    if args.report:
        lines += [f"Table written {now} UTC from the seeds cached by then (`--report`).", ""]
    else:
        load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
        lines += [
            f"Table written {now} UTC on a machine with {os.cpu_count()} CPUs; load "
            f"average then {load} (1, 5, 15 minutes).",
            "",
        ]
    if notes:
        lines += [notes.strip(), ""]
    (RESULTS / f"ch{chapter}.md").write_text("\n".join(lines), encoding="utf-8")
    print("\n".join(lines))
