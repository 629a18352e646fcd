"""The engine under the run config: typed, bounded dataclass sections read from YAML/JSON.

``training/config.py`` declares *what* a run config is (its sections, fields, bounds and cross-field
rules); this module is *how* such declarations work, and knows nothing of runs:

- ``setting(...)`` declares a field whose metadata (``ge``/``gt``/``le``/``lt``, ``choices``,
  ``recommended``, ``below``, ``max_length``, ``max_items``) drives both validation and the JSON Schema;
- ``Section`` is the base of a frozen dataclass section: type and bound checks from that metadata on
  construction, then the section's own ``_check()``; a section may ``upgrade(data)`` older spellings of its
  keys before they are read;
- ``from_dict(cls, data)`` coerces YAML/JSON values to the declared types (``ConfigError`` naming the dotted
  path of the first bad value), ``to_dict`` is its inverse, ``leaf_fields(root)`` lists every leaf by dotted
  name, ``section_schema(cls)`` is the JSON Schema with the field docstrings (``field_docs``) as descriptions;
- ``yaml_load`` / ``json_number`` read config text keeping a number no float holds (``1e-400``) as a
  ``LostNumber``, so validation refuses it naming the field instead of taking a 0 nobody wrote.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import functools
import inspect
import math
import sys
import types
import typing
from dataclasses import field
from typing import Any, Union

class ConfigError(ValueError):
    """A bad config value. ``field`` is the dotted path, e.g. ``ppo.clip_range``."""

    def __init__(self, field: str, message: str):
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}" if field else message)

    def prefixed(self, prefix: str) -> "ConfigError":
        return ConfigError(f"{prefix}.{self.field}" if self.field else prefix, self.message)


class LostNumber(str):
    """A number literal no float holds as written: ``1e-400`` or a 401-digit fraction (read as 0.0), ``1e400``
    (read as inf). The readers of config text (``yaml_load``, ``json_number``) keep such a literal as this
    string, so that validation refuses it naming the field instead of taking a 0 nobody wrote."""


def json_number(text: str) -> float | LostNumber:
    """``float(text)`` for a number literal, or ``LostNumber(text)`` when the float would not be the number
    written (``json.loads(..., parse_float=json_number)``)."""
    value = float(text)
    if value == 0.0 and any(c in "123456789" for c in text.lower().partition("e")[0]):
        return LostNumber(text)
    if math.isinf(value) and not any(word in text.lower() for word in ("inf", "infinity")):
        return LostNumber(text)
    return value


def yaml_load(text: str) -> Any:
    """``yaml.safe_load(text)``, keeping a float literal no float holds (``1.0e-400``) as a ``LostNumber``."""
    import yaml

    return yaml.load(text, Loader=_yaml_loader())


@functools.cache
def _yaml_loader() -> type:
    import yaml

    def construct_float(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> float | LostNumber:
        value = loader.construct_yaml_float(node)
        if value == 0.0 or math.isinf(value):
            try:
                return json_number(node.value.replace("_", ""))
            except ValueError:  # .inf, a sexagesimal 1:30.0: YAML's own spellings, read as YAML does
                pass
        return value

    class ConfigLoader(yaml.SafeLoader):
        pass

    ConfigLoader.add_constructor("tag:yaml.org,2002:float", construct_float)
    return ConfigLoader


def lost_number_message(text: str) -> str:
    value = float(text)
    shown = text if len(text) <= 40 else f"{text[:20]}...{text[-12:]} ({len(text)} characters)"
    if value == 0.0:
        return (f"{shown} is too small for a float and would be read as 0 (the smallest positive one is about "
                f"5e-324); write 0 if you mean 0")
    return f"{shown} is too large for a float (the largest is about 1.8e308)"


# --------------------------------------------------------------------------------------------------
# Fields and sections
# --------------------------------------------------------------------------------------------------


def setting(default: Any = dataclasses.MISSING, *, factory: Any = dataclasses.MISSING, ge=None, gt=None,
           le=None, lt=None, choices=None, recommended=None, below=None, max_length=None, max_items=None) -> Any:
    """A dataclass field whose bounds/choices drive both validation and the JSON schema.

    ``below`` says why a value under the lower bound cannot work; the error for such a value ends with it.
    ``max_length`` bounds a string (each string of a list); ``max_items`` the entries of a list.
    """
    meta = {k: v for k, v in dict(ge=ge, gt=gt, le=le, lt=lt, choices=choices, recommended=recommended,
                                   below=below, max_length=max_length, max_items=max_items).items() if v is not None}
    if factory is not dataclasses.MISSING:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


class Section:
    """Base for config sections: generic checks from field metadata, then ``_check()``.

    A section whose keys were once spelled otherwise defines ``upgrade(data) -> data`` (a staticmethod):
    ``from_dict`` applies it to the raw mapping first, so saved configs keep loading."""

    def __post_init__(self) -> None:
        types_of = hints(type(self))
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            # Friendly coercions for values built in Python (lists -> tuples keeps the object hashable).
            if isinstance(value, list):
                object.__setattr__(self, f.name, tuple(value))
                value = getattr(self, f.name)
            _check_type(value, types_of[f.name], f.name)
            _check_bounds(value, f)
        self._check()

    def _check(self) -> None:  # cross-field rules of one section
        pass


def _check_bounds(value: Any, f: dataclasses.Field) -> None:
    if value is None or isinstance(value, bool):
        return
    m = f.metadata
    _check_lengths(value, f.name, m)
    # A list field with choices (reward.penalize_flags) checks each of its items.
    for item in (value if isinstance(value, tuple) and "choices" in m else (value,)):
        if "choices" in m and item not in m["choices"]:
            close = difflib.get_close_matches(str(item), m["choices"], n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(f.name, f"must be one of {', '.join(m['choices'])}; got {item!r}{hint}")
    if isinstance(value, (int, float)):
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f.name, f"must be a finite number, got {value!r}")
        ok = ((m.get("ge") is None or value >= m["ge"]) and (m.get("gt") is None or value > m["gt"])
              and (m.get("le") is None or value <= m["le"]) and (m.get("lt") is None or value < m["lt"]))
        if not ok:
            raise ConfigError(f.name, f"must be {_range_text(m)}; got {value!r}" + _below_text(m, value)
                              + _recommend_text(m))


def _check_lengths(value: Any, name: str, m: typing.Mapping) -> None:
    """``max_items`` of a list, ``max_length`` of a string or of each string of a list."""
    if isinstance(value, tuple) and "max_items" in m and len(value) > m["max_items"]:
        raise ConfigError(name, f"must have at most {m['max_items']} entries; got {len(value)}")
    for i, item in enumerate(value if isinstance(value, tuple) else (value,)):
        if isinstance(item, str) and "max_length" in m and len(item) > m["max_length"]:
            where = f" (entry {i})" if isinstance(value, tuple) else ""
            raise ConfigError(name, f"must be at most {m['max_length']} characters long{where}; "
                                    f"got {len(item)}: {item[:40]!r}...")


def _check_text(value: str, path: str) -> str:
    """``value`` when it is text UTF-8 can carry; a lone surrogate (``"\\ud800"``, valid JSON) is refused
    here rather than failing later where the config is written or stored."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ConfigError(path, f"must be valid Unicode text; got a lone surrogate {value[e.start]!r} at "
                                f"character {e.start} of {value[:40]!r}") from None
    return value


def _range_text(m: dict) -> str:
    lo = f"{'>=' if 'ge' in m else '>'} {m.get('ge', m.get('gt'))}" if ("ge" in m or "gt" in m) else ""
    hi = f"{'<=' if 'le' in m else '<'} {m.get('le', m.get('lt'))}" if ("le" in m or "lt" in m) else ""
    return " and ".join(x for x in (lo, hi) if x)


def _recommend_text(m: dict) -> str:
    if "recommended" in m:
        lo, hi = m["recommended"]
        return f" (recommended range {lo}-{hi})"
    return ""


def _below_text(m: dict, value: float) -> str:
    low = ("ge" in m and value < m["ge"]) or ("gt" in m and value <= m["gt"])
    return f": {m['below']}" if low and "below" in m else ""


# --------------------------------------------------------------------------------------------------
# Types and docstrings
# --------------------------------------------------------------------------------------------------


@functools.cache
def hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def union_args(tp: Any) -> tuple[Any, ...] | None:
    if typing.get_origin(tp) in (Union, types.UnionType):
        return typing.get_args(tp)
    return None


def _describe(tp: Any) -> str:
    args = union_args(tp)
    if args:
        return " or ".join(_describe(a) for a in args)
    if tp is type(None):
        return "null"
    if typing.get_origin(tp) is tuple:
        return "a list of strings"
    if dataclasses.is_dataclass(tp):
        return "a mapping"
    return {int: "an integer", float: "a number", str: "a string", bool: "true or false"}.get(tp, str(tp))


def _matches(value: Any, tp: Any) -> bool:
    args = union_args(tp)
    if args:
        return any(_matches(value, a) for a in args)
    if tp is type(None):
        return value is None
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is str:
        return isinstance(value, str)
    if typing.get_origin(tp) is tuple:
        return isinstance(value, tuple) and all(isinstance(v, str) for v in value)
    if dataclasses.is_dataclass(tp):
        return isinstance(value, tp)
    return isinstance(value, tp)


def _check_type(value: Any, tp: Any, name: str) -> None:
    if not _matches(value, tp):
        raise ConfigError(name, f"must be {_describe(tp)}; got {value!r} ({type(value).__name__})")


@functools.cache
def module_field_docs(module_name: str) -> dict[str, dict[str, str]]:
    """``{ClassName: {field: docstring}}`` of every class in module ``module_name``, read from its source
    with ``ast`` (the string literal on the line under each annotated field)."""
    tree = ast.parse(inspect.getsource(sys.modules[module_name]))
    docs: dict[str, dict[str, str]] = {}
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        fields: dict[str, str] = {}
        for prev, cur in zip(node.body, node.body[1:]):
            if (isinstance(prev, ast.AnnAssign) and isinstance(prev.target, ast.Name)
                    and isinstance(cur, ast.Expr) and isinstance(cur.value, ast.Constant)
                    and isinstance(cur.value.value, str)):
                fields[prev.target.id] = inspect.cleandoc(cur.value.value)
        docs[node.name] = fields
    return docs


def field_docs_of(cls: type) -> dict[str, str]:
    """The field docstrings of section ``cls`` (see ``module_field_docs``)."""
    return module_field_docs(cls.__module__).get(cls.__name__, {})


# --------------------------------------------------------------------------------------------------
# dict <-> dataclasses
# --------------------------------------------------------------------------------------------------


def _coerce(value: Any, tp: Any, path: str) -> Any:
    """Convert a YAML/JSON value to the field type ``tp``; ConfigError naming ``path`` otherwise."""
    args = union_args(tp)
    if args:
        if value is None and type(None) in args:
            return None
        errors = []
        for a in (a for a in args if a is not type(None)):
            try:
                return _coerce(value, a, path)
            except ConfigError as e:
                errors.append((a, e))
        # The branch of the value's own shape knows best what is wrong with it (a list's bad entry).
        shaped = [e for a, e in errors if _same_shape(value, a)]
        if len(errors) == 1 or len(shaped) == 1:
            raise (shaped or [errors[0][1]])[0]
        raise ConfigError(path, f"must be {_describe(tp)}; got {value!r}")
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if value is None:
            return from_dict(tp, {}, path)
        if not isinstance(value, dict):
            raise ConfigError(path, f"must be a mapping of {', '.join(f.name for f in dataclasses.fields(tp))}; "
                                    f"got {value!r}")
        return from_dict(tp, value, path)
    if isinstance(value, LostNumber):  # a number no float holds: whatever the field, not what was written
        raise ConfigError(path, lost_number_message(value) if tp is float else
                          f"must be {_describe(tp)}; got the number {value}")
    if typing.get_origin(tp) is tuple:
        if isinstance(value, str):  # a single string where a list is expected: almost always a slip
            raise ConfigError(path, f"must be a list of strings; got the string {value!r} (write [{value!r}])")
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) and not isinstance(v, LostNumber)
                                                            for v in value):
            raise ConfigError(path, f"must be a list of strings; got {value!r}")
        return tuple(_check_text(v, path) for v in value)
    if tp is float:
        # PyYAML reads `2e-6` (no dot) as a string; accept numeric strings rather than fail on a YAML quirk.
        if isinstance(value, str):
            try:
                number = json_number(value.strip())
            except ValueError:
                pass
            else:
                if isinstance(number, LostNumber):
                    raise ConfigError(path, lost_number_message(number))
                return number
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(path, f"must be a number; got {value!r}")
        try:
            return float(value)
        except OverflowError:  # an integer of hundreds of digits: past any float
            raise ConfigError(path, f"must be a finite number; got an integer of {len(str(abs(value)))} digits") from None
    if tp is int:
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(path, f"must be an integer; got {value!r}")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(path, f"must be true or false; got {value!r}")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(path, f"must be a string; got {value!r}")
        return _check_text(value, path)
    raise TypeError(f"unsupported config type {tp!r} at {path}")


def _same_shape(value: Any, tp: Any) -> bool:
    if typing.get_origin(tp) is tuple:
        return isinstance(value, (list, tuple))
    if dataclasses.is_dataclass(tp):
        return isinstance(value, dict)
    return tp is str and isinstance(value, str)


def from_dict(cls: type, data: dict, prefix: str = "") -> Any:
    upgrade = getattr(cls, "upgrade", None)
    if upgrade is not None:
        data = upgrade(data)
    names = [f.name for f in dataclasses.fields(cls)]
    types_of = hints(cls)
    kwargs = {}
    for key, value in data.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(key, str):
            _check_text(key, path)
        if key not in names:
            close = difflib.get_close_matches(str(key), names, n=1)
            hint = f"did you mean '{close[0]}'? " if close else ""
            raise ConfigError(path, f"unknown key; {hint}valid keys{' in ' + prefix if prefix else ''}: "
                                    f"{', '.join(names)}")
        kwargs[key] = _coerce(value, types_of[key], path)
    try:
        return cls(**kwargs)
    except ConfigError as e:
        raise e.prefixed(prefix) if prefix else e


def leaf_fields(root: type) -> dict[str, dataclasses.Field]:
    """Every leaf field under section ``root`` by dotted name (``train.steps``), sections descended into."""
    out: dict[str, dataclasses.Field] = {}

    def walk(cls: type, prefix: str) -> None:
        types_of = hints(cls)
        for f in dataclasses.fields(cls):
            tp = types_of[f.name]
            section = next((a for a in (union_args(tp) or (tp,)) if dataclasses.is_dataclass(a)), None)
            if section is not None:
                walk(section, f"{prefix}{f.name}.")
            else:
                out[f"{prefix}{f.name}"] = f

    walk(root, "")
    return out


def to_dict(cfg: Any) -> dict:
    """Plain dict (lists, not tuples) that ``config_from_dict`` turns back into an equal config."""

    def plain(v: Any) -> Any:
        if dataclasses.is_dataclass(v):
            return {f.name: plain(getattr(v, f.name)) for f in dataclasses.fields(v)}
        if isinstance(v, tuple):
            return [plain(x) for x in v]
        return v

    return plain(cfg)


# --------------------------------------------------------------------------------------------------
# JSON Schema
# --------------------------------------------------------------------------------------------------


def _type_schema(tp: Any, ceilings: typing.Mapping[str, float] | None = None, prefix: str = "") -> dict:
    args = union_args(tp)
    if args:
        non_null = [a for a in args if a is not type(None)]
        nullable = len(non_null) < len(args)
        if len(non_null) == 1 and not dataclasses.is_dataclass(non_null[0]) \
                and typing.get_origin(non_null[0]) is not tuple:
            s = _type_schema(non_null[0])
            s["type"] = [s["type"], "null"] if nullable else s["type"]
            return s
        return {"anyOf": [_type_schema(a, ceilings, prefix) for a in non_null]
                + ([{"type": "null"}] if nullable else [])}
    if tp is type(None):
        return {"type": "null"}
    if dataclasses.is_dataclass(tp):
        return section_schema(tp, ceilings, prefix)
    if typing.get_origin(tp) is tuple:
        return {"type": "array", "items": {"type": "string"}}
    return {"type": {int: "integer", float: "number", str: "string", bool: "boolean"}[tp]}


def _length_schema(s: dict, m: typing.Mapping) -> None:
    """``max_length`` / ``max_items`` onto every string and array branch of a field's schema."""
    for branch in s.get("anyOf", [s]):
        if branch.get("type") in ("string", ["string", "null"]) and "max_length" in m:
            branch["maxLength"] = m["max_length"]
        if branch.get("type") == "array":
            if "max_items" in m:
                branch["maxItems"] = m["max_items"]
            if "max_length" in m:
                branch["items"]["maxLength"] = m["max_length"]


def section_schema(cls: type, ceilings: typing.Mapping[str, float] | None = None, prefix: str = "") -> dict:
    docs = field_docs_of(cls)
    types_of = hints(cls)
    props = {}
    for f in dataclasses.fields(cls):
        s = _type_schema(types_of[f.name], ceilings, f"{prefix}{f.name}.")
        m = f.metadata
        bounds = {"ge": "minimum", "gt": "exclusiveMinimum", "le": "maximum", "lt": "exclusiveMaximum"}
        target = s
        if "anyOf" in s:  # put numeric bounds / enums on the non-null branch
            target = next((b for b in s["anyOf"] if b.get("type") != "null"), s)
        for k, name in bounds.items():
            if k in m:
                target[name] = m[k]
        ceiling = (ceilings or {}).get(f"{prefix}{f.name}")
        if ceiling is not None and ceiling < target.get("maximum", math.inf) \
                and ceiling < target.get("exclusiveMaximum", math.inf):
            target.pop("exclusiveMaximum", None)
            target["maximum"] = ceiling
        if "choices" in m:
            (target["items"] if target.get("type") == "array" else target)["enum"] = list(m["choices"])
        _length_schema(s, m)
        if "recommended" in m:
            s["x-recommended"] = {"minimum": m["recommended"][0], "maximum": m["recommended"][1]}
        if "below" in m:
            s["x-below-minimum"] = m["below"]
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        s["default"] = to_dict(default)
        s["description"] = docs.get(f.name, "")
        s["title"] = f.name.replace("_", " ")
        props[f.name] = s
    return {"type": "object", "title": cls.__name__, "description": inspect.getdoc(cls).splitlines()[0],
            "properties": props, "additionalProperties": False}
