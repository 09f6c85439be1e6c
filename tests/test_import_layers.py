"""The companion's modules import one another in one direction only.

``models.blocks`` builds the layers and imports ``models.torch_weights`` to copy torch's
weights into them; ``models.torch_weights`` knows the layers by their attributes and imports
nothing of the course, not even for type hints. Each module imports alone in a fresh
interpreter, and ``companion.diagrams`` keeps its public names after becoming a package.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "companion" / "models"


def imported_modules(path: Path) -> set[str]:
    """Every module a file imports, anywhere in it (top level, functions, ``if TYPE_CHECKING``),
    relative names kept with their dots (``.blocks``, ``..multihead``)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            names.add(base)
            if not node.module:  # from . import blocks
                names.update(base + a.name for a in node.names)
    return names


def test_torch_weights_imports_nothing_of_blocks():
    theirs = imported_modules(MODELS / "torch_weights.py")
    assert not {n for n in theirs if n.endswith("blocks") or n.startswith(".")}, theirs
    assert ".torch_weights" in imported_modules(MODELS / "blocks.py")  # the one direction


@pytest.mark.parametrize("module", ["companion.models.blocks", "companion.models.torch_weights",
                                    "companion.diagrams", "companion.diagrams.recording",
                                    "companion.diagrams.drawing", "companion.diagrams.models",
                                    "companion.diagrams.torchview"])
def test_each_module_imports_alone_in_a_fresh_interpreter(module):
    run = subprocess.run([sys.executable, "-c", f"import {module}"], cwd=ROOT, capture_output=True, text=True,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "MPLBACKEND": "Agg"}, timeout=120)
    assert run.returncode == 0, run.stderr


def test_torch_weights_loads_from_its_file_without_the_course():
    """Loaded by path, outside the package: it needs no other module of the companion."""
    code = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('torch_weights_alone', {str(MODELS / 'torch_weights.py')!r})\n"
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        "assert callable(m.load_encoder_layer) and callable(m.load_decoder_layer)\n"
        "assert not [n for n in sys.modules if n.startswith('companion')], sorted(sys.modules)\n"
    )
    run = subprocess.run([sys.executable, "-c", code], cwd="/", capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr


def test_diagrams_keeps_its_public_names():
    from companion import diagrams
    from companion.diagrams import drawing, models, recording, torchview

    for name in diagrams.__all__:
        assert hasattr(diagrams, name), name
    assert diagrams.record is recording.record and diagrams.Recording is recording.Recording
    assert diagrams.Diagram is drawing.Diagram and diagrams.Block is drawing.Block
    assert diagrams.gpt_diagram is models.gpt_diagram and diagrams.has_dot is torchview.has_dot
    assert "matplotlib" not in " ".join(imported_modules(Path(recording.__file__)))  # recording draws nothing


def test_the_package_lists_every_module():
    """``companion/__init__.py`` imports every module, names it in ``__all__`` and in its
    docstring's list (``distributed`` is imported on its own, as the docstring says)."""
    import companion

    modules = {p.stem for p in (ROOT / "companion").glob("*.py") if not p.stem.startswith("_")}
    modules |= {p.parent.name for p in (ROOT / "companion").glob("*/__init__.py")}
    assert modules - set(companion.__all__) == {"distributed"}
    for name in modules:
        assert f":mod:`companion.{name}`" in companion.__doc__, name
        if name != "distributed":
            assert getattr(companion, name).__name__ == f"companion.{name}"
