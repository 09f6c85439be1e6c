"""Submitted file names matched to their chapter, whatever an LMS or a browser did to them."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from teaching.submissions import collect, copy_number, match_chapter  # noqa: E402

CHAPTERS = ["01_rnn_captioning", "04_masking", "05_multihead_attention", "07_transformer"]


@pytest.mark.parametrize("name", ["04_masking.ipynb", "04_Masking.ipynb", "04_masking (1).ipynb", "04_masking(2).ipynb",
                                  "s1234567_04_masking.ipynb", "alice-04_masking.ipynb", "04_masking - Copy.ipynb",
                                  "Masking.ipynb", "4_masking.ipynb", "04 masking.ipynb", "04-Masking.IPYNB"])
def test_lms_names_match_their_chapter(name):
    assert match_chapter(name, CHAPTERS) == ["04_masking"]


@pytest.mark.parametrize("name", ["homework.ipynb", "04.ipynb", "notes_07.ipynb", "masking_and_transformer_01.ipynb"])
def test_names_that_are_no_single_chapter_do_not_match_one(name):
    assert len(match_chapter(name, CHAPTERS)) != 1


def test_copy_numbers():
    assert [copy_number(s) for s in ("04_masking", "04_masking (1)", "04_masking (12)")] == [0, 1, 12]


def test_collect_reports_what_it_does_not_grade(tmp_path):
    alice = tmp_path / "alice"
    alice.mkdir()
    for name in ("04_masking.ipynb", "04_masking (1).ipynb", "notes.ipynb", "essay.pdf", "05_multihead_attention.ipynb"):
        (alice / name).write_text("{}", encoding="utf-8")
    (tmp_path / "bob").mkdir()
    students = {s.student: s for s in collect(tmp_path, CHAPTERS)}
    assert set(students) == {"alice", "bob"}, "a student who handed in nothing still gets rows"
    alice_files = students["alice"]
    assert alice_files.chapters["04_masking"].name == "04_masking (1).ipynb", "the later upload is graded"
    assert "04_masking.ipynb" in alice_files.notes["04_masking"]
    assert sorted(n for n, _ in alice_files.unmatched) == ["essay.pdf", "notes.ipynb"]
    assert students["bob"].chapters == {}


def test_collect_refuses_a_notebook_over_the_caps_with_a_row(tmp_path, monkeypatch):
    import teaching.submissions as submissions  # noqa: PLC0415

    monkeypatch.setattr(submissions, "MAX_CELLS", 3)
    alice = tmp_path / "alice"
    alice.mkdir()
    (alice / "04_masking.ipynb").write_text('{"cells": []}', encoding="utf-8")
    (alice / "04_masking (1).ipynb").write_text('{"cells": [{}, {}, {}, {}]}', encoding="utf-8")
    (alice / "05_multihead_attention.ipynb").write_bytes(b" " * (submissions.MAX_NOTEBOOK + 1))
    (files,) = collect(tmp_path, CHAPTERS)
    assert files.chapters == {"04_masking": alice / "04_masking.ipynb"}  # the copy within the caps
    why = dict(files.unmatched)
    assert "4 cells, more than the 3 allowed" in why["04_masking (1).ipynb"]
    assert "larger than" in why["05_multihead_attention.ipynb"]


@pytest.mark.parametrize("name", ["..", ".", "", "a/b", "a\\b", "al\nice", "al\x00ice", "\u202eecila", "alice.",
                                  " alice", "\u0430lice", "x" * 101])
def test_names_that_are_no_student_id(name):
    from teaching.submissions import id_problem  # noqa: PLC0415

    assert id_problem(name) is not None


def test_ids_that_would_be_one_share_a_key():
    from teaching.submissions import id_key  # noqa: PLC0415

    assert id_key("alice") == id_key("\uff41lice") == id_key("ALICE") == id_key("\U0001d44elice")
    assert id_key("jos\u00e9") == id_key("jose\u0301") and id_key("jos\udce9") == id_key("jos\\xe9")
    assert id_key("alice") != id_key("alicia")
