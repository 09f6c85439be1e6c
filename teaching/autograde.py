"""Autograde a folder of submissions into a CSV, with `nbgrader autograde`.

    python teaching/autograde.py submissions/ --out grades.csv [--chapters 04 05]

`submissions/<student>/<chapter>.ipynb`, e.g. `submissions/alice/04_masking.ipynb`: one
folder per student holding the chapter notebooks they handed in (the student edition,
filled in). Each notebook is run against the instructor notebook of its chapter (nbgrader
restores the check cells, including the hidden tests); the CSV has one row per student,
chapter and graded cell (`student,chapter,cell,score,max_score`) and a `TOTAL` row per
student and chapter. An answer that raises, returns NaN or never finishes (a time limit per
exercise cell, `--timeout`) costs its own cell only.
"""

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import course  # noqa: E402


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("submissions", type=Path, help="folder of <student>/<chapter>.ipynb")
    parser.add_argument("--out", type=Path, default=Path("grades.csv"), help="the CSV to write (default: %(default)s)")
    parser.add_argument("--chapters", nargs="*", help="only these chapters (default: every chapter submitted)")
    parser.add_argument("--timeout", type=int, default=None,
                        help="seconds per exercise cell (default: nbgrader_config.py's, 30)")
    parser.add_argument("--jobs", type=int, default=1, help="chapters graded at the same time (default: %(default)s)")
    parser.add_argument("--keep", type=Path, default=None,
                        help="keep the nbgrader course folder here (autograded notebooks, gradebook.db)")
    args = parser.parse_args(argv)
    chapters = course.resolve(args.chapters) if args.chapters else None
    t0 = time.perf_counter()
    if args.keep:
        rows = course.autograde(args.submissions, args.keep, chapters, args.timeout, args.jobs)
    else:
        with tempfile.TemporaryDirectory(prefix="nbgrader-course-") as tmp:
            rows = course.autograde(args.submissions, Path(tmp), chapters, args.timeout, args.jobs)
    course.write_csv(rows, args.out)
    for r in rows:
        if r["cell"] == "TOTAL":
            print(f"{r['student']:20s} {r['chapter']:28s} {r['score']:g} / {r['max_score']:g}")
    print(f"wrote {args.out} in {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
