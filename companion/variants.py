"""Per-student variants of the *predict, then check* exercises.

An instructor writes each student's id into the parameters cell of their handout
(``student_id = "alice"``); the exercise then asks about that student's own sizes, and the
grader, which knows the id from the submission's folder, checks the same ones. With
``student_id = ""`` (the book, self-learners) every exercise uses the book's numbers: the
first option of each choice.

    sizes = variant(student_id, "masking_predict", lengths=[[5, 3, 2], [6, 4, 1], [4, 2, 2, 1]])
    sizes.lengths  # [5, 3, 2] in the book; one of the three for a student
"""

from __future__ import annotations

import hashlib
from types import SimpleNamespace


def variant(student_id: str, exercise: str, **choices) -> SimpleNamespace:
    """One option of each choice: the first for ``student_id == ""``, else one picked by a hash of
    ``(exercise, choice, student_id)``, the same on every machine and in every Python."""
    if not isinstance(student_id, str):
        raise TypeError(f"student_id must be a string, got {type(student_id).__name__} {student_id!r}")
    if not isinstance(exercise, str) or not exercise:
        raise ValueError(f"exercise must be a non-empty string naming the exercise, got {exercise!r}")
    picks = {}
    for name, options in choices.items():
        options = list(options)
        if not options:
            raise ValueError(f"choice {name!r} of {exercise!r} has no options")
        if student_id == "":
            picks[name] = options[0]
        else:
            digest = hashlib.sha256(f"{exercise}/{name}/{student_id}".encode()).digest()
            picks[name] = options[int.from_bytes(digest[:8], "big") % len(options)]
    return SimpleNamespace(**picks)
