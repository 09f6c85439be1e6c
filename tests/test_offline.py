"""The built book needs nothing from the internet (book/_ext/offline.py).

Every page of ``_build/html`` (both editions) is read as HTML: no script, style sheet, font,
image or frame comes from another host, no widget state or widget script is left, and no
inline script is emitted twice. tests/test_browser.py loads the pages with the network
closed; this test names the offending tag of every page, without a browser.
"""

from __future__ import annotations

import html.parser
import re
import sys
from collections import Counter
from pathlib import Path

import pytest
from conftest import NOT_BUILT

ROOT = Path(__file__).resolve().parents[1]
HTML = ROOT / "_build" / "html"
sys.path.insert(0, str(ROOT / "book" / "_ext"))
import offline  # noqa: E402  (book/_ext/offline.py)

OUTSIDE = re.compile(r"^(https?:)?//", re.I)
CSS_URL = re.compile(r"""url\(\s*['"]?([^'")\s]+)""")
# what a page loads (a link's href only for these rels; an <a href> is a link, not a load)
LOADING_RELS = {"stylesheet", "preload", "modulepreload", "icon", "shortcut icon", "manifest", "prefetch"}


class Loads(html.parser.HTMLParser):
    """The addresses a page loads, its inline scripts, and its scripts' types."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.loads: list[str] = []
        self.inline: list[str] = []
        self.types: list[str] = []
        self._in_script = False
        self._body: list[str] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "script":
            self.types.append(attrs.get("type") or "")
            if attrs.get("src"):
                self.loads.append(attrs["src"])
            else:
                self._in_script, self._body = True, []
        elif tag == "link" and (attrs.get("rel") or "").lower() in LOADING_RELS:
            self.loads.append(attrs.get("href") or "")
        elif tag in ("img", "iframe", "source", "audio", "video", "embed") and attrs.get("src"):
            self.loads.append(attrs["src"])
        if attrs.get("style"):
            self.loads += CSS_URL.findall(attrs["style"])

    def handle_data(self, data):
        if self._in_script:
            self._body.append(data)

    def handle_endtag(self, tag):
        if tag == "script" and self._in_script:
            self._in_script = False
            body = "".join(self._body).strip()
            if body:
                self.inline.append(body)


def pages() -> list[Path]:
    if not (HTML / "index.html").exists():
        pytest.skip(NOT_BUILT)
    return sorted(p for p in HTML.rglob("*.html") if "_static" not in p.parts)


def read(page: Path) -> Loads:
    parser = Loads()
    parser.feed(page.read_text(encoding="utf-8"))
    return parser


def test_no_page_loads_anything_from_outside():
    found = []
    for page in pages():
        parsed = read(page)
        outside = [url for url in parsed.loads if OUTSIDE.match(url)]
        if outside:
            found.append(f"{page.relative_to(HTML)}: {outside}")
    assert not found, "pages that load from the internet:\n" + "\n".join(found[:20])


def test_no_style_sheet_imports_from_outside():
    found = []
    for sheet in sorted(HTML.rglob("*.css")):
        text = sheet.read_text(encoding="utf-8", errors="replace")
        urls = CSS_URL.findall(text) + re.findall(r"""@import\s+['"]([^'"]+)""", text)
        outside = [u for u in urls if OUTSIDE.match(u) and "w3.org" not in u]  # SVG namespaces
        if outside:
            found.append(f"{sheet.relative_to(HTML)}: {outside[:3]}")
    assert not found, "style sheets that fetch from the internet:\n" + "\n".join(found)


def test_no_widget_state_and_each_inline_script_once():
    found = []
    for page in pages():
        parsed = read(page)
        name = page.relative_to(HTML)
        widgets = [t for t in parsed.types if "jupyter.widget" in t]
        if widgets:
            found.append(f"{name}: widget scripts {sorted(set(widgets))}")
        twice = [body[:60] for body, n in Counter(parsed.inline).items() if n > 1]
        if twice:
            found.append(f"{name}: inline scripts emitted twice {twice}")
        if any("THEBE_JS_URL" in body for body in parsed.inline):
            found.append(f"{name}: Thebe's configuration, without a Live Code button")
    assert not found, "\n".join(found[:20])


def test_chapters_show_their_progress_bars_as_text():
    """A chapter that trains shows its bars' final state as text, e.g. "100%|██████████|"."""
    chapter = HTML / "notebooks" / "01_rnn_captioning.html"
    if not chapter.exists():
        pytest.skip(NOT_BUILT)
    text = chapter.read_text(encoding="utf-8")
    assert re.search(r"100%\|█{10}\|", text), "no finished text progress bar on chapter 1's page"


# --- the widget-to-text conversion, on a hand-made state ---------------------------------


def tqdm_state(value: float, total: float, left: str, right: str) -> dict:
    """The widget state tqdm.notebook leaves: an HBox of an HTML label, a progress bar and an
    HTML count (the HTML values pad with U+2007 and escape '<')."""
    return {
        "box": {"model_name": "HBoxModel",
                "state": {"children": ["IPY_MODEL_l", "IPY_MODEL_p", "IPY_MODEL_r"]}},
        "l": {"state": {"_model_name": "HTMLModel", "value": left}},
        "p": {"state": {"_model_name": "FloatProgressModel", "min": 0.0, "max": total, "value": value}},
        "r": {"state": {"_model_name": "HTMLModel", "value": right}},
    }


def test_a_finished_widget_bar_becomes_tqdm_s_text_bar():
    state = tqdm_state(600, 600, "CNN\u2007classifier:\u2007100%", "\u2007600/600\u2007[00:10&lt;00:00]")
    assert offline.widget_bar_text(state, "box") == "CNN classifier: 100%|██████████| 600/600 [00:10<00:00]"


def test_a_bar_stopped_early_shows_where_it_stopped():
    state = tqdm_state(150, 600, "x:\u200725%", "\u2007150/600")
    # 150/600 of 10 characters: 2.5, drawn as 2 full blocks (round half to even)
    assert offline.widget_bar_text(state, "box") == "x: 25%|██        | 150/600"


def test_other_widgets_are_not_drawn():
    state = tqdm_state(1, 2, "a", "b")
    state["box"]["state"]["children"].pop()  # an HBox without the count: not tqdm's
    assert offline.widget_bar_text(state, "box") is None
    assert offline.widget_bar_text(state, "missing") is None
