"""The built book, as a reader's browser shows it, with the network closed.

Serves ``_build/html`` on 127.0.0.1 and opens pages in headless Chromium whose host
resolver maps every name but 127.0.0.1 to nothing, so a page that needs the internet to
render its math or figures fails here. Every chapter and book page of both editions is loaded
once more to check that it asks the internet for nothing and logs no console error (a failed
load, an uncaught exception, the theme's complaints). Skipped, with the reason, when the book is not
built or Chromium/chromedriver/selenium are missing. Screenshots of the landing page, one
chapter, the architecture diagrams of chapters 5 and 7, chapter 9's caption attention and the
Chinese edition's landing page and chapter 6 go to ``_build/screenshots/``.
"""

from __future__ import annotations

import functools
import http.server
import json
import threading
from pathlib import Path

import pytest
from conftest import NOT_BUILT

ROOT = Path(__file__).resolve().parents[1]
HTML = ROOT / "_build" / "html"
SCREENSHOTS = ROOT / "_build" / "screenshots"
CHAPTERS = sorted((ROOT / "notebooks").glob("*.ipynb"))

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install selenium)")
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

BROWSER_WINDOW = (1280, 900)  # the `browser` fixture (tests/conftest.py): Chromium, network closed
BROWSER_PAGE_LOAD_TIMEOUT = 60


def has_code(notebook: Path) -> bool:
    return any(c["cell_type"] == "code" for c in json.loads(notebook.read_text(encoding="utf-8"))["cells"])


def exercise_count(notebook: Path) -> int:
    """Exercises of a chapter (plain-Markdown cells labelled in their metadata, which the book
    turns into sphinx-exercise's directives; see book/_ext/exercise_markdown.py)."""
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    return sum(1 for c in cells if c["cell_type"] == "markdown" and "label" in c["metadata"].get("exercise", {}))


@pytest.fixture(scope="module")
def server():
    if not (HTML / "index.html").exists():
        pytest.skip(NOT_BUILT)

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(HTML)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def open_page(browser, url):
    browser.get(url)
    WebDriverWait(browser, 30).until(lambda d: d.execute_script("return document.readyState") == "complete")


def wait_for_math(browser):
    """Wait until MathJax has typeset the page; return the number of typeset formulas."""
    WebDriverWait(browser, 30).until(
        lambda d: d.execute_script("return !!(window.MathJax && MathJax.startup && MathJax.startup.promise)"))
    browser.execute_async_script("const done = arguments[0]; MathJax.startup.promise.then(() => done(true));")
    return browser.execute_script("return document.querySelectorAll('mjx-container').length")


def body_text(browser):
    return browser.execute_script("return document.querySelector('article, main, body').innerText")


def test_landing_page_renders_math_offline(server, browser):
    open_page(browser, f"{server}/index.html")
    assert "Attention & Transformers" in browser.title
    assert wait_for_math(browser) > 0, "MathJax typeset nothing on the landing page"
    assert "$" not in body_text(browser), "raw TeX dollars left on the landing page"
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(SCREENSHOTS / "landing.png"))


@pytest.mark.parametrize("notebook", CHAPTERS, ids=lambda p: p.stem)
def test_chapter_page(server, browser, notebook):
    open_page(browser, f"{server}/notebooks/{notebook.stem}.html")
    text = body_text(browser)
    assert "Traceback (most recent call last)" not in text, "a Python traceback is shown on the page"
    assert not browser.find_elements("css selector", ".output.traceback, .output.error"), "an error output is shown"
    assert "$$" not in text, "raw display math ($$) left on the page"
    if not has_code(notebook):
        return  # a placeholder chapter: no figures yet
    assert wait_for_math(browser) > 0, "MathJax typeset nothing"
    images = browser.execute_script(
        "return [...document.querySelectorAll('.cell_output img')].map(i => [i.src, i.complete && i.naturalWidth > 0])")
    assert images, "the chapter shows no figure"
    broken = [src for src, ok in images if not ok]
    assert not broken, f"figures that did not load: {broken}"
    alts = browser.execute_script("return [...document.querySelectorAll('.cell_output img')].map(i => i.alt)")
    missing = [i for i, alt in enumerate(alts) if len(alt.strip()) < 15 or alt.endswith(".png")]
    assert not missing, f"figures {missing} have no alt text (cell metadata mystnb.image.alt)"
    colab = browser.find_elements("css selector", "a[href*='colab.research.google.com']")
    assert colab, "no Colab launch button"
    if notebook.stem.startswith("05"):
        browser.save_screenshot(str(SCREENSHOTS / f"{notebook.stem}.png"))
    n_exercises = exercise_count(notebook)
    if n_exercises:
        assert len(browser.find_elements("css selector", "div.exercise")) == n_exercises
        solutions = browser.find_elements("css selector", "div.solution.dropdown")
        assert len(solutions) >= n_exercises, "every exercise needs a solution dropdown"
        shown = [s.text for s in solutions]
        titles = [s.find_element("css selector", ".admonition-title").text for s in solutions]
        assert shown == titles and all(t.startswith("Solution") for t in titles), \
            f"solutions should be collapsed to their title, the page shows {shown}"
        collapsed = [len(t) for t in shown]
        button = solutions[0].find_element("css selector", "button.toggle-button, .admonition-title")
        browser.execute_script("arguments[0].scrollIntoView(); arguments[0].click();", button)
        WebDriverWait(browser, 10).until(lambda d: len(solutions[0].text) > collapsed[0] + 20)


# --- every page of both editions, with the network closed: no failed load, no console error ---

BOOK_PAGES = sorted(f"book/{p.stem}" for p in (ROOT / "book").glob("*.md"))
EDITIONS = {"en": "", "zh": "zh/"}


def console_errors(browser) -> list[str]:
    """The console's errors since the last call: uncaught exceptions, console.error, failed
    loads (Chromium logs each as SEVERE)."""
    return [e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE"]


def outside_requests(browser, origin: str) -> list[str]:
    """What the page asked for from another host (with the network closed, each one failed)."""
    return browser.execute_script(
        "return performance.getEntriesByType('resource').map(e => e.name)"
        ".filter(n => !n.startsWith(arguments[0]) && !n.startsWith('data:'))", origin)


@pytest.mark.parametrize("edition", sorted(EDITIONS))
@pytest.mark.parametrize("page", [f"notebooks/{p.stem}" for p in CHAPTERS] + BOOK_PAGES)
def test_page_loads_offline_without_errors(server, browser, edition, page):
    """Every chapter and book page, English and Chinese: nothing requested from the internet,
    no failed load and nothing on the console at error level (an uncaught exception, a
    script that failed to load, the theme's complaints)."""
    if edition == "zh" and not (HTML / "zh" / "index.html").exists():
        pytest.skip("the Chinese edition is not built (README, command 1: python tools/build_book.py --language zh_CN)")
    console_errors(browser)  # forget the previous page's messages
    open_page(browser, f"{server}/{EDITIONS[edition]}{page}.html")
    if browser.execute_script("return !!window.MathJax"):
        wait_for_math(browser)
    browser.execute_async_script("setTimeout(arguments[0], 500)")  # late scripts, late failures
    outside = outside_requests(browser, server)
    errors = console_errors(browser)
    assert not outside, f"the page asked the internet for {outside}"
    assert not errors, "console errors:\n" + "\n".join(errors)


# Chapters with an architecture diagram (companion.diagrams), found by the start of its alt text.
DIAGRAMS = {
    "01_rnn_captioning": "Architecture diagram of the image captioner",
    "02_seq2seq_attention": "Architecture diagram of the seq2seq model",
    "05_multihead_attention": "Diagram of multi-head attention",
    "07_transformer": "Architecture diagram of the encoder-decoder Transformer",
    "08_vit_vs_cnn": "Architecture diagram of the Vision Transformer",
    "10_language_model": "Architecture diagram of the GPT",
}
TORCHVIEW_NOTE = "`dot` program is not installed"


def find_figure(browser, alt_start):
    """[loaded, natural width, natural height] of the figure whose alt text starts so, or None."""
    return browser.execute_script("""
        const img = [...document.querySelectorAll('.cell_output img')].find(i => i.alt.startsWith(arguments[0]));
        if (!img) return null;
        img.scrollIntoView({block: 'center'});
        return [img.complete && img.naturalWidth > 0, img.naturalWidth, img.naturalHeight];""", alt_start)


@pytest.mark.parametrize("stem", sorted(DIAGRAMS))
def test_architecture_diagram_renders(server, browser, stem):
    """The chapter's architecture diagram is on its page, loaded and of a readable size; in
    chapter 5 torchview's graph too (or, where the book was built without Graphviz, its note)."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    open_page(browser, f"{server}/notebooks/{stem}.html")
    figure = find_figure(browser, DIAGRAMS[stem])
    assert figure, f"no figure whose alt text starts with {DIAGRAMS[stem]!r}"
    loaded, width, height = figure
    assert loaded and width >= 500 and height >= 400, f"the diagram did not render at a readable size: {figure}"
    if stem == "07_transformer":
        browser.save_screenshot(str(SCREENSHOTS / f"{stem}_diagram.png"))
    if stem == "05_multihead_attention":
        graph = find_figure(browser, "torchview's graph")
        if graph is None:
            assert TORCHVIEW_NOTE in body_text(browser), "neither torchview's graph nor the note is on the page"
        else:
            assert graph[0] and graph[2] > 400, f"torchview's graph did not render: {graph}"
            browser.save_screenshot(str(SCREENSHOTS / f"{stem}_torchview.png"))


def test_caption_attention_figure_renders(server, browser):
    """Chapter 9's figure of the cross-attention over the image while each word is written."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    open_page(browser, f"{server}/notebooks/09_capstone_captioning.html")
    figure = find_figure(browser, "Two rows of panels, one per generated word")
    assert figure, "no caption cross-attention figure on chapter 9's page"
    loaded, width, height = figure
    assert loaded and width >= 800 and height >= 200, f"the figure did not render at a readable size: {figure}"
    browser.save_screenshot(str(SCREENSHOTS / "09_capstone_caption_attention.png"))


def test_search_page_finds_attention(server, browser):
    open_page(browser, f"{server}/search.html?q=softmax")
    WebDriverWait(browser, 30).until(
        lambda d: d.execute_script("return document.querySelectorAll('#search-results li, ul.search li').length") > 0)


def test_api_page_documents_the_companion(server, browser):
    open_page(browser, f"{server}/book/api.html")
    names = browser.execute_script("return [...document.querySelectorAll('dt.sig')].map(e => e.id)")
    for name in ["companion.attention.attention_with_weights", "companion.masks.causal_mask",
                 "companion.multihead.MultiHeadAttention", "companion.positional.sinusoidal_encoding"]:
        assert name in names, f"{name} is missing from the API page"


# --- the Chinese edition (_build/html/zh, tools/build_book.py) --------------------------------


def cjk_count(text: str) -> int:
    return sum(1 for ch in text if "\u4e00" <= ch <= "\u9fff")


def click_language_switch(browser):
    link = browser.find_element("css selector", "a.language-switch")
    browser.execute_script("arguments[0].scrollIntoView(); arguments[0].click();", link)
    WebDriverWait(browser, 30).until(lambda d: d.execute_script("return document.readyState") == "complete")


def test_chinese_landing_page(server, browser):
    if not (HTML / "zh" / "index.html").exists():
        pytest.skip("the Chinese edition is not built (README, command 1: python tools/build_book.py --language zh_CN)")
    open_page(browser, f"{server}/zh/index.html")  # redirects to the landing page
    WebDriverWait(browser, 30).until(lambda d: d.current_url.endswith("/zh/book/intro.html"))
    assert "注意力与 Transformer" in browser.title
    text = body_text(browser)
    assert cjk_count(text) > 300, "the Chinese landing page has little Chinese text"
    assert wait_for_math(browser) > 0, "MathJax typeset nothing on the Chinese landing page"
    assert "$" not in text, "raw TeX dollars left on the Chinese landing page"
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(SCREENSHOTS / "zh_landing.png"))
    click_language_switch(browser)
    assert browser.current_url == f"{server}/book/intro.html"
    assert "Attention & Transformers" in browser.title


def test_chinese_chapter_and_the_switch_both_ways(server, browser):
    """Chapter 6 in Chinese: Chinese prose, typeset math, every figure loaded (the verse
    figure's characters among them); the switch leads to the same chapter in English and back."""
    if not (HTML / "zh" / "index.html").exists():
        pytest.skip("the Chinese edition is not built (README, command 1: python tools/build_book.py --language zh_CN)")
    page = "notebooks/06_positional_encoding.html"
    open_page(browser, f"{server}/zh/{page}")
    text = body_text(browser)
    assert cjk_count(text) > 2000, f"only {cjk_count(text)} Chinese characters on the Chinese chapter"
    assert "位置编码" in text and "Traceback (most recent call last)" not in text
    assert wait_for_math(browser) > 10, "MathJax typeset (almost) nothing on the Chinese chapter"
    assert "$$" not in text, "raw display math ($$) left on the page"
    images = browser.execute_script(
        "return [...document.querySelectorAll('.cell_output img')].map(i => [i.src, i.complete && i.naturalWidth > 0])")
    assert len(images) >= 5 and all(ok for _, ok in images), f"figures that did not load: {images}"
    verse = find_figure(browser, "Bar chart over the ten characters of the verse")
    assert verse and verse[0], "the verse figure is missing or did not load"
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(SCREENSHOTS / "zh_06_positional_encoding.png"))
    browser.execute_script("window.scrollTo(0, 0)")
    click_language_switch(browser)
    assert browser.current_url == f"{server}/{page}"
    assert cjk_count(body_text(browser)) < 200, "the English chapter is not in English"
    assert "Positional encoding" in browser.title
    click_language_switch(browser)
    assert browser.current_url == f"{server}/zh/{page}"


def test_chinese_search_finds_chinese_words(server, browser):
    """The Chinese edition's search index holds Chinese words (Sphinx splits them with jieba)."""
    if not (HTML / "zh" / "index.html").exists():
        pytest.skip("the Chinese edition is not built (README, command 1: python tools/build_book.py --language zh_CN)")
    # 置换 ("permutation"): in the prose of chapter 3, in no title (titles match without jieba)
    open_page(browser, f"{server}/zh/search.html?q=%E7%BD%AE%E6%8D%A2")
    WebDriverWait(browser, 30).until(
        lambda d: d.execute_script("return document.querySelectorAll('#search-results li, ul.search li').length") > 0)
    results = browser.execute_script(
        "return [...document.querySelectorAll('#search-results li a, ul.search li a')].map(a => a.href)")
    assert any("/zh/notebooks/03_self_attention.html" in href for href in results), results
