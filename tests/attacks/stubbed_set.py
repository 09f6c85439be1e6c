"""Print what the grader stubs for one exercise (chapter prefix, answer id)."""
import sys
from pathlib import Path
from teaching.exercises import read_chapter
from teaching.stubbing import Index, exercise_rule, stubbed_set

nb = next(Path("notebooks").glob(sys.argv[1] + "_*.ipynb"))
ch = read_chapter(nb)
ex = next(e for e in ch.exercises if e.answer_id == sys.argv[2])
rule = exercise_rule(ch, ex)
print(rule)
s = stubbed_set(Index(Path(".")), rule[0], rule[1], rule[2])
for k in sorted(s):
    print(" ", k)
