"""Make untrusted JSON storable in every database we support.

PostgreSQL's text and jsonb types cannot hold NUL characters (``\\u0000``), and model-written code,
program output and uploaded problems can contain them: a sampled completion from an untrained model
routinely does. Nor can UTF-8 (so no database or file) hold a lone surrogate (``"\\ud800"``, which
JSON allows and ``json.loads`` returns). Each NUL and each lone surrogate becomes U+FFFD (the
replacement character), which shows the reader that a character was there; everything else is kept
as it is.
"""
from __future__ import annotations

from typing import Any

NUL = "\x00"
REPLACEMENT = "\ufffd"


def db_safe(value: Any) -> Any:
    """``value`` with NUL characters and lone surrogates replaced in every string, dict key included (a
    new object when needed)."""
    if isinstance(value, str):
        return _text_safe(value.replace(NUL, REPLACEMENT) if NUL in value else value)
    if isinstance(value, dict):
        return {db_safe(k): db_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [db_safe(v) for v in value]
    return value


def _text_safe(value: str) -> str:
    """``value`` with each lone surrogate replaced (a surrogate pair is joined into its character)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return value
