"""What a Colab user gets: the companion built as a wheel, installed into a fresh virtual
environment with only its runtime dependencies (no editable install, no repository on the
path), running a chapter notebook there.

Colab already has a torch, so the venv starts with one: this interpreter's torch and the
packages it requires, linked into a folder on the venv's path (a ``.pth`` file), not
installed by pip. pip sees it as installed either way (asserted), and installing the CPU
wheel (about 750 MB unpacked) was the test's slowest step: 98 s against 10 s for the links,
at load 10 on a 2-core machine (2026-12-07, issue #42).
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "05_multihead_attention.ipynb"


def run(cmd, **kw):
    result = subprocess.run(cmd, capture_output=True, text=True, **kw, encoding="utf-8")
    assert result.returncode == 0, f"{' '.join(map(str, cmd))} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result.stdout


def preinstalled(name: str) -> set[str]:
    """``name`` and every distribution it requires (no extras), as installed here."""
    seen, todo = set(), [name]
    while todo:
        key = re.sub(r"[-_.]+", "-", todo.pop()).lower()
        if key in seen:
            continue
        try:
            dist = importlib.metadata.distribution(key)
        except importlib.metadata.PackageNotFoundError:
            continue
        seen.add(key)
        for req in dist.requires or []:
            spec, _, marker = req.partition(";")
            if "extra" not in marker:
                todo.append(re.match(r"[A-Za-z0-9._-]+", spec.strip()).group(0))
    return seen


def link_preinstalled(name: str, folder: Path, venv_python: Path) -> None:
    """Make ``name`` (and what it requires) importable, and seen by pip as installed, in the
    venv of ``venv_python``: its top-level modules and ``.dist-info`` linked into ``folder``,
    which a ``.pth`` file puts on the venv's path."""
    folder.mkdir()
    for key in preinstalled(name):
        dist = importlib.metadata.distribution(key)
        for top in {Path(str(f)).parts[0] for f in dist.files or []}:
            source = Path(dist.locate_file(top))
            if top.startswith("..") or top == "__pycache__" or top.endswith(".pth") or not source.exists():
                continue
            if not (folder / top).exists():
                (folder / top).symlink_to(source)
    site = run([venv_python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"]).strip()
    (Path(site) / "preinstalled.pth").write_text(f"{folder}\n", encoding="utf-8")


@pytest.mark.slow
def test_wheel_in_a_fresh_venv_runs_a_notebook(tmp_path):
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", tmp_path / "dist", ROOT])
    wheels = list((tmp_path / "dist").glob("*.whl"))
    assert len(wheels) == 1, wheels
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", venv])
    py = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}}
    pip = [py, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    # This torch first, as Colab already has a torch; then the wheel with its runtime
    # dependencies, and the kernel machinery Colab provides.
    link_preinstalled("torch", tmp_path / "preinstalled", py)
    torch_seen = run([py, "-m", "pip", "show", "torch"], env=env, cwd=tmp_path)
    assert f"Version: {__import__('torch').__version__}" in torch_seen, torch_seen
    run([*pip, wheels[0], "ipykernel", "nbclient", "nbformat"], env=env, cwd=tmp_path)
    where = run([py, "-c", "import companion; print(companion.__file__)"], env=env, cwd=tmp_path).strip()
    shipped = run([py, "-c", "from companion.data.digits import load_digits_tensors as f; print(f()[0].shape)"],
                  env=env, cwd=tmp_path)
    assert "torch.Size([1797, 1, 8, 8])" in shipped, "the digits travel inside the wheel"
    text = run([py, "-c", "from companion.data.text import load_shakespeare as f; print(len(f()))"],
               env=env, cwd=tmp_path)
    assert "1115394" in text, "tiny Shakespeare travels inside the wheel"
    assert where.startswith(str(venv)), f"companion was imported from {where}, not from the fresh venv"
    script = (
        "import nbformat, nbclient\n"
        f"nb = nbformat.read({str(NOTEBOOK)!r}, 4)\n"
        "nb.cells.append(nbformat.v4.new_code_cell('import companion, sys; print(companion.__file__, sys.executable)'))\n"
        "nbclient.NotebookClient(nb, timeout=600, kernel_name='python3').execute()\n"
        "print('kernel saw:', nb.cells[-1].outputs[0]['text'])\n"
    )
    out = run([py, "-c", script], env=env, cwd=tmp_path)
    seen = out.split("kernel saw:", 1)[1].split()
    assert seen[0].startswith(str(venv)) and seen[1].startswith(str(venv)), f"the kernel did not run in the fresh venv: {seen}"
