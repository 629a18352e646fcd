"""Trusted test interpretation: run a function problem's test statements on the host.

A test is a few statements: usually one `assert`, sometimes a loop (HumanEval's
`for _ in range(100): x, y = ...; assert add(x, y) == x + y`). The host interprets `assert`,
`if`, `for`, `while`, `break`/`continue`/`pass` and assignments whose value it can compute
(verdict.Evaluator: host data, plus sub-expressions the child evaluates). Everything else (a call
made for its side effects, `x = candidate(3)`, `import`, `def`, `try`...) runs in the child with
the host's values of the names it uses bound first. So every assertion the host reaches is decided
here; only asserts inside statements that run in the child (a `def`, a `try`) are decided by the
child, and `TestPlan.trusted` says whether a test has any.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass, field
from typing import Callable

from .verdict import Abort, Evaluator, Materialized, RemoteError, _binop

MAX_ITERATIONS = 10_000_000


@dataclass
class TestPlan:
    __test__ = False

    name: str
    source: str
    body: list[ast.stmt] = field(default_factory=list)
    syntax_error: str | None = None
    trusted: bool = True
    """Every assertion of the test is decided on the host."""


class AssertFailed(Exception):
    pass


class _Break(Exception):
    pass


class _Continue(Exception):
    pass


def _target_names(node: ast.AST) -> list[str] | None:
    """Names bound by a simple target (`x`, `x, y`, `(a, (b, c))`), else None."""
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, (ast.Tuple, ast.List)):
        out = []
        for e in node.elts:
            sub = _target_names(e)
            if sub is None:
                return None
            out += sub
        return out
    return None


def _stored_names(node: ast.AST) -> set[str]:
    names = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and isinstance(sub.ctx, (ast.Store, ast.Del)):
            names.add(sub.id)
        elif isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(sub.name)
        elif isinstance(sub, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in sub.names)
    return names


def _interpreted(stmt: ast.stmt) -> bool:
    """Whether the host interprets this statement itself (else: the child runs it whole)."""
    if isinstance(stmt, (ast.Assert, ast.If, ast.While, ast.Pass, ast.Break, ast.Continue)):
        return True
    if isinstance(stmt, ast.For):
        return _target_names(stmt.target) is not None
    return False


def _asserts_in_child(stmts: list[ast.stmt]) -> bool:
    for stmt in stmts:
        if _interpreted(stmt):
            children = [getattr(stmt, f, []) for f in ("body", "orelse")]
            if any(_asserts_in_child(c) for c in children):
                return True
        elif any(isinstance(n, ast.Assert) for n in ast.walk(stmt)):
            return True
    return False


def plan_tests(tests) -> list[TestPlan]:
    plans = []
    for i, src in enumerate(tests):
        plan = TestPlan(name=f"test {i + 1}", source=src)
        try:
            plan.body = ast.parse(src).body
        except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
            plan.syntax_error = f"the test does not compile: {type(e).__name__}: {e}"[:500]
            plan.trusted = False
        else:
            plan.trusted = not _asserts_in_child(plan.body)
        plans.append(plan)
    return plans


@functools.lru_cache(maxsize=4096)
def cached_plans(tests: tuple[str, ...]) -> tuple[TestPlan, ...]:
    return tuple(plan_tests(tests))


def defined_names(source: str) -> set[str]:
    """Top-level names a program binds (defs, classes, imports, assignments)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return set()
    names: set[str] = set()
    for node in tree.body:
        names |= _stored_names(node) if not isinstance(
            node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else {node.name}
    return names


def first_request(plan: TestPlan, shadowed: frozenset[str]) -> str | None:
    """Cached `_first_request` (plans are cached too; this runs for every test of every execution)."""
    key = (plan.source, shadowed)
    try:
        return _FIRST_REQUEST[key]
    except KeyError:
        pass
    src = _first_request(plan, shadowed)
    if len(_FIRST_REQUEST) > 16384:
        _FIRST_REQUEST.clear()
    _FIRST_REQUEST[key] = src
    return src


_FIRST_REQUEST: dict[tuple[str, frozenset[str]], str | None] = {}


def _first_request(plan: TestPlan, shadowed: frozenset[str]) -> str | None:
    """The one sub-expression a test will surely ask the child for first and only, when the test
    is the common `assert OPAQUE`, `assert not OPAQUE` or `assert OPAQUE <op> LITERAL`: such
    requests can be sent ahead (pipelined) without changing what the child evaluates, or in what
    order."""
    if len(plan.body) != 1 or not isinstance(plan.body[0], ast.Assert):
        return None
    ev = Evaluator(plan.source, lambda src, bind: None, shadowed)
    expr = plan.body[0].test
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.Not):
        expr = expr.operand
    if isinstance(expr, ast.Compare) and len(expr.ops) == 1:
        try:
            ast.literal_eval(expr.comparators[0])
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            return None
        expr = expr.left
    return ev.source_of(expr) if ev.is_opaque(expr) else None


class Interpreter:
    """Runs one test. `ask(src, bindings)` evaluates a sub-expression in the child;
    `run_remote(src, bindings)` executes a statement there (both raise RemoteError on an exception);
    `check_deadline()` raises (an Abort) once the execution's time is up."""

    def __init__(self, plan: TestPlan, ask: Callable, run_remote: Callable,
                 shadowed: frozenset[str], check_deadline: Callable[[], None]):
        self.plan = plan
        self.env: dict = {}
        self.ev = Evaluator(plan.source, ask, shadowed, self.env)
        self.run_remote = run_remote
        self.check_deadline = check_deadline

    def run(self) -> str | None:
        """None when the test passed, else why not. Abort (deadline, dead child) propagates."""
        if self.plan.syntax_error:
            return self.plan.syntax_error
        try:
            self.block(self.plan.body)
        except AssertFailed as e:
            return str(e)[:2000]
        except RemoteError as e:
            text = str(e)
            return (text if text.startswith(e.etype) else f"{e.etype}: {text}")[:2000]
        except Abort:
            raise
        except (_Break, _Continue):
            return "SyntaxError: break/continue outside a loop"
        except RecursionError:
            return "RecursionError: value nested too deeply"
        except Exception as e:  # the trusted evaluation itself (TypeError, OverflowError...)
            return f"{type(e).__name__}: {e}"[:2000]
        return None

    def block(self, stmts: list[ast.stmt]) -> None:
        for stmt in stmts:
            self.stmt(stmt)

    def stmt(self, st: ast.stmt) -> None:
        ev = self.ev
        if isinstance(st, ast.Assert):
            if not ev.eval(st.test):
                raise AssertFailed(f"AssertionError: {ev.source_of(st)}")
        elif isinstance(st, ast.If):
            self.block(st.body if ev.eval(st.test) else st.orelse)
        elif isinstance(st, ast.For) and _target_names(st.target) is not None:
            iterable = ev.eval(st.iter)
            items = iterable.items if isinstance(iterable, Materialized) else iterable
            self.loop(st, (self.bind(st.target, item) for item in items))
        elif isinstance(st, ast.While):
            self.loop(st, iter(lambda: bool(ev.eval(st.test)), False))
        elif isinstance(st, ast.Pass):
            pass
        elif isinstance(st, ast.Break):
            raise _Break()
        elif isinstance(st, ast.Continue):
            raise _Continue()
        elif isinstance(st, ast.Assign) and not ev.is_opaque(st.value) and all(
                _target_names(t) is not None for t in st.targets):
            value = ev.eval(st.value)
            for t in st.targets:
                self.bind(t, value)
        elif isinstance(st, ast.AugAssign) and isinstance(st.target, ast.Name) \
                and st.target.id in self.env and not ev.is_opaque(st.value):
            self.env[st.target.id] = _binop(type(st.op), self.env[st.target.id], ev.eval(st.value))
        elif isinstance(st, ast.Expr) and not ev.is_opaque(st.value):
            ev.eval(st.value)
        else:
            self.remote(st)

    def loop(self, st: ast.For | ast.While, turns) -> None:
        """Run a loop's body once per item of `turns` (an iterator that, for a `for`, binds the target as it
        advances), then its `else` unless a `break` ended it."""
        for n, _ in enumerate(turns):
            if n >= MAX_ITERATIONS:
                raise OverflowError("loop too long to check")
            self.check_deadline()
            try:
                self.block(st.body)
            except _Continue:
                continue
            except _Break:
                return
        self.block(st.orelse)

    def bind(self, target: ast.AST, value) -> None:
        if isinstance(target, ast.Name):
            self.env[target.id] = value
            return
        items = list(value.items if isinstance(value, Materialized) else value)
        if len(items) != len(target.elts):
            raise ValueError(f"cannot unpack {len(items)} values into {len(target.elts)} names")
        for t, v in zip(target.elts, items):
            self.bind(t, v)

    def remote(self, st: ast.stmt) -> None:
        self.run_remote(ast.unparse(st), self.ev.bindings(st))
        for name in _stored_names(st):  # the child's value is now the current one
            self.env.pop(name, None)


