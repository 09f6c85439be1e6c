"""Shared fixtures: seeding, the GPU marker, and headless Chromium for the browser tests."""

import shutil

import pytest
import torch

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
CHROMEDRIVER = shutil.which("chromedriver")


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def pytest_collection_modifyitems(config, items):
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
    ``BROWSER_PAGE_LOAD_TIMEOUT``."""
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
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=driver_path))
    driver.set_page_load_timeout(getattr(request.module, "BROWSER_PAGE_LOAD_TIMEOUT", 60))
    yield driver
    driver.quit()
