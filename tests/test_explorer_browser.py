"""companion.explorer's views on the built book's pages, in headless Chromium with the network
closed (the `browser` fixture, tests/conftest.py), in both editions.

On chapters 2, 5, 7, 9, 10 and 11 the view renders (its script ran: the fallback text is gone); clicking
a query token draws one line per head to every key, and the weights the lines carry equal the
model's to three decimals (the full-precision weights the executed notebook stores beside the
HTML, under companion.explorer.MIME_TYPE, in the book's execution cache); switching a head off removes
its lines; Tab reaches the selected token and the arrow keys move the selection, with a visible
focus ring; in chapter 5's model view a thumbnail opens its head; dark mode keeps the text
readable; the page logs no console error. The view also renders inside a sandboxed iframe
without network, as Colab shows outputs. Screenshots: ``_build/screenshots/explorer_*.png``.
"""

from __future__ import annotations

import re
import time

import pytest
from test_browser import HTML, ROOT, SCREENSHOTS, open_page, server  # noqa: F401  (the fixture)

from companion.explorer import MIME_TYPE

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install selenium)")
from selenium.webdriver.common.action_chains import ActionChains  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402

BROWSER_WINDOW = (1280, 1000)
BROWSER_PAGE_LOAD_TIMEOUT = 60
EXECUTED = ROOT / "_build" / "jupyter_execute" / "notebooks"
# chapter -> the kinds of attention its view holds and whether it is a model view
PAGES = {
    "02_seq2seq_attention": (["cross"], "head"),
    "05_multihead_attention": (["self"], "model"),
    "07_transformer": (["encoder", "decoder", "cross"], "head"),
    "09_capstone_captioning": (["cross"], "head"),
    "10_language_model": (["self"], "head"),
    "11_positions_and_memory": (["self"], "head"),
}
EDITIONS = {"en": "", "zh": "zh/"}
CASES = [(stem, edition) for stem in PAGES for edition in EDITIONS]


def model_weights(stem):
    """The weights the chapter's view was made from, at full precision: the executed notebook's
    output (the book's execution cache, from which the page was rendered, or
    ``_build/jupyter_execute``) keeps them beside the HTML."""
    import nbformat

    notebook = nbformat.read(ROOT / "notebooks" / f"{stem}.ipynb", 4)
    executed = None
    try:
        from jupyter_cache import get_cache

        cache = get_cache(str(ROOT / "_build" / ".jupyter_cache"))
        executed = cache.get_cache_bundle(cache.match_cache_notebook(notebook).pk).nb
    except (ImportError, KeyError):
        path = EXECUTED / f"{stem}.ipynb"
        if path.exists():
            executed = nbformat.read(path, 4)
    if executed is None:
        pytest.skip(f"no executed {stem} in _build: build the book first")
    found = [o["data"][MIME_TYPE] for c in executed.cells if c["cell_type"] == "code"
             for o in c.get("outputs", []) if MIME_TYPE in o.get("data", {})]
    assert len(found) == 1, f"{stem}: {len(found)} explorer outputs in the executed notebook"
    return found[0]


STATE = """
const root = document.querySelector('.ax-root');
const lines = [...root.querySelectorAll('line.ax-line')].map(
    l => [+l.dataset.head, +l.dataset.key, l.dataset.weight, +l.getAttribute('stroke-opacity')]);
const q = root.querySelector('.ax-query[aria-selected="true"]');
return {lines, query: q ? +q.dataset.index : -1, layer: +root.querySelector('.ax-layer').value,
        nq: root.querySelectorAll('.ax-query').length, nk: root.querySelectorAll('.ax-key').length,
        pressed: [...root.querySelectorAll('.ax-head-toggle')].map(b => b.getAttribute('aria-pressed') === 'true'),
        active: document.activeElement === q, readout: root.querySelector('.ax-readout').textContent};
"""


def state(browser):
    return browser.execute_script(STATE)


def click(browser, css):
    element = browser.find_element("css selector", css)
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'});", element)
    element.click()
    return element


# Errors the book's pages log without the explorer (left to the book, not hidden by this test):
# myst-nb loads require.js and the widget manager from CDNs on pages with widget outputs (the
# progress bars), sphinx-thebe declares THEBE_JS_URL twice, pydata warns about its theme mode,
# and the test server has no favicon.
BOOK_ERRORS = ("cdnjs.cloudflare.com", "cdn.jsdelivr.net", "THEBE_JS_URL", "invalid theme mode", "favicon.ico")


def console_errors(browser):
    return [e for e in browser.get_log("browser")
            if e["level"] == "SEVERE" and not any(known in e["message"] for known in BOOK_ERRORS)]


def check_lines(shown, full, kind, layer, query, heads):
    """Every active head draws one line per key, carrying the model's weight to 3 decimals."""
    w = full["kinds"][kind][layer]  # (H, Q, K)
    n_keys = len(w[0][query])
    assert sorted({h for h, *_ in shown["lines"]}) == heads
    assert len(shown["lines"]) == len(heads) * n_keys
    for h, k, text, opacity in shown["lines"]:
        assert re.fullmatch(r"\d\.\d{3}", text), text
        assert abs(float(text) - w[h][query][k]) <= 0.0005 + 1e-6, (kind, layer, h, query, k, text, w[h][query][k])
        assert abs(opacity - float(text)) < 1e-6  # a line is as strong as its weight


@pytest.mark.parametrize("stem, edition", CASES, ids=[f"{e}-{s}" for s, e in CASES])
def test_explorer_on_the_chapter_page(server, browser, stem, edition):  # noqa: F811
    if edition == "zh" and not (HTML / "zh" / "index.html").exists():
        pytest.skip("the Chinese edition is not built (python tools/build_book.py --language zh_CN)")
    kinds, mode = PAGES[stem]
    full = model_weights(stem)
    assert sorted(full["kinds"]) == sorted(kinds)  # nbformat stores JSON keys sorted
    page = HTML / EDITIONS[edition] / "notebooks" / f"{stem}.html"
    html = page.read_text(encoding="utf-8")
    assert MIME_TYPE not in html and "image/png" not in html  # the book carries the HTML only
    fragments = re.findall(r'<div class="ax-root".*?window\.companionExplorer\.render\(.*?</script></div>', html, re.S)
    assert len(fragments) == 1, f"{len(fragments)} explorer views on {page.name}"
    added = len(fragments[0].encode("utf-8"))
    assert added < 1_000_000, f"the view adds {added} bytes"
    browser.get_log("browser")  # drop what earlier pages logged
    open_page(browser, f"{server}/{EDITIONS[edition]}notebooks/{stem}.html")
    root = browser.find_element("css selector", ".ax-root")
    assert root.get_attribute("data-rendered") == "1" and not browser.find_elements("css selector", ".ax-fallback")
    render_ms = browser.execute_script("""
        const src = document.querySelector('.ax-root'), copy = document.createElement('div');
        copy.className = 'ax-root'; copy.id = src.id + '-timing';
        copy.appendChild(src.querySelector('script.ax-data').cloneNode(true));
        document.body.appendChild(copy);
        const t = performance.now(); window.companionExplorer.render(copy); const ms = performance.now() - t;
        copy.remove(); return ms;""")
    print(f"{edition} {stem}: view {added / 1000:.1f} kB, render {render_ms:.1f} ms")
    assert render_ms < 1000
    if edition == "zh":
        assert "头" in root.find_element("css selector", ".ax-heads").text  # the controls speak Chinese
    if mode == "model":  # open layer 1, head 2 from the thumbnails
        thumbs = browser.find_elements("css selector", ".ax-thumb")
        assert len(thumbs) == len(full["layers"]) * len(full["kinds"][kinds[0]][0])
        click(browser, ".ax-thumb[data-layer='0'][data-head='1']")
        shown = state(browser)
        assert shown["layer"] == 0 and shown["pressed"] == [False, True]
        check_lines(shown, full, kinds[0], 0, shown["query"], [1])
        for b in browser.find_elements("css selector", ".ax-head-toggle[aria-pressed='false']"):
            b.click()  # every head on again
    for ki, kind in enumerate(kinds):
        if len(kinds) > 1:
            browser.execute_script("""const s = document.querySelector('.ax-kind');
                s.value = arguments[0]; s.dispatchEvent(new Event('change'));""", str(ki))
        shown = state(browser)
        layer, n_heads = shown["layer"], len(shown["pressed"])
        for query in sorted({shown["nq"] - 1, shown["nq"] // 2}):
            click(browser, f".ax-query[data-index='{query}']")
            shown = state(browser)
            assert shown["query"] == query and shown["active"]
            check_lines(shown, full, kind, layer, query, list(range(n_heads)))
        # the exact weight on hover: the readout names the key and every head's weight
        key = browser.find_element("css selector", ".ax-key[data-index='0']")
        ActionChains(browser).move_to_element(key).perform()
        readout = state(browser)["readout"]
        w = full["kinds"][kind][layer]
        for h in range(n_heads):
            assert f"{w[h][query][0]:.3f}" in readout or f"{w[h][query][0] + 5e-7:.3f}" in readout, readout
        # switching a head off removes its lines, on again brings them back
        click(browser, ".ax-head-toggle[data-head='0']")
        shown = state(browser)
        assert not [line for line in shown["lines"] if line[0] == 0]
        assert len(shown["lines"]) == (n_heads - 1) * shown["nk"]
        click(browser, ".ax-head-toggle[data-head='0']")
        assert len(state(browser)["lines"]) == n_heads * shown["nk"]
    # keyboard: Tab from the control before the tokens (the last head toggle, or in the model
    # view the last thumbnail) reaches the selected token; the arrows move it
    before = browser.find_elements("css selector", ".ax-thumb" if mode == "model" else ".ax-head-toggle")[-1]
    browser.execute_script("arguments[0].focus()", before)
    ActionChains(browser).send_keys(Keys.TAB).perform()
    shown = state(browser)
    assert shown["active"], "Tab did not reach the selected query token"
    start = shown["query"]
    ActionChains(browser).send_keys(Keys.ARROW_UP).perform()
    assert state(browser)["query"] == max(0, start - 1) and state(browser)["active"]
    ActionChains(browser).send_keys(Keys.HOME).perform()
    assert state(browser)["query"] == 0
    ActionChains(browser).send_keys(Keys.ARROW_DOWN).perform()
    shown = state(browser)
    assert shown["query"] == 1 and shown["active"]
    ring = browser.execute_script("const s = getComputedStyle(document.activeElement); return [s.outlineStyle, s.outlineWidth]")
    assert ring[0] != "none" and float(ring[1].rstrip("px")) >= 2, f"no visible focus ring: {ring}"
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'});", root)
    time.sleep(0.2)
    root.screenshot(str(SCREENSHOTS / f"explorer_{edition}_{stem}.png"))
    # dark mode (pydata's switch sets data-theme on <html>): the tokens' text keeps a contrast of
    # at least 4.5 (WCAG AA) with the background it sits on (myst-nb puts HTML outputs on a box)
    browser.execute_script("document.documentElement.dataset.theme = 'dark'")
    time.sleep(0.5)
    contrast = browser.execute_script("""
        const lum = c => { const [r, g, b] = c.match(/[\\d.]+/g).slice(0, 3).map(v => {
            v = v / 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); });
            return 0.2126 * r + 0.7152 * g + 0.0722 * b; };
        const key = document.querySelector('.ax-key');
        let e = key, bg = null;
        while (e) { const c = getComputedStyle(e).backgroundColor;
            if (e !== key && !/rgba\\(.*, 0\\)$/.test(c) && c !== 'transparent') { bg = c; break; } e = e.parentElement; }
        const a = lum(getComputedStyle(key).color), b = lum(bg || 'rgb(255, 255, 255)');
        return (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);""")
    assert contrast >= 4.5, f"token text contrast {contrast:.1f} on the dark page"
    if edition == "en":
        root.screenshot(str(SCREENSHOTS / f"explorer_{edition}_{stem}_dark.png"))
    errors = console_errors(browser)
    assert not errors, f"console errors: {errors}"


def test_the_view_renders_in_a_sandboxed_iframe_without_network(server, browser, tmp_path):  # noqa: F811
    """As Colab shows an output: its HTML in an iframe that may run scripts and nothing else."""
    import torch

    from companion.explorer import head_view

    w = [torch.softmax(torch.randn(1, 2, 4, 4), -1) for _ in range(2)]
    view = head_view(w, ["the", "cat", "sat", "."], query=1)
    page = HTML / "_explorer_sandbox.html"
    doc = "<!doctype html><html><body>" + view.html() + "</body></html>"
    srcdoc = doc.replace("&", "&amp;").replace('"', "&quot;")
    page.write_text(f'<!doctype html><iframe sandbox="allow-scripts" width="900" height="500" srcdoc="{srcdoc}"></iframe>',
                    encoding="utf-8")
    try:
        browser.get_log("browser")
        open_page(browser, f"{server}/_explorer_sandbox.html")
        browser.switch_to.frame(browser.find_element("css selector", "iframe"))
        lines = browser.execute_script("return document.querySelectorAll('line.ax-line').length")
        assert lines == 2 * 4
        browser.find_element("css selector", ".ax-query[data-index='2']").click()
        weights = browser.execute_script(
            "return [...document.querySelectorAll('line.ax-line')].map(l => +l.dataset.weight)")
        expected = torch.stack([x[0] for x in w])[-1, :, 2].flatten().tolist()
        assert all(abs(a - b) <= 0.0005 + 1e-6 for a, b in zip(weights, expected, strict=True))
        browser.switch_to.default_content()
        assert not console_errors(browser)
    finally:
        page.unlink()
