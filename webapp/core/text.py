"""What a name a user gives (a run's, a problem set's) may hold.

A name is shown on pages, in logs, in the runs table and in downloaded file names, so it is one line of
visible text: no control characters (NUL, escape sequences that recolour a terminal, newlines), no
line or paragraph separators, no bidirectional overrides (which make a name read differently from what
it holds) and no lone surrogates (valid JSON, but no database or file can store them).
"""
from __future__ import annotations

import unicodedata

NAME_MAX = 200
_REFUSED_CATEGORIES = {"Cc": "a control character", "Cs": "a lone surrogate", "Zl": "a line separator",
                       "Zp": "a paragraph separator"}
_BIDI_CONTROLS = set("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def name_problem(name: str, *, limit: int = NAME_MAX) -> str | None:
    """Why ``name`` (already stripped) cannot be a name, or None when it can; the text says how to fix it."""
    if not name:
        return "must not be empty"
    if len(name) > limit:
        return f"must be at most {limit} characters; got {len(name)}"
    for i, ch in enumerate(name):
        what = _REFUSED_CATEGORIES.get(unicodedata.category(ch))
        if what is None and ch in _BIDI_CONTROLS:
            what = "a bidirectional control character"
        if what is not None:
            return f"must be one line of visible text; character {i + 1} is {what} ({ch!r}): remove it"
    return None


def text_problem(text: str) -> str | None:
    """Why ``text`` cannot be stored (free text such as notes: newlines and tabs are fine), or None."""
    for i, ch in enumerate(text):
        if ch == "\x00" or unicodedata.category(ch) == "Cs":
            return f"character {i + 1} ({ch!r}) cannot be stored: remove it"
    return None
