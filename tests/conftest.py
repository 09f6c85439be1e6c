"""Shared fixtures: seeding, the GPU marker, headless Chromium for the browser tests, one
autograde run per grading seed for the modules that grade a class under fixed seeds
(``seeded_grades``, tests/seeded_class.py), and the skips for the optional tools (each reason
names what to install).

On a bare machine the README's two commands pass with these tests skipped; the README lists
the tools in one line: ``apt-get install chromium chromium-driver bubblewrap graphviz
fonts-noto-cjk`` (Debian).
"""

import shutil
import sys

import pytest
import torch
from book_executions import replace_nbval_items
from seeded_class import autograde as _autograde_seeded

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
CHROMEDRIVER = shutil.which("chromedriver")

# The grading sandbox is bubblewrap, which exists on Linux only.
if not sys.platform.startswith("linux"):
    _NO_BWRAP = f"the grading sandbox (bubblewrap) runs on Linux only, not on {sys.platform}"
elif shutil.which("bwrap") is None:
    _NO_BWRAP = "bubblewrap, the grading sandbox, is not installed (Debian: apt-get install bubblewrap)"
else:
    _NO_BWRAP = None
needs_bwrap = pytest.mark.skipif(_NO_BWRAP is not None, reason=_NO_BWRAP or "")
needs_dot = pytest.mark.skipif(shutil.which("dot") is None,
                               reason="Graphviz's dot is not installed (Debian: apt-get install graphviz)")
NOT_BUILT = "the book is not built (README, command 1: jupyter-book build . -W -n --keep-going)"
NO_CJK_FONT = "no CJK font is installed (Debian: apt-get install fonts-noto-cjk)"


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def pytest_collection_modifyitems(session, config, items):
    # nbval reuses the book build's run of a notebook where it is current (tests/book_executions.py)
    replace_nbval_items(session, config, items)
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU; none is available here")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def chromium():
    """Paths of Chromium and chromedriver; skips, with the reason, where either is missing."""
    if not CHROMIUM or not CHROMEDRIVER:
        pytest.skip("Chromium and chromedriver are not installed (Debian: apt-get install chromium chromium-driver)")
    return CHROMIUM, CHROMEDRIVER


@pytest.fixture(scope="module")
def browser(request, chromium, tmp_path_factory):
    """Headless Chromium driven by selenium, with the network closed: its host resolver maps
    every name but 127.0.0.1 to nothing, so a page that needs the internet fails. One per test
    module (tests/test_browser.py, tests/test_jupyterlab.py); a module sets its window with
    ``BROWSER_WINDOW = (width, height)`` and its page-load timeout in seconds with
    ``BROWSER_PAGE_LOAD_TIMEOUT``. ``driver.get_log("browser")`` returns the console's
    messages (errors, failed loads) since the last call."""
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install selenium)")
    binary, driver_path = chromium
    width, height = getattr(request.module, "BROWSER_WINDOW", (1280, 900))
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
                 f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}",
                 "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1", f"--window-size={width},{height}"]:
        options.add_argument(flag)
    # the console's messages and failed loads, read with driver.get_log("browser")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=driver_path))
    driver.set_page_load_timeout(getattr(request.module, "BROWSER_PAGE_LOAD_TIMEOUT", 60))
    yield driver
    driver.quit()


@pytest.fixture(scope="session")
def seeded_grades(tmp_path_factory):
    """``rows(seed)``: the CSV rows of the one autograde run of grading seed ``seed`` that
    grades every student the test modules enrolled for it (tests/seeded_class.py), run at
    its first call."""
    graded = {}

    def rows(seed: int) -> list[dict]:
        if seed not in graded:
            graded[seed] = _autograde_seeded(tmp_path_factory.mktemp(f"seed{seed}"), seed)
        return graded[seed]

    return rows
