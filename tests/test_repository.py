"""The repository keeps its promises: notebooks without outputs, every chapter in the
table of contents, the Colab install cell pointing at the repository of _config.yml, code
that fits the book's column."""

import json
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
TOC = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
CODE_COLUMNS = 88  # the book's column; notebooks/ruff.toml sets the same for ruff


def cells(path):
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def source(cell):
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def is_chapter(path):
    return any(c["cell_type"] == "code" for c in cells(path))


def test_chapters_are_numbered_in_order_all_in_the_toc():
    names = [p.stem for p in NOTEBOOKS]
    assert len(names) >= 9, names
    assert [int(n[:2]) for n in names] == list(range(1, len(names) + 1)), names
    files = [ch["file"] for part in TOC["parts"] for ch in part["chapters"]]
    for name in names:
        assert f"notebooks/{name}" in files, f"{name} is missing from _toc.yml"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_stored_without_outputs(path):
    for i, cell in enumerate(cells(path)):
        if cell["cell_type"] != "code" or "NBVAL_CHECK_OUTPUT" in source(cell):
            continue
        assert not cell.get("outputs"), f"{path.name} cell {i} has stored outputs: run nbstripout"
        assert cell.get("execution_count") is None, f"{path.name} cell {i} has an execution count"


@pytest.mark.parametrize("path", [p for p in NOTEBOOKS if is_chapter(p)], ids=lambda p: p.name)
def test_chapter_follows_the_conventions(path):
    code = [c for c in cells(path) if c["cell_type"] == "code"]
    install = source(code[0])
    url = CONFIG["repository"]["url"]
    assert 'find_spec("companion") is None' in install, "the first code cell must be the install cell"
    assert f"git+{url}" in install, f"the install cell must install from {url} (_config.yml)"
    name = re.search(r'^name = "(.+)"', (ROOT / "pyproject.toml").read_text(encoding="utf-8"), re.M).group(1)
    assert f'"{name} @ git+{url}"' in install, f"the install cell must name the package {name} and quote its specifier"
    assert "parameters" in code[1].get("metadata", {}).get("tags", []), "the second code cell must be tagged 'parameters'"
    assert re.search(r"^scale = ", source(code[1]), re.M), "the parameters cell must set scale"
    assert any("describe_device" in source(c) for c in code), "the notebook must print its device"
    assert any("companion.default_device(scale)" in source(c) for c in code), \
        "the notebook must take its device from the policy at its scale: companion.default_device(scale)"
    header = source(cells(path)[0])
    assert header.startswith("# "), "the first cell must be the chapter title"
    assert "What you will learn" in header, "the header must say what the reader will learn"
    assert re.search(r"\*Time:\* about \d+ s on a 2-core CPU", header), "the header must say how long the chapter takes"


BUILD_TIMES = ROOT / "benchmarks" / "results" / "cpu_build_times.json"


def stated_time(header: str) -> int:
    return int(re.search(r"\*Time:\* about (\d+) s on a 2-core CPU", header).group(1))


def time_line_matches(stated: float, measured: float) -> bool:
    """'about N s' is N rounded to the nearest 5 s (or second, under 20 s) of the measured time."""
    return abs(stated - measured) <= max(2.5, 0.1 * measured)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_time_line_quotes_the_stored_build_time(path):
    """A chapter's *Time:* line is the time of its stored measurement (a quiet CI build,
    benchmarks/course_time.py --from-build-log), and names that file: it cannot drift."""
    header = source(cells(path)[0])
    measured = {r["notebook"]: r["seconds"] for r in json.loads(BUILD_TIMES.read_text(encoding="utf-8"))}
    assert path.name in measured, f"{path.name} is not in {BUILD_TIMES.name}: measure it"
    assert time_line_matches(stated_time(header), measured[path.name]), (
        f"{path.name}: the *Time:* line says about {stated_time(header)} s; {BUILD_TIMES.name} has "
        f"{measured[path.name]:.1f} s")
    assert "cpu_build_times.md" in header, "the *Time:* line must name benchmarks/results/cpu_build_times.md"


def test_time_line_check_fails_on_a_stale_time():
    assert time_line_matches(50, 48.9) and time_line_matches(7, 6.8) and time_line_matches(85, 82.6)
    assert not time_line_matches(25, 48.9) and not time_line_matches(15, 23.0)


def test_build_times_are_read_from_a_build_log(tmp_path):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import course_time

    log = tmp_path / "build.log"
    log.write_text("/x/notebooks/02_b.ipynb: Executed notebook in 36.04 seconds [mystnb]\n"
                   "/x/notebooks/01_a.ipynb: Executed notebook in 48.89 seconds [mystnb]\n"
                   "/x/notebooks/01_a.ipynb: Executed notebook in 9.00 seconds [mystnb]\n", encoding="utf-8")
    rows = course_time.from_build_log(log)
    assert [(r["notebook"], r["seconds"]) for r in rows] == [("01_a.ipynb", 48.89), ("02_b.ipynb", 36.04)]


def long_code_lines(path, limit=CODE_COLUMNS):
    """'<notebook> cell <i> line <n> (<length>): <line>' for every code line over `limit`."""
    nb = nbformat.read(path, as_version=4)
    return [
        f"{path.name} cell {i} line {n} ({len(line)} > {limit}): {line}"
        for i, cell in enumerate(nb.cells)
        if cell.cell_type == "code"
        for n, line in enumerate(cell.source.splitlines(), start=1)
        if len(line) > limit
    ]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_code_fits_the_books_column(path):
    too_long = long_code_lines(path)
    assert not too_long, f"{len(too_long)} code line(s) over {CODE_COLUMNS} characters:\n" + "\n".join(too_long)


def test_long_code_lines_finds_a_line_of_89(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell("m" * 200),  # prose is free-form
        nbformat.v4.new_code_cell("x = 1\n" + "y" * 88),
        nbformat.v4.new_code_cell("import os\n\n# " + "z" * 87),
    ]
    path = tmp_path / "long.ipynb"
    nbformat.write(nb, path)
    assert long_code_lines(path) == [f"long.ipynb cell 2 line 3 (89 > 88): # {'z' * 87}"]


def test_ci_runs_exactly_the_readme_commands():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = readme.split("<!-- ci:commands", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    commands = [line for line in block.strip().splitlines() if line.strip()]
    assert len(commands) == 2
    assert commands[0].startswith("pip install -r requirements.txt") and "jupyter-book build" in commands[0]
    assert "tools/build_book.py --language zh_CN" in commands[0], "the first command builds the Chinese edition too"
    assert "pytest" in commands[1] and "tests" in commands[1] and "notebooks" in commands[1]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "ci:commands" in ci, ".ci/run must read its commands from the README"
    extracted = subprocess.run(
        ["awk", "/<!-- ci:commands/{f=1; next} f && /^```bash/{b=1; next} b && /^```/{exit} b", "README.md"],
        cwd=ROOT, capture_output=True, text=True, check=True, encoding="utf-8").stdout.splitlines()
    assert extracted == commands


def ci_python_installs(script):
    """The lines of a shell script that install Python packages (comments left out)."""
    installs = []
    for line in script.splitlines():
        code = line.split("#", 1)[0]
        if re.search(r"\b(pip3?|uv|conda|mamba|easy_install|pipx)\b.*\binstall\b", code):
            installs.append(code.strip())
    return installs


def test_ci_installs_no_python_package_the_readme_does_not():
    """.ci/run may install PyTorch's CPU wheel (the README's note) and nothing else of Python:
    every other package comes from the README's commands, as on a newcomer's machine."""
    installs = ci_python_installs((ROOT / ".ci" / "run").read_text(encoding="utf-8"))
    extra = [line for line in installs if not re.fullmatch(r"python -m pip install [-\w ]*torch==[\d.]+", line)]
    assert not extra, f".ci/run installs Python packages the README's commands do not: {extra}"
    assert "PyTorch" in (ROOT / "README.md").read_text(encoding="utf-8"), "the README's note names the PyTorch install"


def test_ci_install_check_finds_a_hidden_install():
    script = "python -m pip install --quiet torch==2.13.0\n# pip install ignored\npip install -e '.[teach]'\n"
    assert ci_python_installs(script) == ["python -m pip install --quiet torch==2.13.0", "pip install -e '.[teach]'"]
