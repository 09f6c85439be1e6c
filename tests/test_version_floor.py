"""The torch floor: one number in requirements.txt, pyproject.toml and the companion's warning."""

import re
import subprocess
import sys
from pathlib import Path

import companion

ROOT = Path(__file__).resolve().parents[1]


def test_floor_is_the_same_everywhere():
    req = re.search(r"^torch>=([\d.]+)", (ROOT / "requirements.txt").read_text(), re.M).group(1)
    pyproject = re.search(r'"torch>=([\d.]+)"', (ROOT / "pyproject.toml").read_text()).group(1)
    assert req == pyproject == companion.MIN_TORCH


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
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert "needs torch>=2.5, found 2.4.1" in out


def test_current_torch_does_not_warn():
    code = "import warnings\nwarnings.simplefilter('error', RuntimeWarning)\nimport companion\n"
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)
