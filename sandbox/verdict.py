"""Trusted verdicts: decide tests outside the candidate's process.

A function problem's test is a few statements, usually one `assert`. An `assert` is evaluated here,
in the host, by a small interpreter over the assertion's syntax tree: literals, comparisons, boolean
logic, arithmetic, subscripts and a whitelist of pure builtins (`len`, `sorted`, `abs`, `math.isclose`
...) run here on plain data; every other sub-expression (a call of the candidate's function, a name
from its namespace) is sent to the sandboxed child, which evaluates it and answers with the value
serialized as exact builtin types (harness.encode). The decoder below rebuilds genuine `int`/`list`/...
objects, so no candidate-defined `__eq__` can take part in a comparison, and the expected values of
`assert f(x) == LITERAL` never even reach the sandbox. interpret.py runs whole tests (loops, ifs,
assignments) on top of this evaluator.
"""

from __future__ import annotations

import ast
import json
import marshal
import math
import operator
from typing import Callable

MAX_ITEMS = 1_000_000
MAX_DEPTH = 200
MAX_RESULT_ITEMS = 10_000_000
MAX_RESULT_BITS = 1 << 22


class Abort(Exception):
    """Raised through the evaluator by `ask` (the child failed, the deadline passed...): never a
    verdict of the trusted evaluation itself."""


class RemoteError(Abort):
    """The child raised (or could not serialize) while evaluating a sub-expression."""

    def __init__(self, etype: str, message: str, memory: bool = False):
        super().__init__(message)
        self.etype = etype
        self.memory = memory


class ProtocolViolation(Abort):
    """The child answered something that is not a well-formed value."""


class Materialized:
    """An iterator/generator/range/view the child returned, as its items. Iterable, not a sequence:
    equal only to itself, like the lazy object it stands for."""

    __slots__ = ("items",)

    def __init__(self, items: list):
        self.items = items

    def __iter__(self):
        return iter(self.items)

    def __repr__(self) -> str:
        return f"<iterator of {len(self.items)} items>"


# --- decoding ----------------------------------------------------------------------------------

def decode(node, _depth: int = 0, _budget: list | None = None):
    """Tagged JSON (see harness.encode) -> genuine builtin values; ProtocolViolation on anything else."""
    budget = _budget if _budget is not None else [MAX_ITEMS]
    budget[0] -= 1
    if budget[0] < 0 or _depth > MAX_DEPTH:
        raise ProtocolViolation("value too large or nested too deeply")
    t = type(node)
    if node is None or t is bool or t is str:
        return node
    if t is int:
        return node
    if t is not list or not node or type(node[0]) is not str:
        raise ProtocolViolation(f"malformed value node of type {t.__name__}")
    tag, rest = node[0], node[1:]
    d = _depth + 1
    try:
        if tag == "I" and len(rest) == 1 and type(rest[0]) is str and len(rest[0]) < 1 << 20:
            return int(rest[0], 16)
        if tag == "f" and len(rest) == 1 and type(rest[0]) is str:
            return float.fromhex(rest[0])
        if tag == "c" and len(rest) == 2 and all(type(r) is str for r in rest):
            return complex(float.fromhex(rest[0]), float.fromhex(rest[1]))
        if tag in ("b", "B") and len(rest) == 1 and type(rest[0]) is str:
            data = bytes.fromhex(rest[0])
            return bytearray(data) if tag == "B" else data
        if len(rest) == 1 and type(rest[0]) is list:
            items = rest[0]
            if tag == "l":
                return [decode(v, d, budget) for v in items]
            if tag == "t":
                return tuple(decode(v, d, budget) for v in items)
            if tag == "s":
                return {decode(v, d, budget) for v in items}
            if tag == "F":
                return frozenset(decode(v, d, budget) for v in items)
            if tag == "it":
                return Materialized([decode(v, d, budget) for v in items])
            if tag == "d":
                out = {}
                for pair in items:
                    if type(pair) is not list or len(pair) != 2:
                        raise ProtocolViolation("malformed dict item")
                    out[decode(pair[0], d, budget)] = decode(pair[1], d, budget)
                return out
    except (ValueError, TypeError, OverflowError) as e:  # unhashable keys, bad hex
        raise ProtocolViolation(f"malformed {tag!r} value: {e}") from None
    raise ProtocolViolation(f"unknown value tag {tag!r}")


def parse_frame(body: bytes) -> dict:
    try:
        msg = json.loads(body.decode())  # str: json.loads would sniff a bytes' encoding first
    except (ValueError, RecursionError) as e:
        raise ProtocolViolation(f"reply is not JSON: {type(e).__name__}") from None
    if type(msg) is not dict or type(msg.get("ok")) is not bool:
        raise ProtocolViolation("reply is not an object with a boolean 'ok'")
    return msg


# --- the trusted evaluator ---------------------------------------------------------------------

def _literal_blob(node: ast.AST) -> bytes | None:
    """A display made only of literals (a test's expected `[4, 6]` or `{'a': 2}`), marshalled
    once: plans are cached, so the same node comes back for every candidate, and unmarshalling
    builds a fresh copy (a method call in the test may mutate it) far faster than walking the tree.
    None for a display with names, calls or anything else in it."""
    try:
        return node.__dict__["_literal_blob"]
    except KeyError:
        pass
    blob = None
    # Constants and displays only: literal_eval would also call set(), which the problem may
    # shadow (the tree walk then leaves it to the child).
    if not any(isinstance(n, (ast.Call, ast.Name)) for n in ast.walk(node)):
        try:
            blob = marshal.dumps(ast.literal_eval(node))
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            pass
    node._literal_blob = blob
    return blob


def _guarded_range(*args):
    r = range(*args)
    if len(r) > MAX_RESULT_ITEMS:
        raise OverflowError("range too long to check")
    return r


_TRUSTED_FUNCS: dict[str, Callable] = {
    "abs": abs, "all": all, "any": any, "bool": bool, "dict": dict, "float": float,
    "frozenset": frozenset, "int": int, "len": len, "list": list, "max": max, "min": min,
    "round": round, "set": set, "sorted": sorted, "str": str, "sum": sum, "tuple": tuple,
    "isinstance": isinstance, "type": type, "reversed": reversed, "enumerate": enumerate,
    "zip": zip, "range": _guarded_range, "repr": repr, "chr": chr, "ord": ord, "divmod": divmod,
    "complex": complex,
}
_TRUSTED_TYPES = {"int", "float", "str", "bool", "list", "tuple", "dict", "set", "frozenset",
                  "bytes", "bytearray", "complex", "type"}
_MATH = {name: getattr(math, name) for name in (
    "isclose", "sqrt", "floor", "ceil", "fabs", "inf", "nan", "pi", "e", "tau", "isnan", "isinf",
    "isfinite", "log", "log2", "log10", "exp", "trunc", "gcd", "hypot", "copysign", "dist")}
_FUNC_KEYWORDS = {"key", "cmp"}

_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
           ast.Pow: operator.pow, ast.LShift: operator.lshift, ast.RShift: operator.rshift,
           ast.BitOr: operator.or_, ast.BitAnd: operator.and_, ast.BitXor: operator.xor,
           ast.MatMult: operator.matmul}
_CMPOPS = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
           ast.Gt: operator.gt, ast.GtE: operator.ge, ast.Is: operator.is_,
           ast.IsNot: operator.is_not, ast.In: lambda a, b: a in b,
           ast.NotIn: lambda a, b: a not in b}
_UNOPS = {ast.Not: operator.not_, ast.USub: operator.neg, ast.UAdd: operator.pos,
          ast.Invert: operator.invert}


def _size(x) -> int:
    return len(x) if isinstance(x, (str, bytes, bytearray, list, tuple)) else 0


def _binop(op: type, a, b):
    # Values come from the candidate: refuse operations whose result could exhaust the host.
    if op is ast.Pow and type(a) is int and type(b) is int and b > 0:
        if max(a.bit_length(), 1) * b > MAX_RESULT_BITS:
            raise OverflowError("power too large to check")
    if op is ast.LShift and type(b) is int and b > MAX_RESULT_BITS:
        raise OverflowError("shift too large to check")
    if op is ast.Mult:
        for seq, n in ((a, b), (b, a)):
            if _size(seq) and type(n) is int and _size(seq) * n > MAX_RESULT_ITEMS:
                raise OverflowError("repetition too large to check")
    return _BINOPS[op](a, b)


_METHODS: dict[type, frozenset[str]] = {
    list: frozenset("append extend insert pop remove index count sort reverse copy clear".split()),
    dict: frozenset("get keys values items copy update setdefault pop clear".split()),
    set: frozenset("add update remove discard copy union intersection difference "
                   "symmetric_difference issubset issuperset isdisjoint".split()),
    frozenset: frozenset("copy union intersection difference symmetric_difference issubset "
                         "issuperset isdisjoint".split()),
    tuple: frozenset("index count".split()),
    str: frozenset("lower upper strip lstrip rstrip split rsplit join startswith endswith isdigit "
                   "isalpha isalnum isspace islower isupper isnumeric isdecimal count find rfind "
                   "index rindex title capitalize swapcase splitlines partition rpartition encode "
                   "replace casefold".split()),
    bytes: frozenset("decode hex count find startswith endswith split strip".split()),
}
_ALL_METHODS = frozenset().union(*_METHODS.values())


def _call_method(receiver, name: str, args: list, kwargs: dict):
    allowed = _METHODS.get(type(receiver), frozenset())
    if name not in allowed:
        raise TypeError(f"{type(receiver).__name__}.{name}() cannot be evaluated outside the sandbox")
    if name == "replace" and len(args) >= 2 and _size(args[1]) > 1 and \
            _size(receiver) * _size(args[1]) > MAX_RESULT_ITEMS:
        raise OverflowError("replacement too large to check")
    if name == "sort" and kwargs.keys() - {"reverse"}:
        raise TypeError("sort(key=...) cannot be evaluated outside the sandbox")
    return getattr(receiver, name)(*args, **kwargs)


def free_names(node: ast.AST) -> frozenset[str]:
    # Plans are parsed once and cached, so each node's names are computed once (kept on the node).
    hit = getattr(node, "_crucible_free_names", None)
    if hit is None:
        hit = frozenset(n.id for n in ast.walk(node) if isinstance(n, ast.Name))
        node._crucible_free_names = hit
    return hit


def shippable(value):
    """A host value as something marshal can carry into the sandbox."""
    if isinstance(value, Materialized):
        return list(value.items)
    if isinstance(value, range):
        return list(value)
    return value


class Evaluator:
    """Evaluates one expression. `ask(source, bindings)` returns the child's value of a
    sub-expression, evaluated after binding `bindings` (the host's values of names it uses) in the
    child's namespace. `env` holds the names the test bound on the host (loop variables...)."""

    def __init__(self, source: str, ask: Callable[..., object], shadowed: frozenset[str],
                 env: dict | None = None):
        self.source = source
        self.ask = ask
        self.shadowed = shadowed
        self.env = env if env is not None else {}

    def bindings(self, node: ast.AST) -> dict:
        return {n: shippable(self.env[n]) for n in free_names(node) if n in self.env}

    def opaque(self, node: ast.AST):
        return self.ask(self.source_of(node), self.bindings(node))

    def source_of(self, node: ast.AST) -> str:
        hit = getattr(node, "_crucible_source_of", None)
        if hit is not None and hit[0] is self.source:  # cached for this node of this test's source
            return hit[1]
        src = ast.get_source_segment(self.source, node) or ast.unparse(node)
        src = "(" + src + ")" if "\n" in src else src
        node._crucible_source_of = (self.source, src)
        return src

    def is_opaque(self, node: ast.AST) -> bool:
        """Whether eval() hands `node` to the child as a whole (mirrors eval's dispatch)."""
        if isinstance(node, (ast.Constant, ast.UnaryOp, ast.BinOp, ast.BoolOp, ast.Compare,
                             ast.IfExp, ast.Subscript)):
            return False
        if isinstance(node, ast.Name) and node.id in self.env:
            return False
        if self.method_call(node):
            return False
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            return any(isinstance(e, ast.Starred) for e in node.elts)
        if isinstance(node, ast.Dict):
            return None in node.keys
        if isinstance(node, ast.Name):
            return not (node.id in _TRUSTED_TYPES | {"None"} and node.id not in self.shadowed)
        if isinstance(node, ast.Attribute):
            return self.trusted_callable(node) is None
        if isinstance(node, ast.Call):
            func = self.trusted_callable(node.func)
            return not (func is not None and self.call_is_trusted(node, func))
        return True

    def method_call(self, node: ast.AST) -> bool:
        """`RECEIVER.method(args)` with a whitelisted method of a builtin type, data-only args: the
        receiver is evaluated (here or in the child) and the method runs here."""
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in _ALL_METHODS):
            return False
        if not self.host_owned(node.func.value):
            return False  # the child's object (maybe a custom class): its method runs there
        args = list(node.args) + [k.value for k in node.keywords]
        return not any(isinstance(a, (ast.Starred, ast.Lambda)) for a in args) and \
            not any(k.arg is None or k.arg in _FUNC_KEYWORDS for k in node.keywords)

    def host_owned(self, node: ast.AST) -> bool:
        """A literal, a display, a name the test bound here, or a method call on one of those."""
        if isinstance(node, (ast.Constant, ast.List, ast.Tuple, ast.Set, ast.Dict)):
            return True
        if isinstance(node, ast.Name):
            return node.id in self.env
        return self.method_call(node)

    def trusted_callable(self, node: ast.AST):
        if isinstance(node, ast.Name) and node.id in _TRUSTED_FUNCS and node.id not in self.shadowed:
            return _TRUSTED_FUNCS[node.id]
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id == "math" and "math" not in self.shadowed and node.attr in _MATH):
            return _MATH[node.attr]
        return None

    def trusted_type(self, node: ast.AST) -> bool:
        if isinstance(node, ast.Name):
            return node.id in _TRUSTED_TYPES and node.id not in self.shadowed
        if isinstance(node, ast.Tuple):
            return all(self.trusted_type(e) for e in node.elts)
        if isinstance(node, ast.Constant):
            return node.value is None
        return False

    def call_is_trusted(self, node: ast.Call, func) -> bool:
        args = list(node.args) + [k.value for k in node.keywords]
        if any(isinstance(a, (ast.Starred, ast.Lambda)) for a in args):
            return False
        if any(k.arg is None or k.arg in _FUNC_KEYWORDS for k in node.keywords):
            return False
        if func is isinstance:
            return len(node.args) == 2 and self.trusted_type(node.args[1])
        if func in (sorted, max, min) and node.keywords:
            return all(k.arg in ("reverse", "default") for k in node.keywords)
        return True

    def eval(self, node: ast.AST):
        ev = self.eval
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, (ast.List, ast.Tuple, ast.Set, ast.Dict)):
            blob = _literal_blob(node)
            if blob is not None:
                return marshal.loads(blob)
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)) and not any(
                isinstance(e, ast.Starred) for e in node.elts):
            items = [ev(e) for e in node.elts]
            return {ast.List: list, ast.Tuple: tuple, ast.Set: set}[type(node)](items)
        if isinstance(node, ast.Dict) and None not in node.keys:
            return {ev(k): ev(v) for k, v in zip(node.keys, node.values)}
        if isinstance(node, ast.Name) and node.id in self.env:
            return self.env[node.id]
        if isinstance(node, ast.Name) and node.id in _TRUSTED_TYPES | {"None"} \
                and node.id not in self.shadowed:
            return {"None": None, "bytes": bytes, "bytearray": bytearray, "type": type,
                    **{k: v for k, v in _TRUSTED_FUNCS.items()}}[node.id]
        if isinstance(node, ast.UnaryOp):
            return _UNOPS[type(node.op)](ev(node.operand))
        if isinstance(node, ast.BinOp):
            return _binop(type(node.op), ev(node.left), ev(node.right))
        if isinstance(node, ast.BoolOp):
            value = None
            for v in node.values:
                value = ev(v)
                if isinstance(node.op, ast.And) and not value:
                    return value
                if isinstance(node.op, ast.Or) and value:
                    return value
            return value
        if isinstance(node, ast.Compare):
            left = ev(node.left)
            for op, comp in zip(node.ops, node.comparators):
                right = ev(comp)
                if not _CMPOPS[type(op)](left, right):
                    return False
                left = right
            return True
        if isinstance(node, ast.IfExp):
            return ev(node.body) if ev(node.test) else ev(node.orelse)
        if isinstance(node, ast.Subscript):
            value = ev(node.value)
            if isinstance(node.slice, ast.Slice):
                s = node.slice
                key = slice(*(ev(p) if p is not None else None for p in (s.lower, s.upper, s.step)))
            else:
                key = ev(node.slice)
            if isinstance(value, Materialized):
                raise TypeError("an iterator is not subscriptable")
            return value[key]
        if isinstance(node, ast.Attribute):
            attr = self.trusted_callable(node)
            if attr is not None:
                return attr
        if self.method_call(node):
            receiver = ev(node.func.value)
            if isinstance(receiver, Materialized):
                raise TypeError(f"an iterator has no method {node.func.attr}()")
            args = [ev(a) for a in node.args]
            args = [list(a.items) if isinstance(a, Materialized) else a for a in args]
            kwargs = {k.arg: ev(k.value) for k in node.keywords}
            return _call_method(receiver, node.func.attr, args, kwargs)
        if isinstance(node, ast.Call):
            func = self.trusted_callable(node.func)
            if func is not None and self.call_is_trusted(node, func):
                args = [ev(a) for a in node.args]
                kwargs = {k.arg: ev(k.value) for k in node.keywords}
                if func in (_guarded_range,) or not any(isinstance(a, Materialized) for a in args):
                    return func(*args, **kwargs)
                return func(*[iter(a.items) if isinstance(a, Materialized) else a for a in args],
                            **kwargs)
        return self.opaque(node)


# --- stdio checkers ----------------------------------------------------------------------------

def compare_output(checker: str, expected: str, actual: str) -> tuple[bool, str | None]:
    """(passed, why-not). Always compares the whole output, never a prefix."""
    if checker == "exact":
        if actual == expected:
            return True, None
        if actual.rstrip("\n") == expected.rstrip("\n"):
            return True, None  # a missing/extra final newline is not a wrong answer
        return False, _first_difference(expected, actual)
    exp_tokens, act_tokens = expected.split(), actual.split()
    if checker == "tokens":
        if exp_tokens == act_tokens:
            return True, None
        return False, _token_difference(exp_tokens, act_tokens)
    if checker.startswith("float:"):
        eps = float(checker[6:])
        if len(exp_tokens) != len(act_tokens):
            return False, f"expected {len(exp_tokens)} tokens, got {len(act_tokens)}"
        for i, (e, a) in enumerate(zip(exp_tokens, act_tokens)):
            if e == a:
                continue
            try:
                fe, fa = float(e), float(a)
            except ValueError:
                return False, f"token {i + 1}: expected {e[:50]!r}, got {a[:50]!r}"
            if not (math.isfinite(fe) and math.isfinite(fa)) or \
                    abs(fe - fa) > eps * max(1.0, abs(fe)):
                return False, f"token {i + 1}: expected {e[:50]}, got {a[:50]} (eps {eps:g})"
        return True, None
    raise ValueError(f"unknown checker {checker!r}: use exact, tokens or float:EPS")


def _first_difference(expected: str, actual: str) -> str:
    for i, (e, a) in enumerate(zip(expected, actual)):
        if e != a:
            line = expected.count("\n", 0, i) + 1
            return f"output differs at line {line}: expected {expected[i:i + 30]!r}, got {actual[i:i + 30]!r}"
    return f"expected {len(expected)} characters of output, got {len(actual)}"


def _token_difference(exp: list[str], act: list[str]) -> str:
    for i, (e, a) in enumerate(zip(exp, act)):
        if e != a:
            return f"token {i + 1}: expected {e[:50]!r}, got {a[:50]!r}"
    return f"expected {len(exp)} tokens, got {len(act)}"
