"""Server-side syntax highlighting of Python code (Pygments; no client library, no CDN).

The colours are inline styles (Pygments' monokai) inside a ``div.codehilite``, so a page or an HTML
fragment loaded into one needs no stylesheet of its own.
"""
from __future__ import annotations

from django.utils.safestring import SafeString, mark_safe
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import PythonLexer

_FORMATTER = HtmlFormatter(cssclass="codehilite", noclasses=True, style="monokai")


def highlight_python(code: str) -> SafeString:
    """HTML for ``code`` (escaped by Pygments), a ``div.codehilite`` with inline colours."""
    return mark_safe(highlight(code, PythonLexer(), _FORMATTER))
