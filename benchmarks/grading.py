"""How long grading takes, sandboxes included (a benchmark, not a test).

    python benchmarks/grading.py                    # 4 students x every chapter, 2 jobs
    python benchmarks/grading.py --students 30 --chapters 04 --jobs 2

Writes filled-in submissions (the instructor's solutions, each student with their own id, so
their variants differ) into a temporary folder, grades them with teaching/autograde.py and
prints the wall time per student-chapter and the projection for a class of 30 students x 8
chapters. Every cell must score full points, or the run fails.
"""

import argparse
import csv
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--students", type=int, default=4)
    parser.add_argument("--chapters", nargs="*", default=[])
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        roster = Path(tmp) / "roster.txt"
        roster.write_text("\n".join(f"student{i:02d}" for i in range(args.students)) + "\n", encoding="utf-8")
        subs = Path(tmp) / "subs"
        subprocess.run([sys.executable, "-m", "teaching.student_edition", *args.chapters, "--students", str(roster),
                        "--test-submission", str(subs)], check=True, cwd=ROOT, capture_output=True)
        out = Path(tmp) / "grades.csv"
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "teaching.autograde", str(subs), "--out", str(out), "--jobs",
                        str(args.jobs), *(["--chapters", *args.chapters] if args.chapters else [])],
                       check=True, cwd=ROOT, capture_output=True)
        seconds = time.perf_counter() - t0
        rows = list(csv.DictReader(open(out, encoding="utf-8")))
    totals = [r for r in rows if r["cell"] == "TOTAL"]
    assert all(float(r["score"]) == float(r["max_score"]) for r in totals), [r for r in totals if r["score"] != r["max_score"]]
    n = len(totals)
    chapters = len({r["chapter"] for r in totals})
    per = seconds / n
    print(f"{n} student-chapters ({args.students} students x {chapters} chapters), jobs={args.jobs}, "
          f"{os.cpu_count()} CPUs: {seconds:.1f} s, {per:.2f} s per student-chapter (wall, {per * args.jobs:.2f} s "
          f"per job); 30 students x 8 chapters: about {30 * 8 * per / 60:.1f} min")


if __name__ == "__main__":
    main()
