"""Reading numbers from query strings: odd input is "no value", never a 500."""
from __future__ import annotations

DB_INT_MAX = 2**63 - 1  # the largest id or step a database integer column holds (SQLite overflows past it)


def int_param(raw: str | None, *, maximum: int = DB_INT_MAX) -> int | None:
    """``raw`` as a whole number 0..maximum written in ASCII digits; None for anything else.

    ``str.isdigit`` alone lets "²" and other Unicode digits through, which ``int()`` then refuses.
    """
    raw = (raw or "").strip()
    if not raw or not raw.isascii() or not raw.isdigit() or len(raw) > len(str(maximum)):
        return None
    value = int(raw)
    return value if value <= maximum else None
