"""A chapter as a student sees it in JupyterLab, started as the README says (`jupyter lab
notebooks/`), in headless Chromium with the network closed (as tests/test_browser.py).

Checks that an exercise's title and math render, that its solution is folded behind a
visible cue and opens when clicked, and that the Exercises' link leads to the published book.
Screenshots go to ``_build/screenshots/jupyterlab_<chapter>_exercise_folded.png`` and
``..._unfolded.png``. Skipped, with the reason, without JupyterLab, Chromium, chromedriver or
selenium.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCREENSHOTS = ROOT / "_build" / "screenshots"
CHAPTER = "04_masking"

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install selenium)")
pytest.importorskip("jupyterlab", reason="JupyterLab is not installed (pip install -r requirements.txt)")
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

# the `browser` fixture (tests/conftest.py): Chromium with the network closed, in this window
BROWSER_WINDOW = (1280, 1000)
BROWSER_PAGE_LOAD_TIMEOUT = 120
pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab(chromium, tmp_path_factory):
    """`jupyter lab notebooks/` from the repository's root, with its own settings and no token
    (only where Chromium can open it: the `chromium` fixture skips otherwise)."""
    home = tmp_path_factory.mktemp("jupyter")
    settings = home / "settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)  # no "news?" toast over the screenshots
    (settings / "notification.jupyterlab-settings").write_text(json.dumps({"fetchNews": "false",
                                                                            "checkForUpdates": False}), encoding="utf-8")
    docmanager = home / "settings" / "@jupyterlab" / "docmanager-extension"
    docmanager.mkdir(parents=True)  # unfolding a cell edits its metadata: never save the chapter
    (docmanager / "plugin.jupyterlab-settings").write_text(json.dumps({"autosave": False}), encoding="utf-8")
    notebook = home / "settings" / "@jupyterlab" / "notebook-extension"
    notebook.mkdir(parents=True)  # render every cell, not only those in view: the tests read the page
    (notebook / "tracker.jupyterlab-settings").write_text(json.dumps({"windowingMode": "none"}), encoding="utf-8")
    before = {p: p.read_bytes() for p in (ROOT / "notebooks").glob("*.ipynb")}
    port = free_port()
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(home / "config"), "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    cmd = [sys.executable, "-m", "jupyterlab", "notebooks/", "--no-browser", f"--port={port}", "--ip=127.0.0.1",
           "--IdentityProvider.token=", "--ServerApp.password=", f"--LabApp.user_settings_dir={home / 'settings'}",
           f"--LabApp.workspaces_dir={home / 'workspaces'}", "--LabApp.news_url=None"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")  # containers and CI often run as root
    log = (home / "lab.log").open("w", encoding="utf-8")
    server = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen(f"{url}/api/status", timeout=2)
                break
            except OSError:
                if server.poll() is not None:
                    pytest.fail(f"jupyter lab exited: {(home / 'lab.log').read_text(encoding='utf-8')[-2000:]}")
                time.sleep(0.5)
        else:
            pytest.fail(f"jupyter lab did not start: {(home / 'lab.log').read_text(encoding='utf-8')[-2000:]}")
        yield url
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()
        changed = [p.name for p, data in before.items() if p.read_bytes() != data]
        assert not changed, f"the JupyterLab session changed {changed}"


# The cells of the first exercise, found by what they show; JS returns plain data.
FIND = """
const cells = [...document.querySelectorAll('.jp-Notebook .jp-Cell')];
const i = cells.findIndex(c => c.classList.contains('jp-MarkdownCell')
    && [...c.querySelectorAll('.jp-RenderedMarkdown strong')].some(s => s.textContent.startsWith('Exercise 1:')));
if (i < 0) return null;
const [exercise, cue, solution] = cells.slice(i, i + 3);
const input = solution.querySelector('.jp-Cell-inputWrapper');
return {
  title: [...exercise.querySelectorAll('strong')].map(s => s.textContent).find(t => t.startsWith('Exercise 1:')),
  math: exercise.querySelectorAll('mjx-container, .MathJax, .katex').length,
  raw: exercise.querySelector('.jp-RenderedMarkdown').innerText,
  cue: cue.querySelector('.jp-RenderedMarkdown') ? cue.querySelector('.jp-RenderedMarkdown').innerText : '',
  solutionCode: solution.classList.contains('jp-CodeCell'),
  placeholder: !!solution.querySelector('.jp-InputPlaceholder, .jp-Placeholder'),
  codeShown: [...solution.querySelectorAll('.cm-content')].some(e => e.offsetParent !== null && e.innerText.trim()),
  code: [...solution.querySelectorAll('.cm-content')].map(e => e.innerText).join('\\n'),
  height: input ? input.getBoundingClientRect().height : -1,
};
"""


def exercise_state(browser):
    return browser.execute_script(FIND)


def open_first_exercise(browser, url):
    """Open a notebook page, scroll to exercise 1, wait for it to render; its state."""
    browser.get(url)
    WebDriverWait(browser, 120).until(lambda d: d.execute_script(
        "return document.querySelectorAll('.jp-Notebook .jp-Cell').length") > 20)
    # bring the Exercises section into view (JupyterLab renders cells as they come into view)
    heading = None
    for _ in range(60):
        heading = browser.execute_script(
            "return [...document.querySelectorAll('.jp-RenderedMarkdown h2')].find(h => h.textContent.startsWith('Exercises'))")
        if heading:
            break
        browser.execute_script("document.querySelector('.jp-WindowedPanel-outer, .jp-Notebook').scrollBy(0, 800)")
        time.sleep(0.3)
    assert heading, "the Exercises heading does not render"
    state = None
    for _ in range(40):
        state = exercise_state(browser)
        if state and state["math"] and state["cue"]:
            break
        browser.execute_script("""
            const t = [...document.querySelectorAll('.jp-RenderedMarkdown strong')]
                .find(s => s.textContent.startsWith('Exercise 1:'));
            if (t) t.scrollIntoView({block: 'start'});
            else document.querySelector('.jp-WindowedPanel-outer, .jp-Notebook').scrollBy(0, 200);""")
        time.sleep(0.5)
    return state


def test_an_exercise_in_jupyterlab(lab, browser):
    state = open_first_exercise(browser, f"{lab}/lab/tree/{CHAPTER}.ipynb")
    assert state, "no rendered 'Exercise 1:' title in the notebook"
    assert state["title"] == "Exercise 1: A causal mask by hand"
    for raw in ["{exercise}", ":label:", "{solution", "```"]:
        assert raw not in state["raw"], f"raw MyST {raw!r} shows in JupyterLab"
    assert state["math"] > 0, "the exercise's math is not typeset"
    assert "Solution" in state["cue"] and "folded" in state["cue"], f"no visible cue: {state['cue']!r}"
    assert state["solutionCode"] and state["placeholder"] and not state["codeShown"], \
        f"the solution is not folded: {state}"
    assert "i[None, :] <= i[:, None]" not in browser.execute_script("return document.body.innerText")

    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    browser.execute_script("""
        const t = [...document.querySelectorAll('.jp-RenderedMarkdown strong')].find(s => s.textContent.startsWith('Exercise 1:'));
        t.scrollIntoView({block: 'start'});""")
    time.sleep(1)
    browser.save_screenshot(str(SCREENSHOTS / f"jupyterlab_{CHAPTER}_exercise_folded.png"))

    # the cue's ⋯: a click opens the solution
    click = """
        const cells = [...document.querySelectorAll('.jp-Notebook .jp-Cell')];
        const i = cells.findIndex(c => [...c.querySelectorAll('.jp-RenderedMarkdown strong')]
            .some(s => s.textContent.startsWith('Exercise 1:')));
        const placeholder = i >= 0 && cells[i + 2] && cells[i + 2].querySelector('.jp-InputPlaceholder, .jp-Placeholder');
        if (!placeholder) return false;
        placeholder.click();
        return true;"""
    WebDriverWait(browser, 30).until(lambda d: d.execute_script(click))
    WebDriverWait(browser, 30).until(lambda d: (exercise_state(d) or {}).get("codeShown"))
    state = exercise_state(browser)
    assert "i[None, :] <= i[:, None]" in state["code"], state["code"]
    time.sleep(1)
    browser.save_screenshot(str(SCREENSHOTS / f"jupyterlab_{CHAPTER}_exercise_unfolded.png"))


def test_the_written_answer_is_folded_too(lab, browser):
    """The experiment's written answer (a Markdown cell) is folded in JupyterLab."""
    text = browser.execute_script("return document.querySelector('.jp-Notebook').innerText")
    assert "Exercise 5: Experiment" in text
    assert "it does not subtract" not in text, "the written answer shows unfolded"


def test_the_exercises_link_the_published_book(lab, browser):
    hrefs = browser.execute_script("return [...document.querySelectorAll('.jp-RenderedMarkdown a')].map(a => a.href)")
    teaching = [h for h in hrefs if h.endswith("/book/teaching.html")]
    assert teaching and all(h.startswith("https://") for h in teaching), hrefs
    assert not [h for h in hrefs if "/book/teaching.md" in h], "a link to ../book/ that JupyterLab cannot reach"


def test_an_exercise_in_notebook_7(lab, browser):
    """The same chapter in Notebook 7's interface (same server): title rendered, solution folded."""
    state = open_first_exercise(browser, f"{lab}/notebooks/{CHAPTER}.ipynb")
    assert state and state["title"] == "Exercise 1: A causal mask by hand" and state["math"] > 0
    assert "Solution" in state["cue"] and state["placeholder"] and not state["codeShown"], state
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(SCREENSHOTS / f"notebook7_{CHAPTER}_exercise_folded.png"))


# --- companion.explorer after Run All (JupyterLab 4 and Notebook 7) ----------------------------

EXPLORER_NOTEBOOK = "_explorer_check.ipynb"  # written into notebooks/ for the test, then removed
EXPLORER_CODE = """\
import torch

from companion.explorer import head_view, model_view

g = torch.Generator().manual_seed(0)
w = [torch.softmax(torch.randn(1, 2, 5, 5, generator=g), -1) for _ in range(2)]
tokens = ["the", "cat", "sat", "on", "it"]
display(head_view(w, tokens, query=4))
model_view(w, tokens)"""


@pytest.fixture
def explorer_notebook():
    import nbformat

    path = ROOT / "notebooks" / EXPLORER_NOTEBOOK
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(EXPLORER_CODE)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)
    yield path
    path.unlink()


def run_all(browser):
    """Run > Run All Cells from the menu bar (the same in JupyterLab and Notebook 7)."""
    WebDriverWait(browser, 120).until(lambda d: d.execute_script(
        "return [...document.querySelectorAll('.lm-MenuBar-itemLabel')].some(e => e.textContent === 'Run')"))
    WebDriverWait(browser, 120).until(lambda d: d.execute_script(
        "return !!document.querySelector('.jp-Notebook .jp-Cell')"))
    time.sleep(2)  # the kernel starts
    menu = browser.execute_script(
        "return [...document.querySelectorAll('.lm-MenuBar-itemLabel')].find(e => e.textContent === 'Run')")
    menu.click()
    item = WebDriverWait(browser, 30).until(lambda d: d.execute_script(
        "return [...document.querySelectorAll('.lm-Menu-itemLabel')].find(e => e.textContent === 'Run All Cells')"))
    item.click()


@pytest.mark.parametrize("interface", ["lab/tree", "notebooks"], ids=["jupyterlab", "notebook7"])
def test_explorer_after_run_all(lab, browser, explorer_notebook, interface):
    """Two views in one output area render after Run All, with no require.js and no kernel
    call afterwards: a click on a query token draws its weights; a head switched off loses
    its lines."""
    browser.get(f"{lab}/{interface}/{EXPLORER_NOTEBOOK}")
    run_all(browser)
    WebDriverWait(browser, 180).until(lambda d: d.execute_script(
        "return document.querySelectorAll('.jp-OutputArea .ax-root[data-rendered]').length") == 2)
    roots = browser.find_elements("css selector", ".jp-OutputArea .ax-root")
    assert len({r.get_attribute("id") for r in roots}) == 2
    head = roots[0]
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'});", head)
    head.find_element("css selector", ".ax-query[data-index='1']").click()
    import torch

    g = torch.Generator().manual_seed(0)
    w = [torch.softmax(torch.randn(1, 2, 5, 5, generator=g), -1) for _ in range(2)]
    expected = w[-1][0, :, 1]  # (H, K): the last layer, query 1
    lines = browser.execute_script(
        "return [...arguments[0].querySelectorAll('line.ax-line')].map(l => [+l.dataset.head, +l.dataset.key, +l.dataset.weight])",
        head)
    assert len(lines) == 10
    assert all(abs(v - float(expected[h, k])) <= 0.0005 + 1e-6 for h, k, v in lines), lines
    head.find_element("css selector", ".ax-head-toggle[data-head='1']").click()
    heads = browser.execute_script(
        "return [...arguments[0].querySelectorAll('line.ax-line')].map(l => +l.dataset.head)", head)
    assert heads == [0] * 5
    grid = roots[1]
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'});", grid)
    grid.find_element("css selector", ".ax-thumb[data-layer='0'][data-head='1']").click()
    assert grid.find_element("css selector", ".ax-layer").get_attribute("value") == "0"
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    time.sleep(0.5)
    name = "jupyterlab" if interface == "lab/tree" else "notebook7"
    browser.save_screenshot(str(SCREENSHOTS / f"{name}_explorer.png"))
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE" and "ax-" in e["message"]]
    assert not errors, errors
