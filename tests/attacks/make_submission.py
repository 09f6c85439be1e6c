"""Write submissions/<student>/<chapter>.ipynb: the instructor's chapter notebook with some
answer cells replaced (the others keep the reference solution, so the student is honest there).

    python attacks/make_submission.py OUTDIR STUDENT CHAPTER_PREFIX ANSWERS.py

ANSWERS.py defines ANSWERS = {grade_id: source}.
"""
import runpy
import sys
from pathlib import Path

import nbformat

out, student, prefix, answers = sys.argv[1:5]
nb_path = next(Path("notebooks").glob(prefix + "_*.ipynb"))
nb = nbformat.read(nb_path, as_version=4)
table = runpy.run_path(answers)["ANSWERS"]
for cell in nb.cells:
    gid = cell.metadata.get("nbgrader", {}).get("grade_id")
    if gid in table:
        cell.source = table[gid]
dest = Path(out) / student / nb_path.name
dest.parent.mkdir(parents=True, exist_ok=True)
nbformat.write(nb, dest)
print(dest)
