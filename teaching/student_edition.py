"""Write the student edition of chapter notebooks: solutions replaced by
`# YOUR CODE HERE` / `YOUR ANSWER HERE` stubs and hidden tests removed, by
`nbgrader generate_assignment --no-db`.

    python teaching/student_edition.py                 # every chapter
    python teaching/student_edition.py 04 05_multihead_attention --out handout/

Writes `<out>/<chapter>.ipynb` (default out: _build/student/notebooks).
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
    parser.add_argument("chapters", nargs="*", help="chapters (e.g. 04 or 04_masking); default: all")
    parser.add_argument("--out", type=Path, default=course.ROOT / "_build" / "student" / "notebooks",
                        help="folder for the student notebooks (default: %(default)s)")
    args = parser.parse_args(argv)
    chapters = course.resolve(args.chapters) if args.chapters else course.all_chapters()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="nbgrader-course-") as tmp:
        written = course.generate_student_notebooks(chapters, args.out, Path(tmp))
    for path in written:
        print(path)
    print(f"{len(written)} student notebook(s) in {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
