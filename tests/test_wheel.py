"""What a Colab user gets: the companion built as a wheel, installed into a fresh virtual
environment with only its runtime dependencies (no editable install, no repository on the
path), running a chapter notebook there."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "05_multihead_attention.ipynb"


def run(cmd, **kw):
    result = subprocess.run(cmd, capture_output=True, text=True, **kw)
    assert result.returncode == 0, f"{' '.join(map(str, cmd))} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result.stdout


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
    # The CPU build of torch first, as Colab already has a torch; then the wheel with its
    # runtime dependencies, and the kernel machinery Colab provides.
    run([*pip, f"torch=={__import__('torch').__version__.split('+')[0]}"], env=env, cwd=tmp_path)
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
