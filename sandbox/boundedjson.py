"""Untrusted JSON read with bounds: ``loads`` refuses a document longer than ``max_size`` or nested
deeper than ``max_depth`` *before* decoding it, with a ``JSONRefused`` whose message names the limit.

The standard library's decoder recurses once per level of nesting and raises ``RecursionError`` (an
exception no request handler expects: a websocket consumer closed with 1011 and a traceback, the
sandbox service dropped the connection) at a depth that depends on how deep the caller's own stack
already is. The pre-scan here counts the depth in one pass (brackets inside strings do not count) and
stops as soon as the limit is passed, so a 50,000-deep array costs one short scan and a clear refusal.

Used by the sandbox service (request bodies) and by the web app's websocket consumers (client frames).
"""

from __future__ import annotations

import json
import re
from typing import Any

# The next bracket or string opening; and the rest of a string after its opening quote (possessive:
# no backtracking, so an unterminated string costs one pass, never a pass per quote).
_TOKEN = re.compile(r'[\[\]{}"]')
_STRING_REST = re.compile(r'[^"\\]*+(?:\\.[^"\\]*+)*+"', re.S)


class JSONRefused(ValueError):
    """A document ``loads`` will not decode. ``reason``: ``size``, ``depth``, ``encoding`` or ``syntax``;
    the message says what was wrong and, for a bound, which limit it passed."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


def nesting_depth(text: str, stop_after: int | None = None) -> int:
    """The deepest nesting of arrays and objects in ``text`` (0 for a scalar), counted without decoding;
    the count stops once it passes ``stop_after``. Malformed text gives some number: the decoder
    refuses it anyway."""
    depth = deepest = pos = 0
    search, string_rest = _TOKEN.search, _STRING_REST.match
    while True:
        m = search(text, pos)
        if m is None:
            return deepest
        ch, pos = m.group(), m.end()
        if ch == '"':
            s = string_rest(text, pos)
            if s is None:  # an unterminated string: nothing after it is structure
                return deepest
            pos = s.end()
        elif ch in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if stop_after is not None and deepest > stop_after:
                    return deepest
        else:
            depth -= 1


def loads(data: str | bytes, *, max_depth: int, max_size: int | None = None) -> Any:
    """``json.loads(data)`` within bounds: at most ``max_size`` characters (bytes for ``bytes``) and at
    most ``max_depth`` levels of arrays and objects. ``JSONRefused`` (a ValueError) otherwise, and for
    anything the decoder refuses (bad syntax, an integer literal of thousands of digits), never a
    RecursionError."""
    if max_size is not None and len(data) > max_size:
        unit = "bytes" if isinstance(data, (bytes, bytearray)) else "characters"
        raise JSONRefused("size", f"is {len(data)} {unit} long; the limit is {max_size}")
    if isinstance(data, (bytes, bytearray)):
        try:
            text = bytes(data).decode(json.detect_encoding(data))
        except UnicodeDecodeError as e:
            raise JSONRefused("encoding", f"is not UTF-8 (or UTF-16, -32) text: byte {e.start}") from None
    else:
        text = data
    # Fewer opening brackets than the limit cannot nest past it: no scan needed.
    if text.count("[") + text.count("{") > max_depth and nesting_depth(text, max_depth) > max_depth:
        raise JSONRefused("depth", f"nests arrays and objects more than {max_depth} levels deep (the limit)")
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise JSONRefused("syntax", f"is not JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    except (ValueError, RecursionError, MemoryError) as e:
        raise JSONRefused("syntax", f"is not JSON this server reads: {str(e)[:120]}") from None
