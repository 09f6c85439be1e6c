"""The torch floor: one number in pyproject.toml and the companion's warning; requirements.txt
repeats no version range (it installs the package with its extras)."""

import re
import subprocess
import sys
from pathlib import Path

import companion

ROOT = Path(__file__).resolve().parents[1]


def test_floor_is_the_same_everywhere():
    pyproject = re.search(r'"torch>=([\d.]+)"', (ROOT / "pyproject.toml").read_text(encoding="utf-8")).group(1)
    assert pyproject == companion.MIN_TORCH
    said = set(re.findall(r"torch\W*>=\s*([\d.]+)", (ROOT / "requirements.txt").read_text(encoding="utf-8")))
    assert said <= {pyproject}, f"requirements.txt names torch >= {said}, pyproject.toml {pyproject}"


def test_requirements_repeat_nothing_from_pyproject():
    lines = [line.split("#")[0].strip() for line in (ROOT / "requirements.txt").read_text(encoding="utf-8").splitlines()]
    assert [line for line in lines if line] == ['-e ".[book,notebooks,test,teach]"']


def test_older_torch_warns_at_import():
    code = (
        "import warnings, torch\n"
        "from torch.torch_version import TorchVersion\n"
        "torch.__version__ = TorchVersion('2.4.1')\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    import companion\n"
        "print([str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True, encoding="utf-8").stdout
    assert "needs torch>=2.6, found 2.4.1" in out


def test_current_torch_does_not_warn():
    code = "import warnings\nwarnings.simplefilter('error', RuntimeWarning)\nimport companion\n"
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)
