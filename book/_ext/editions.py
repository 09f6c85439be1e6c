"""The book's two editions, English and 中文 (Chinese), built from the same sources.

tools/build_book.py builds the Chinese edition with ``language = "zh_CN"``; Sphinx's own
internationalisation replaces every translatable message by its translation from
``locales/zh_CN/LC_MESSAGES/<page>.po``. This extension adds what Sphinx does not:

- **a language switch** in every page's header, linking to the same page in the other
  edition (``language_switch`` in _config.yml: for each language, the label of the link
  and where the other edition's root lies relative to this one's);
- **translated part captions** in the navigation (sphinx-external-toc adds them late);
- **translatable exercise titles**: sphinx-exercise builds an exercise's title from the
  directive's argument without noting where it came from, so Sphinx would neither extract
  nor translate it; this subclass of its directive records the source, and the gettext
  builder is handed the titles when a page is read (sphinx-exercise's post-transforms
  replace the title before the builder would see it); solutions take the translated title.
"""

from __future__ import annotations

from pathlib import Path
from uuid import uuid4

from sphinx import addnodes
from sphinx_exercise.directive import ExerciseDirective
from sphinx_exercise.nodes import exercise_enumerable_node, exercise_node, exercise_subtitle


class TranslatableExerciseDirective(ExerciseDirective):
    """sphinx-exercise's ``{exercise}``, with a title that Sphinx can translate."""

    def run(self):
        result = super().run()
        for node in result:
            for subtitle in node.findall(exercise_subtitle):
                # what Sphinx's i18n needs: a source location and the message's text
                subtitle.source, subtitle.line = self.state_machine.get_source_and_line(
                    self.lineno
                )
                subtitle.rawsource = self.arguments[0]
        return result


def _exercise_titles_to_catalog(app, doctree):
    """For the gettext builder: add each exercise title to its page's message catalog."""
    if app.builder.name != "gettext":
        return
    from sphinx.builders.gettext import docname_to_domain

    domain = docname_to_domain(app.env.docname, app.config.gettext_compact)
    for subtitle in doctree.findall(exercise_subtitle):
        if not hasattr(subtitle, "uid"):  # the catalog takes only nodes with an id
            subtitle.uid = uuid4().hex
        app.builder.catalogs[domain].add(subtitle.rawsource, subtitle)


def _register_translated_exercises(app, doctree):
    """sphinx-exercise keeps a copy of each exercise, made when the directive ran, before
    Sphinx translated its title; solutions and references take their titles from that copy.
    Copy the translated exercise instead."""
    registry = getattr(app.env, "sphinx_exercise_registry", {})
    for node in doctree.findall(lambda n: isinstance(n, (exercise_node, exercise_enumerable_node))):
        entry = registry.get(node.get("label"))
        if entry and entry.get("docname") == app.env.docname:
            entry["node"] = node.deepcopy()


def _translate_toctree_captions(app, doctree):
    """Translate the captions of the parts of the book ("Getting started", ...).

    sphinx-external-toc inserts its toctrees after Sphinx's translation step, so their
    captions (extracted into the root page's catalog) would stay in English.
    """
    if not app.config.language or app.config.language == "en":
        return
    from sphinx.builders.gettext import docname_to_domain
    from sphinx.locale import init as init_locale

    domain = docname_to_domain(app.env.docname, app.config.gettext_compact)
    dirs = [str(Path(app.srcdir) / d) for d in app.config.locale_dirs]
    catalog, has_catalog = init_locale(dirs, app.config.language, domain)
    if not has_catalog:
        return
    for toctree in doctree.findall(addnodes.toctree):
        caption = toctree.get("caption")
        if caption:
            toctree["caption"] = catalog.gettext(caption)


def _switch_link(app, pagename: str) -> dict | None:
    """The link to this page in the other edition, or None where there is none."""
    target = app.config.language_switch.get(app.config.language or "en")
    if not target or app.builder.format != "html":
        return None
    to_root = "../" * pagename.count("/")  # from this page to its edition's root
    return {
        "url": f"{to_root}{target['root']}{pagename}.html",
        "label": target["label"],
        "hreflang": target["hreflang"],
        "title": target["title"],
    }


def _page_context(app, pagename, templatename, context, doctree):
    link = _switch_link(app, pagename)
    context["language_switch"] = link
    if link:
        alternate = (
            f'<link rel="alternate" hreflang="{link["hreflang"]}" href="{link["url"]}" />\n'
        )
        context["metatags"] = context.get("metatags", "") + alternate


def _config_inited(app, config):
    if not config.language_switch:
        return
    options = config.html_theme_options
    items = options.get("article_header_end", ["article-header-buttons.html"])
    if isinstance(items, str):
        items = [item.strip() for item in items.split(",") if item.strip()]
    if "language-switch.html" not in items:
        options["article_header_end"] = ["language-switch.html", *items]
    config.templates_path = [*config.templates_path, str(Path(__file__).parent / "templates")]


def setup(app):
    app.setup_extension("sphinx_exercise")
    app.add_directive("exercise", TranslatableExerciseDirective, override=True)
    app.add_config_value("language_switch", {}, "html")
    app.connect("config-inited", _config_inited)
    app.connect("doctree-read", _exercise_titles_to_catalog)
    app.connect("doctree-read", _register_translated_exercises)
    # before the toctree collector (priority 500) reads the captions into the navigation
    app.connect("doctree-read", _translate_toctree_captions, priority=100)
    app.connect("html-page-context", _page_context)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1.0"}
