"""Server-side syntax highlighting of candidate code (Pygments; no client library, no CDN)."""
from __future__ import annotations

from functools import lru_cache

from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import PythonLexer

_FORMATTER = HtmlFormatter(cssclass="codehilite", nowrap=False)


def highlight_python(code: str) -> str:
    """HTML (escaped by Pygments) for ``code``; styles from ``pygments_css()``."""
    return highlight(code, PythonLexer(), _FORMATTER)


@lru_cache(maxsize=1)
def pygments_css() -> str:
    return HtmlFormatter(style="monokai").get_style_defs(".codehilite")
