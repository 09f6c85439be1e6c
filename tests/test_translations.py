"""The Chinese edition: every message translated, the markup kept, the language switch on
every page of both editions, and Chinese characters in figures drawn with a real font.

The translations live in ``locales/zh_CN/LC_MESSAGES/<page>.po`` (Sphinx gettext). After
changing English prose: ``python tools/build_book.py --update-translations``, translate what
it lists, then ``python tools/build_book.py --check-translations`` (what the first test
asserts). See CONTRIBUTING.md.
"""

from __future__ import annotations

import importlib.util
import re
import warnings
from pathlib import Path

import matplotlib
import pytest
from babel.messages.catalog import Catalog, Message
from conftest import NO_CJK_FONT, NOT_BUILT

ROOT = Path(__file__).resolve().parents[1]
HTML = ROOT / "_build" / "html"


def _load_build_book():
    spec = importlib.util.spec_from_file_location("build_book", ROOT / "tools" / "build_book.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


build_book = _load_build_book()


# --- every message translated ---------------------------------------------------------------


@pytest.fixture(scope="module")
def templates(tmp_path_factory):
    """The book's messages, extracted now from the English sources (Sphinx gettext builder)."""
    return build_book.extract(tmp_path_factory.mktemp("gettext") / "gettext")


def test_every_page_has_messages(templates):
    pages = set(templates)
    chapters = {f"notebooks/{p.stem}" for p in (ROOT / "notebooks").glob("*.ipynb")}
    assert chapters <= pages, f"chapters without messages: {sorted(chapters - pages)}"
    assert {"book/intro", "book/how-to-use", "book/teaching", "book/glossary"} <= pages
    assert sum(len(t) for t in templates.values()) > 800, "suspiciously few messages extracted"


def test_every_message_translated(templates):
    problems = [p for page, template in templates.items()
                for p in build_book.problems(page, template)]
    assert not problems, (
        f"{len(problems)} message(s) of the Chinese edition need work "
        "(python tools/build_book.py --update-translations, translate, then "
        "--check-translations):\n" + "\n".join(problems[:40]))


def test_no_catalog_without_a_page(templates):
    catalogs = {p.relative_to(ROOT / "locales" / "zh_CN" / "LC_MESSAGES").with_suffix("").as_posix()
                for p in (ROOT / "locales" / "zh_CN" / "LC_MESSAGES").rglob("*.po")}
    assert catalogs == set(templates)


def test_docstrings_stay_in_english(templates):
    """The API reference's docstrings are left out of the catalogs (they are code)."""
    api = templates["book/api"]
    assert not any(build_book.is_docstring(m) for m in api if m.id)
    assert len(api) < 60, "docstring messages leaked into book/api's catalog"


# --- the checks themselves can fail ----------------------------------------------------------


def _catalog_with(msgid: str, msgstr: str, fuzzy: bool = False) -> Catalog:
    catalog = Catalog(locale="zh_CN")
    catalog[msgid] = Message(msgid, msgstr, flags={"fuzzy"} if fuzzy else set())
    return catalog


@pytest.mark.parametrize("msgstr, fuzzy, complaint", [
    ("", False, "not translated"),
    ("以 $Q = XW_Q$ 计算，见 {cite}`vaswani2017attention`。", True, "fuzzy"),
    ("以 $Q = XW_K$ 计算，见 {cite}`vaswani2017attention`。", False, "math differ"),
    ("以 $Q = XW_Q$ 计算，见 {cite}`bahdanau2015neural`。", False, "roles differ"),
    ("以 $Q = XW_Q$ 计算，见 {cite}`vaswani2017attention`，用 `attn`。", False, "code differ"),
    ("1. 以 $Q = XW_Q$ 计算，见 {cite}`vaswani2017attention`。", False, "starts like a list"),
])
def test_problems_are_found(tmp_path, monkeypatch, msgstr, fuzzy, complaint):
    from babel.messages.pofile import write_po

    msgid = "Compute $Q = XW_Q$, see {cite}`vaswani2017attention`."
    monkeypatch.setattr(build_book, "LOCALES", tmp_path)
    path = build_book.po_path("notebooks/x")
    path.parent.mkdir(parents=True)
    with path.open("wb") as f:
        write_po(f, _catalog_with(msgid, msgstr, fuzzy))
    found = build_book.problems("notebooks/x", _catalog_with(msgid, ""))
    assert len(found) == 1 and complaint in found[0], found
    good = "以 $Q = XW_Q$ 计算，见 {cite}`vaswani2017attention`。"
    with path.open("wb") as f:
        write_po(f, _catalog_with(msgid, good))
    assert build_book.problems("notebooks/x", _catalog_with(msgid, "")) == []


def test_markup_keeps_role_targets_and_link_urls():
    english = "See {doc}`the guide <how-to-use>` and [the paper](https://arxiv.org/abs/1706.03762)."
    chinese = "见{doc}`指南 <how-to-use>`和[论文](https://arxiv.org/abs/1706.03762)。"
    assert build_book.markup(english) == build_book.markup(chinese)
    assert build_book.markup(chinese.replace("how-to-use", "intro")) != build_book.markup(english)
    assert build_book.markup(chinese.replace("1706", "1409")) != build_book.markup(english)


def test_nothing_to_translate():
    assert not build_book.has_words("\nQ = X W_Q, \\quad K = X W_K\n")  # display math
    assert not build_book.has_words("$O(n^2 d)$")
    assert not build_book.has_words("{doc}`../notebooks/02_seq2seq_attention`")
    assert build_book.has_words("the $O(n^2 d)$ cost")


# --- the language switch, on every page of both editions -------------------------------------


def _switch_target(page: Path) -> Path | None:
    match = re.search(r'<a class="btn btn-sm language-switch" href="([^"]+)"', page.read_text(encoding="utf-8"))
    return (page.parent / match.group(1)).resolve() if match else None


@pytest.mark.skipif(not (HTML / "zh" / "index.html").exists(),
                    reason="the book is not built in both languages (README, command 1)")
def test_language_switch_on_every_page_both_ways():
    def pages(root):  # every page of an edition but its index.html, a redirect to book/intro
        return sorted(p for p in root.rglob("*.html") if p.relative_to(root).parts[0] not in ("zh", "index.html")
                      and not p.relative_to(root).parts[0].startswith("_"))

    english, chinese = pages(HTML), pages(HTML / "zh")
    assert [p.relative_to(HTML) for p in english] == [p.relative_to(HTML / "zh") for p in chinese]
    assert len(english) >= 15
    for page in english:
        target = _switch_target(page)
        assert target == HTML / "zh" / page.relative_to(HTML), f"{page}: switch leads to {target}"
        assert _switch_target(target) == page, f"{target}: switch does not lead back to {page}"
    zh_index = (HTML / "zh" / "book" / "intro.html").read_text(encoding="utf-8")  # the landing page
    assert 'lang="zh-CN"' in zh_index and "注意力与 Transformer" in zh_index


@pytest.mark.skipif(not (HTML / "zh" / "index.html").exists(),
                    reason="the book is not built in both languages (README, command 1)")
def test_chinese_pages_are_chinese():
    """Most of each Chinese page's prose is Chinese (what is not: code, math, names)."""
    for page in sorted((HTML / "zh" / "notebooks").glob("*.html")):
        text = page.read_text(encoding="utf-8")
        article = text[text.find("<article"):text.find("</article>")]
        prose = " ".join(re.findall(r"<p>(.*?)</p>", article, re.S))
        prose = re.sub(r'<span class="math.*?</span>|<code.*?</code>|<[^>]+>', " ", prose, flags=re.S)
        cjk = len(re.findall(r"[\u4e00-\u9fff]", prose))
        latin_words = len(re.findall(r"[A-Za-z]{3,}", prose))
        assert cjk > 1500 and cjk > 3 * latin_words, f"{page.name}: {cjk} Chinese characters, {latin_words} English words"
        # exercise and solution titles (sphinx-exercise makes them; book/_ext/editions.py
        # lets Sphinx translate them and the solutions copy the translation)
        titles = [re.sub(r"<[^>]+>", "", t) for t in re.findall(r'<p class="admonition-title">(.*?)</p>', article, re.S)]
        english = [t for t in titles if re.search(r"[A-Za-z]{4,} [A-Za-z]{3,}", re.sub(r"\\\(.*?\\\)", "", t))]
        assert titles and not english, f"{page.name}: titles left in English: {english}"


# --- Chinese characters in figures ----------------------------------------------------------


def test_cjk_characters_render_without_missing_glyphs():
    """companion.plotting picks an installed CJK font; every glyph of a Chinese string is then
    found (matplotlib warns "Glyph ... missing from font(s)" otherwise, and draws a box)."""
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from companion import plotting

    font = plotting.use_cjk_font()
    if font is None:
        pytest.skip(NO_CJK_FONT)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*missing from font")
        fig, ax = plt.subplots()
        ax.set_title("雪山千古冷，独照峨眉峰 (Latin, digits 0-9, ‖x‖ − y)")
        ax.set_xticks([0, 1, 2], ["自注意力", "位置编码", "多头注意力"])
        fig.canvas.draw()
    plt.close(fig)
    assert plt.rcParams["font.family"][0] == "sans-serif", "Latin text must keep matplotlib's default font"


def test_without_a_cjk_font_nothing_changes(monkeypatch):
    import matplotlib.pyplot as plt

    from companion import plotting

    monkeypatch.setattr(plotting.font_manager.fontManager, "ttflist", [])
    monkeypatch.setattr(plotting.font_manager, "findSystemFonts", lambda *a, **k: [])
    monkeypatch.setitem(plt.rcParams, "font.family", ["sans-serif"])
    assert plotting.cjk_font() is None
    assert plotting.use_cjk_font() is None
    assert list(plt.rcParams["font.family"]) == ["sans-serif"]


@pytest.mark.skipif(not (ROOT / "_build" / "jupyter_execute").exists(), reason=NOT_BUILT)
def test_no_figure_of_the_book_misses_a_glyph():
    """The executed chapters (the book's figures, shared by both editions) printed no
    missing-glyph warning."""
    executed = sorted((ROOT / "_build" / "jupyter_execute").rglob("*.ipynb"))
    assert executed
    bad = [p.name for p in executed if "missing from font" in p.read_text(encoding="utf-8")]
    assert not bad, f"figures with missing glyphs (tofu boxes) in {bad}"


HIDE_CJK_FONT = """\
import matplotlib
import companion.plotting
companion.plotting.cjk_font = lambda: None  # as on a machine without a CJK font
matplotlib.rcParams["font.family"] = ["sans-serif"]  # the CJK fallback removed
"""


def _run_chapter_6_verse_figure_without_cjk_font() -> str:
    """Chapter 6 up to its verse figure (the one figure with Chinese characters), run in a
    kernel with the CJK font hidden; returns everything the cells printed."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.read(ROOT / "notebooks" / "06_positional_encoding.ipynb", as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    last = next(i for i, c in enumerate(code) if "PINYIN = dict(" in c.source)
    cells = code[1:2] + [nbformat.v4.new_code_cell(HIDE_CJK_FONT)] + code[2:last + 1]
    nb.cells = cells
    nbclient.NotebookClient(nb, timeout=120, resources={"metadata": {"path": str(ROOT / "notebooks")}}).execute()
    return "\n".join(out.get("text", "") for c in nb.cells for out in c.get("outputs", []))


def test_chapter_6_figure_falls_back_to_pinyin_without_a_cjk_font():
    """On a machine without a CJK font (the README: "labels fall back to pinyin") the verse
    figure draws no tofu box: no Chinese character reaches matplotlib."""
    printed = _run_chapter_6_verse_figure_without_cjk_font()
    assert "largest change without positions" in printed, printed[-2000:]
    assert "missing from font" not in printed, printed[-2000:]


# --- one Chinese term per English term (locales/zh_CN/terms.tsv) -----------------------------

TERMS = ROOT / "locales" / "zh_CN" / "terms.tsv"
# code spans, math, roles and link targets keep their English
_PROTECTED = re.compile(r"`[^`]*`|\$\$.*?\$\$|\$[^$]*\$|\]\([^)]*\)", re.DOTALL)


def term_list():
    rows = [line.split("\t") for line in TERMS.read_text(encoding="utf-8").splitlines()
            if line.strip() and not line.startswith("#")]
    return [(en, zh, [a for a in avoid.split(",") if a], always == "yes") for en, zh, avoid, always in rows]


def _prose(text: str) -> str:
    return _PROTECTED.sub(" ", text)


def _avoided(text: str, form: str) -> bool:
    """Whether `form` occurs in `text` as the term to avoid (a Latin form as a whole word, and not
    as the English gloss in brackets after its Chinese term, e.g. 奈特（nat）)."""
    if re.search(r"[A-Za-z]", form):
        return re.search(rf"(?<![A-Za-z（(]){re.escape(form)}(?![A-Za-z）)])", text) is not None
    if form == "贪婪解码":  # the glossary records the lecture notes' name: 贪心解码（讲义：贪婪解码）
        text = text.replace("讲义：贪婪解码", "")
    return form in text


def term_problems(catalogs) -> list[str]:
    problems = []
    for po in catalogs:
        catalog = read_po(po)
        for message in catalog:
            if not message.id or not message.string:
                continue
            zh, en = _prose(message.string), _prose(message.id)
            kept = message.string == message.id  # English kept as is (the glossary's English column)
            for term_en, term_zh, avoid, always in term_list():
                problems += [f"{po.name}: '{form}' for '{term_en}' (the term is {term_zh}): {message.string[:80]}"
                             for form in avoid if not kept and _avoided(zh, form)]
                if (always and not kept and term_en.lower() in en.lower()
                        and not any(t in zh for t in term_zh.split("|"))):
                    problems.append(f"{po.name}: '{term_en}' is not {term_zh}: {message.string[:80]}")
    return problems


def read_po(path):
    from babel.messages.pofile import read_po as babel_read_po

    with path.open("rb") as f:
        return babel_read_po(f)


def test_one_chinese_term_for_each_english_term():
    catalogs = sorted((ROOT / "locales" / "zh_CN" / "LC_MESSAGES").rglob("*.po"))
    problems = term_problems(catalogs)
    assert not problems, f"{len(problems)} translation(s) break locales/zh_CN/terms.tsv:\n" + "\n".join(problems[:40])


def test_the_term_check_finds_a_split_term(tmp_path):
    po = tmp_path / "x.po"
    po.write_text('msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=UTF-8\\n"\n\n'
                  'msgid "Predict, then check: sizes"\nmsgstr "先预测，再验证：大小"\n\n'
                  'msgid "The loss rose by 0.2 nats."\nmsgstr "损失升高了 0.2 nat。"\n\n'
                  'msgid "in nats"\nmsgstr "单位为奈特（nat）"\n\n'
                  'msgid "nat (the unit of a natural-log loss)"\nmsgstr "nat (the unit of a natural-log loss)"\n\n'
                  'msgid "teacher forcing (Predict, then check)"\nmsgstr "teacher forcing (Predict, then check)"\n',
                  encoding="utf-8")
    problems = term_problems([po])
    # 再验证 (avoided and not 再检查) and the bare nat; the gloss and the English kept as is are fine
    # (a message kept in English, as the glossary's English column, needs no Chinese term)
    assert len(problems) == 3, problems
