"""Helpers shared by the importers: typed field access with clear errors, Python literals."""

from __future__ import annotations

import json
import math
from typing import Any

from sandbox.problems import SPLITS, ProblemError, short, type_name

_MISSING = object()

# Names a source may use for its split, mapped onto ours (held-out = never trained on).
_SPLIT_NAMES = {"train": "train", "training": "train", "heldout": "heldout", "held-out": "heldout",
                "test": "heldout", "valid": "heldout", "validation": "heldout", "eval": "heldout"}


def require(obj: dict, key: str, fmt: str) -> Any:
    if key not in obj:
        raise ProblemError(key, f"is required in the {fmt} format (this line has: "
                                f"{', '.join(short(k, 30) for k in list(obj)[:10]) or 'no keys'})")
    return obj[key]


def get_str(obj: dict, key: str, fmt: str, *, default: Any = _MISSING, allow_empty: bool = True) -> str:
    value = require(obj, key, fmt) if default is _MISSING else obj.get(key, default)
    if value is None and default is not _MISSING:
        value = default
    if not isinstance(value, str):
        raise ProblemError(key, f"must be a string, got {type_name(value)} {short(value)}")
    if not allow_empty and not value.strip():
        raise ProblemError(key, "is empty")
    return value


def get_list(obj: dict, key: str, fmt: str, *, default: Any = _MISSING) -> list:
    value = require(obj, key, fmt) if default is _MISSING else obj.get(key, default)
    if value is None and default is not _MISSING:
        value = default
    if not isinstance(value, list):
        raise ProblemError(key, f"must be a list, got {type_name(value)} {short(value)}")
    return value


def str_items(values: list, key: str) -> list[str]:
    for i, v in enumerate(values):
        if not isinstance(v, str):
            raise ProblemError(f"{key}[{i}]", f"must be a string, got {type_name(v)} {short(v)}")
    return values


def split_of(obj: dict) -> str:
    """The source's own split when it names one we understand, else train."""
    value = obj.get("split")
    if isinstance(value, str) and value.strip().lower() in _SPLIT_NAMES:
        return _SPLIT_NAMES[value.strip().lower()]
    if value is not None and value not in SPLITS:
        raise ProblemError("split", f"{short(value)} is not one of train, heldout (or test/validation)")
    return "train"


def json_string(obj: dict, key: str, fmt: str) -> Any:
    """A field that holds JSON encoded as a string (APPS), or the already decoded value."""
    value = require(obj, key, fmt)
    if not isinstance(value, str):
        return value
    if not value.strip():
        raise ProblemError(key, "is empty")
    try:
        decoded = json.loads(value)
    except json.JSONDecodeError as e:
        raise ProblemError(key, f"is not valid JSON inside the string: {e.msg} at {e.pos}") from None
    except (RecursionError, ValueError, MemoryError):
        raise ProblemError(key, "is not valid JSON inside the string (nested too deeply or too big)") from None
    # The line was valid text, but an escape inside the string ("\\ud800") decodes to a lone surrogate:
    # no text, and storing it would quietly turn it into U+FFFD. Refused here, on its line.
    where = lone_surrogate_path(decoded)
    if where is not None:
        raise ProblemError(key + where, "holds a lone surrogate escape such as \\ud800 inside the JSON string, "
                                        "which is not a character; escape both halves of a surrogate pair")
    return decoded


def lone_surrogate_path(value: Any) -> str | None:
    """Where in a decoded JSON value a string (or a key) holds a lone surrogate: ``""`` for the value
    itself, ``[2]``, ``.name[0]``; None when every string is text."""
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:  # depth-first, in order: the first bad string is the one reported
        item, path = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return path
        elif isinstance(item, dict):
            for k, v in reversed(item.items()):
                stack.append((v, f"{path}.{k}"))
                stack.append((k, path))  # a bad key is reported as its object's place
        elif isinstance(item, list):
            stack.extend((v, f"{path}[{i}]") for i, v in reversed(list(enumerate(item))))
    return None


def py_literal(value: Any, where: str) -> str:
    """Python source for a JSON value (NaN and infinities included)."""
    if value is None or isinstance(value, (bool, int, str)):
        text = repr(value)
    elif isinstance(value, float):
        if math.isnan(value):
            text = "float('nan')"
        elif math.isinf(value):
            text = "float('inf')" if value > 0 else "float('-inf')"
        else:
            text = repr(value)
    elif isinstance(value, list):
        text = "[" + ", ".join(py_literal(v, where) for v in value) + "]"
    elif isinstance(value, dict):
        text = "{" + ", ".join(f"{k!r}: {py_literal(v, where)}" for k, v in value.items()) + "}"
    else:
        raise ProblemError(where, f"cannot write {type_name(value)} as a Python value")
    return text


def docstring_text(text: str) -> str:
    """Text safe inside a triple-double-quoted docstring."""
    return text.replace("\\", "\\\\").replace('"""', '\\"\\"\\"')


def comment_block(text: str) -> str:
    """Text as `# ` comment lines: a valid Python prefix that needs no escaping."""
    return "".join(f"# {line}".rstrip() + "\n" for line in text.strip("\n").split("\n"))
