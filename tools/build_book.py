"""Build the book in both languages, or update the Chinese translation's catalogs.

    python tools/build_book.py                       # English, then 中文 (README, command 1)
    python tools/build_book.py --language zh_CN      # one edition only
    python tools/build_book.py --update-translations # after changing English prose

One source, two editions. The English edition is exactly ``jupyter-book build . -W -n
--keep-going`` (same configuration, same folders: ``_build/html``). The Chinese edition is
the same Sphinx project built with ``language = "zh_CN"``: Sphinx replaces every
translatable message (a paragraph, a heading, a table cell, ...) by its translation from
``locales/zh_CN/LC_MESSAGES/<page>.po`` (compiled to ``.mo`` on the fly) and builds into
``_build/zh/html``, which is then copied to ``_build/html/zh`` so one site holds both. The
Chinese build reads the notebooks' outputs from the English build's execution cache
(``_build/.jupyter_cache``): no chapter runs twice.

``--update-translations`` extracts the messages of every page with Sphinx's gettext builder
(notebooks are not executed) into ``_build/gettext/*.pot`` and merges them into the ``.po``
files with Babel: new messages arrive untranslated, changed ones keep their old translation
marked *fuzzy* (to be checked), removed ones are dropped. ``tests/test_translations.py``
fails until every message has a non-fuzzy translation. The API reference's docstrings are
part of the code and stay in English in both editions (like the code's comments): their
messages are left out of the catalogs.
"""

from __future__ import annotations

import argparse
import io
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# `python tools/build_book.py` puts tools/ first on sys.path, where tools/exercise_markdown.py
# would hide the book's extension of the same name (book/_ext/exercise_markdown.py)
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "tools"]
BUILD = ROOT / "_build"
LOCALES = ROOT / "locales"
LANGUAGES = ("en", "zh_CN")
AUTHORS = "The Attention & Transformers course authors"
HEADER = (f"# The page {{page}} in the book's Chinese edition (Sphinx gettext catalog).\n"
          f"# Copyright (C) 2026 {AUTHORS}\n"
          "# After changing the English: python tools/build_book.py --update-translations,\n"
          "# translate, then --check-translations (CONTRIBUTING.md).\n#")

# Settings of the Chinese edition on top of _config.yml's (which hold what both share:
# locale_dirs, gettext_compact, the language switch's targets).
CHINESE = {
    "language": "zh_CN",
    "html_title": "注意力与 Transformer",
    # the English build's cache: the Chinese build executes nothing
    "nb_execution_cache_path": str(BUILD / ".jupyter_cache"),
}


def _jupyter_book_config():
    """What ``jupyter-book build .`` passes to Sphinx: (config path, source folder, overrides)."""
    from jupyter_book.cli.main import build

    path_config, source, overrides = build.callback(
        path_source=str(ROOT), path_output=None, config=None, toc=None,
        warningiserror=True, nitpick=True, keep_going=True, freshenv=False,
        builder="html", custom_builder=None, verbose=0, quiet=0,
        individualpages=False, get_config_only=True,
    )
    # get_config_only gives the table of contents relative to the source folder
    overrides["external_toc_path"] = str(Path(source) / overrides["external_toc_path"])
    return path_config, source, overrides


def _sphinx(builder: str, outdir: Path, doctrees: Path, extra: dict, strict: bool = True,
            quiet: bool = False) -> None:
    from jupyter_book.sphinx import build_sphinx

    path_config, source, overrides = _jupyter_book_config()
    result = build_sphinx(
        source, outdir, noconfig=True, path_config=path_config,
        confoverrides={**overrides, **extra}, builder=builder, doctreedir=doctrees,
        warningiserror=strict, keep_going=True, quiet=quiet,
    )
    if result != 0:
        raise SystemExit(f"the {builder} build of {outdir} failed (see the messages above)")


def build(language: str) -> Path:
    """Build one edition; returns its ``index.html``."""
    t0 = time.perf_counter()
    if language == "en":
        _sphinx("html", BUILD / "html", BUILD / ".doctrees", {})
        index = BUILD / "html" / "index.html"
    else:
        _sphinx("html", BUILD / "zh" / "html", BUILD / "zh" / ".doctrees", CHINESE)
        site = BUILD / "html" / "zh"
        if site.exists():
            shutil.rmtree(site)
        shutil.copytree(BUILD / "zh" / "html", site)
        index = site / "index.html"
    print(f"::: {language} edition: {index.relative_to(ROOT)} ({time.perf_counter() - t0:.0f} s)")
    return index


# --- the translation catalogs -------------------------------------------------------------


def is_docstring(message) -> bool:
    """True for a message that comes only from a docstring (autodoc, the API reference)."""
    return bool(message.locations) and all(
        "docstring-of-" in str(path) for path, _line in message.locations
    )


def extract(outdir: Path) -> dict:
    """The book's messages, page by page: {"notebooks/03_self_attention": Catalog, ...}.

    Sphinx's gettext builder with execution off: the messages are the prose, which does
    not depend on the outputs. (The figures' alt texts come with the outputs, after
    Sphinx's translation step: they stay in English.)
    """
    from babel.messages.pofile import read_po

    if outdir.exists():
        shutil.rmtree(outdir)
    _sphinx("gettext", outdir, outdir.parent / f"{outdir.name}-doctrees",
            {"nb_execution_mode": "off", "gettext_location": True, "gettext_uuid": False},
            strict=False, quiet=True)
    shutil.rmtree(outdir.parent / f"{outdir.name}-doctrees", ignore_errors=True)
    templates = {}
    for pot in sorted(outdir.rglob("*.pot")):
        # Sphinx writes autodoc's locations as "file.py:docstring of name:line"; Babel splits
        # locations at spaces, so join the words first
        text = pot.read_text(encoding="utf-8").replace(":docstring of ", ":docstring-of-")
        catalog = read_po(io.StringIO(text))
        for message in list(catalog):
            if message.id and is_docstring(message):
                del catalog[message.id, message.context]
        templates[pot.relative_to(outdir).with_suffix("").as_posix()] = catalog
    return templates


def has_words(text: str) -> bool:
    """False for a message with nothing to translate: display math, or only inline math,
    code, numbers and punctuation (Sphinx keeps such a message as it is)."""
    if text.startswith("\n") and text.endswith("\n"):  # a display-math block's source
        return False
    prose = re.sub(r"\{[\w:-]+\}`[^`]*`|\$[^$]*\$|`[^`]*`", " ", text)
    return re.search(r"[A-Za-z]{2,}", prose) is not None


def po_path(page: str, language: str = "zh_CN") -> Path:
    return LOCALES / language / "LC_MESSAGES" / f"{page}.po"


def update_translations(language: str = "zh_CN") -> None:
    """Merge the extracted messages into the ``.po`` files (Babel's ``Catalog.update``)."""
    from babel.messages.catalog import Catalog
    from babel.messages.pofile import read_po, write_po

    templates = extract(BUILD / "gettext")
    for page, template in templates.items():
        path = po_path(page, language)
        if path.exists():
            with path.open("rb") as f:
                catalog = read_po(f, locale=language)
        else:
            catalog = Catalog(locale=language, project="Attention & Transformers", version="1",
                              copyright_holder=AUTHORS, last_translator=AUTHORS,
                              language_team=f"{AUTHORS} ({language})", fuzzy=False,
                              header_comment=HEADER.replace("{page}", page))
        before = [(m.id, m.string, sorted(m.flags)) for m in catalog if m.id]
        catalog.update(template, update_header_comment=False)
        catalog.obsolete.clear()  # removed English text: its translation goes too
        for message in catalog:
            if message.id and not message.string and not has_words(message.id):
                message.string = message.id  # math or code only: the same in every language
        messages = [m for m in catalog if m.id]
        todo = sum(1 for m in messages if not m.string or m.fuzzy)
        print(f"{path.relative_to(ROOT)}: {len(messages)} messages, {todo} to translate")
        after = [(m.id, m.string, sorted(m.flags)) for m in messages]
        if after == before:  # nothing changed: keep the file (and its header's date)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("wb") as f:  # no "#| msgid" lines: read back, wrapped ones became stray comments
            write_po(f, catalog, width=0, no_location=True, omit_header=False,
                     include_previous=False, sort_output=False)
    for stale in sorted((LOCALES / language / "LC_MESSAGES").rglob("*.po")):
        page = stale.relative_to(LOCALES / language / "LC_MESSAGES").with_suffix("").as_posix()
        if page not in templates:
            print(f"{stale.relative_to(ROOT)}: no such page any more, removed")
            stale.unlink()


# --- checking the translations -------------------------------------------------------------

ROLE = re.compile(r"\{[\w:-]+\}`[^`]*`")  # {cite}`key`, {doc}`text <page>`
CODE = re.compile(r"(``?)(?!`)(.+?)\1")
MATH = re.compile(r"\$\$?[^$]+\$\$?")
# Sphinx parses each translation as Markdown on its own: one that starts like a block
# ("1. ", "- ", "# ", "> ") becomes a list, heading or quote and is dropped for the English.
BLOCK_START = re.compile(r"\s*(\d+[.)]\s|[-*+]\s|#{1,6}\s|>)")
URL = re.compile(r"\]\(([^)\s]+)\)|<(https?://[^>]+)>")


def _role_key(role: str) -> str:
    """A role with its target, without the link text a translation may change."""
    name, body = role.split("`", 1)
    target = re.search(r"<([^>]+)>`$", body)
    return name + (target.group(1) if target else body.rstrip("`"))


def markup(text: str) -> dict[str, list[str]]:
    """The parts of a message a translation must keep as they are: roles (citations,
    cross-references), code, math and link targets, each as a sorted list."""
    roles = [_role_key(r) for r in ROLE.findall(text)]
    rest = ROLE.sub(" ", text)
    code = [m.group(0) for m in CODE.finditer(rest)]
    rest = CODE.sub(" ", rest)
    math = [m.replace("$", "").strip() for m in MATH.findall(rest)]
    rest = MATH.sub(" ", rest)
    urls = [a or b for a, b in URL.findall(rest)]
    return {"roles": sorted(roles), "code": sorted(code), "math": sorted(math),
            "links": sorted(urls)}


def problems(page: str, template, language: str = "zh_CN") -> list[str]:
    """What is wrong with one page's translation: messages missing, untranslated, fuzzy, or
    with roles, code, math or links that differ from the English."""
    from babel.messages.pofile import read_po

    path = po_path(page, language)
    if not path.exists():
        return [f"{path}: missing (run tools/build_book.py "
                "--update-translations)"]
    with path.open("rb") as f:
        catalog = read_po(f, locale=language)
    shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    found = []
    ids = [m.id for m in template if m.id]
    for msgid in ids:
        message = catalog.get(msgid)
        where = f"{shown}: {msgid[:60]!r}"
        if message is None:
            found.append(f"{where}: not in the catalog (run --update-translations)")
        elif not message.string:
            found.append(f"{where}: not translated")
        elif message.fuzzy:
            found.append(f"{where}: fuzzy (the English changed: check, then remove the flag)")
        elif message.string != msgid and BLOCK_START.match(message.string):
            found.append(f"{where}: the translation starts like a list, heading or quote "
                         "and would not replace the English (escape it, e.g. 1\\. or \\-)")
        elif message.string != msgid:
            want, got = markup(msgid), markup(message.string)
            for kind in want:
                if want[kind] != got[kind]:
                    missing = sorted(set(want[kind]) - set(got[kind]))
                    extra = sorted(set(got[kind]) - set(want[kind]))
                    found.append(f"{where}: {kind} differ from the English "
                                 f"(missing {missing}, extra {extra})")
    return found


def check(pages=None, language: str = "zh_CN") -> list[str]:
    """Problems of every page's translation, against freshly extracted messages."""
    with tempfile.TemporaryDirectory(prefix="gettext-") as tmp:
        templates = extract(Path(tmp) / "gettext")
    return [p for page, template in templates.items() if not pages or page in pages
            for p in problems(page, template, language)]


def main(argv=None) -> int | None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--language", choices=LANGUAGES, action="append",
                        help="build only this edition (default: both, English first)")
    parser.add_argument("--update-translations", action="store_true",
                        help="extract the messages and update locales/*/LC_MESSAGES/*.po")
    parser.add_argument("--check-translations", nargs="*", metavar="PAGE",
                        help="list what is untranslated, fuzzy or has changed markup "
                             "(all pages, or these, e.g. notebooks/03_self_attention)")
    args = parser.parse_args(argv)
    if args.check_translations is not None:
        found = check(args.check_translations)
        print("\n".join(found) or "every message translated, markup intact")
        return 1 if found else 0
    if args.update_translations:
        update_translations()
        return
    for language in args.language or LANGUAGES:
        build(language)


if __name__ == "__main__":
    sys.exit(main())
