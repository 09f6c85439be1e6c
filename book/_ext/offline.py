"""The book reads offline: no page loads a script, style or font from outside the site, and
no page logs a console error.

What the stock tools would add, and what this extension does about it:

- **Progress bars.** A chapter's training loop shows tqdm's bar (``companion.progress``). In
  Jupyter with ipywidgets that bar is a widget; nbclient saves the widgets' state in the
  executed notebook and myst-nb then loads RequireJS (cdnjs) and the widget manager
  (jsdelivr) on the page to draw it. The build sets ``COMPANION_PROGRESS=text`` before any
  kernel starts, so the chapters it executes print tqdm's plain text bar (to stderr, which
  the page shows). A notebook executed before that (the execution cache keeps outputs as
  long as the code is unchanged) still holds widget bars: each is replaced, when the page
  is read, by the same text bar drawn from the widget's saved final state (description,
  count, time), and the saved state and myst-nb's two scripts are dropped.
  ``nb_ipywidgets_js`` is emptied too, so a widget this extension does not know loads
  nothing from the internet either.
- **Thebe.** sphinx-thebe adds its configuration script (with the address of Thebe on
  unpkg) and ``sphinx-thebe.js`` to every page, and Sphinx 7.4 emits the configuration
  twice (``Identifier 'THEBE_JS_URL' has already been declared``). The book has no Live
  Code button (``launch_buttons`` names Colab only), so both are left out; were the button
  turned on, the scripts stay, once each, and Thebe itself still loads only on its click.
- **The theme's colour mode.** pydata-sphinx-theme logs ``Got invalid theme mode`` when
  ``default_mode`` (in ``html_context``) is empty; it is set to ``auto`` (follow the reader's system).

tests/test_offline.py checks the built pages' HTML for outside addresses, and
tests/test_browser.py loads every page of both editions with the network closed.
"""

from __future__ import annotations

import html
import json
import os
import re

from docutils import nodes

WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
WIDGET_VIEW = re.compile(
    r'^<script type="application/vnd\.jupyter\.widget-view\+json">(.*)</script>$', re.S
)
BAR_WIDTH = 10  # characters, as tqdm draws a bar of unknown terminal width


def _model(state: dict, ref: str) -> dict:
    return state.get(ref.removeprefix("IPY_MODEL_"), {}).get("state", {})


def _text(value: str) -> str:
    """A widget's HTML value as plain text (tqdm pads with figure spaces and escapes <)."""
    return html.unescape(re.sub(r"<[^>]+>", "", value)).replace("\u2007", " ").replace("\xa0", " ")


def widget_bar_text(state: dict, model_id: str) -> str | None:
    """The text bar for tqdm's widget ``model_id`` (an HBox of an HTML label, a progress bar
    and an HTML count), drawn from the widgets' saved state; None for any other widget."""
    box = state.get(model_id, {})
    if box.get("model_name") != "HBoxModel":
        return None
    children = [_model(state, ref) for ref in box.get("state", {}).get("children", [])]
    bars = [c for c in children if c.get("_model_name") in ("FloatProgressModel", "IntProgressModel")]
    labels = [c for c in children if c.get("_model_name") == "HTMLModel"]
    if len(bars) != 1 or len(labels) != 2:
        return None
    bar = bars[0]
    span = (bar.get("max") or 0) - (bar.get("min") or 0)
    done = 0.0 if span <= 0 else min(1.0, max(0.0, ((bar.get("value") or 0) - (bar.get("min") or 0)) / span))
    filled = round(done * BAR_WIDTH)
    left, right = (_text(c.get("value", "")) for c in labels)
    return f"{left}|{'█' * filled}{' ' * (BAR_WIDTH - filled)}|{right}"


def _widgets_to_text(app, doctree) -> None:
    """Replace the widget views of this page by text bars; drop the saved widget state."""
    metadata = getattr(app.env, "nb_metadata", {}).get(app.env.docname, {})
    js_files = metadata.get("js_files", {})
    saved = js_files.get("ipywidgets_state")
    state = {}
    if saved:
        state = json.loads(saved[1].get("body", "{}")).get("state", {})
    for raw in list(doctree.findall(nodes.raw)):
        found = WIDGET_VIEW.match(raw.astext().strip())
        if not found:
            continue
        view = json.loads(found.group(1))
        text = widget_bar_text(state, view.get("model_id", ""))
        if text is None:
            raw.parent.remove(raw)  # a widget the saved state cannot draw: show nothing
            continue
        block = nodes.literal_block(text, text, classes=["output", "text_plain"], language="none")
        raw.replace_self(block)
    for key in [k for k in js_files if k == "ipywidgets_state" or k.startswith("ipywidgets_")]:
        del js_files[key]


def _thebe_enabled(config) -> bool:
    return bool(config.html_theme_options.get("launch_buttons", {}).get("thebe"))


def _offline_scripts(app, pagename, templatename, context, doctree) -> None:
    """Each inline script once (Sphinx 7.4 registers an extension's inline script both as
    ``None`` and as ``""``); without a Live Code button, no Thebe at all."""
    scripts = context.get("script_files")
    if not scripts:
        return
    seen, kept = set(), []
    for script in scripts:
        filename = str(getattr(script, "filename", script) or "")
        attributes = getattr(script, "attributes", {})
        body = attributes.get("body", "")
        if not _thebe_enabled(app.config) and ("THEBE_JS_URL" in body or filename.endswith("sphinx-thebe.js")):
            continue
        key = (filename, body, tuple(sorted((k, str(v)) for k, v in attributes.items())))
        if key in seen:
            continue
        seen.add(key)
        kept.append(script)
    context["script_files"] = kept


def _config_inited(app, config) -> None:
    # pydata-sphinx-theme reads the mode from the template context, not from its options
    config.html_context = {**config.html_context, "default_mode": config.html_context.get("default_mode") or "auto"}
    config.nb_ipywidgets_js = {}


def setup(app):
    # Kernels the build starts inherit this: companion.progress then draws text bars.
    os.environ["COMPANION_PROGRESS"] = "text"
    app.connect("config-inited", _config_inited)
    app.connect("doctree-read", _widgets_to_text)
    # after myst-nb's per-page scripts (priority 500)
    app.connect("html-page-context", _offline_scripts, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1.0"}
