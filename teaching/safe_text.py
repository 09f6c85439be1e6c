"""Text from submissions made safe to write: valid UTF-8, no terminal control, no spreadsheet formula.

Students choose their folder and file names and the messages their code raises, and all of
them end up in ``grades.csv`` and on the instructor's terminal. :func:`cell` makes any of them
safe there:

- lone surrogates (``"\\ud800"``) and undecodable bytes of a file name (an archive's Latin-1
  names) become backslash escapes, so the text is valid UTF-8;
- control and format characters (newline, ANSI escapes, right-to-left overrides) are written
  as escapes (``\\x1b``, ``\\n``), so a name cannot print a fake line;
- a leading ``=``, ``+``, ``-`` or ``@`` gets a ``'`` before it, so a spreadsheet shows the
  text instead of evaluating a formula.
"""

from __future__ import annotations

import os
import unicodedata

FORMULA_START = ("=", "+", "-", "@")


def utf8(text: str) -> str:
    """``text`` with undecodable file-name bytes as ``\\xe9`` and lone surrogates as ``\\ud800``."""
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def file_name(name: str) -> str:
    """A name from the file system (bytes decoded with ``surrogateescape``) as valid UTF-8."""
    return os.fsencode(name).decode("utf-8", "backslashreplace")


def escape_controls(text: str) -> str:
    """Control, format and line-separator characters as escapes: ``"a\\nb"`` -> ``"a\\\\nb"``."""
    return "".join(ch.encode("unicode_escape").decode("ascii")
                   if unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp", "Cs") else ch for ch in text)


def cell(value):
    """A CSV cell or a terminal field: strings made safe (see the module), numbers as they are."""
    if not isinstance(value, str):
        return value
    text = escape_controls(utf8(value))
    return "'" + text if text.lstrip(" ").startswith(FORMULA_START) else text
