"""Every cross-reference in the book points at something that exists. (The offline build
cannot run Sphinx's linkcheck; `-n` catches these too, this test says which one failed.)"""

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ROLE = re.compile(r"\{(doc|ref|numref|eq|cite|prf:ref)\}`([^`]+)`")


def documents():
    for path in sorted((ROOT / "book").glob("*.md")):
        yield path, path.read_text(encoding="utf-8")
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        yield path, "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")


def target(text):
    inner = re.search(r"<([^>]+)>", text)  # {doc}`title <target>`
    return (inner.group(1) if inner else text).strip()


def test_every_reference_has_a_target():
    texts = dict(documents())
    labels = set()
    for text in texts.values():
        labels |= set(re.findall(r"^\((\S+)\)=\s*$", text, re.M))  # (label)=
        labels |= set(re.findall(r"^:(?:label|name): *(\S+)", text, re.M))  # directive labels
    bib = (ROOT / "book" / "references.bib").read_text(encoding="utf-8")
    keys = set(re.findall(r"@\w+\{([^,]+),", bib))
    problems = []
    for path, text in texts.items():
        for role, arg in ROLE.findall(text):
            name = target(arg)
            if role == "doc":
                base = ROOT if name.startswith("/") else path.parent
                if not any((base / name.lstrip("/")).with_suffix(s).exists() for s in (".md", ".ipynb")):
                    problems.append(f"{path.name}: {{doc}}`{name}` has no file")
            elif role == "cite":
                problems += [f"{path.name}: {{cite}}`{k}` not in references.bib" for k in name.split(",") if k.strip() not in keys]
            elif role in ("ref", "numref", "prf:ref") and name not in labels:
                problems.append(f"{path.name}: {{{role}}}`{name}` has no label")
    assert not problems, "\n".join(problems)


def test_the_role_pattern_sees_references():
    # guard against a pattern that silently matches nothing
    assert ROLE.findall("see {doc}`how-to-use` and {cite}`vaswani2017attention`") == [
        ("doc", "how-to-use"), ("cite", "vaswani2017attention")]
