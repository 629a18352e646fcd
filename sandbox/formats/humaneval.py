"""HumanEval: `{task_id, prompt, canonical_solution, test, entry_point}`.

`test` defines `check(candidate)`. Each top-level `assert` of check's body that uses the candidate
becomes one test, with the parameter renamed to the entry point (`assert f(1) == 2`). A compound
statement that uses the candidate (a loop around asserts), or an assignment that calls it, becomes one
test together with the statements right after it that read what it bound. Everything else (module-level
code such as METADATA and helpers, check's imports, constants and helper definitions, asserts that do
not touch the candidate) becomes the shared setup, in its original order.
"""

from __future__ import annotations

import ast
import io
import textwrap
import tokenize

from sandbox.formats._common import get_str, require, split_of
from sandbox.problems import Problem, ProblemError, short

FORMAT = "humaneval"


def convert(obj: dict) -> Problem:
    task_id = require(obj, "task_id", FORMAT)
    if isinstance(task_id, bool) or not isinstance(task_id, (str, int)) or not str(task_id).strip():
        raise ProblemError("task_id", f"must be a non-empty string or an integer, got {short(task_id)}")
    prompt = get_str(obj, "prompt", FORMAT)
    solution = get_str(obj, "canonical_solution", FORMAT, default="")
    test = get_str(obj, "test", FORMAT, allow_empty=False)
    entry = get_str(obj, "entry_point", FORMAT, allow_empty=False).strip()
    if not entry.isidentifier():
        raise ProblemError("entry_point", f"{short(entry)} is not a Python name")
    tests, setup = split_check(test, entry)
    return Problem(id=str(task_id), kind="function", prompt=prompt, entry_point=entry,
                   tests=tuple(tests), setup=setup,
                   reference_solution=(prompt + solution) if solution.strip() else None,
                   split=split_of(obj), tags=("humaneval",))


def split_check(test: str, entry: str) -> tuple[list[str], str]:
    """(tests, setup) from a HumanEval `test` field; raises ProblemError("test", ...)."""
    try:
        module = ast.parse(test)
    except SyntaxError as e:
        raise ProblemError("test", f"does not parse: {e.msg} (line {e.lineno})") from None
    except (ValueError, RecursionError, MemoryError) as e:
        raise ProblemError("test", f"does not parse: {type(e).__name__}") from None
    checks = [s for s in module.body if isinstance(s, ast.FunctionDef) and s.name == "check"]
    if not checks:
        raise ProblemError("test", "defines no check(candidate) function")
    check = checks[-1]
    params = check.args.posonlyargs + check.args.args
    if not params:
        raise ProblemError("test", "check() takes no parameter; expected check(candidate)")
    param = params[0].arg

    setup_parts: list[str] = []
    for stmt in module.body:
        if stmt is check:
            continue
        if _is_check_call(stmt):
            continue  # a trailing `check(f)` would run every test inside the setup
        setup_parts.append(_source(test, stmt))

    tests: list[str] = []
    group: list[str] | None = None  # a statement using the candidate and the asserts reading it
    group_names: set[str] = set()
    aliases = {param}  # `f = candidate` makes f the candidate too
    for stmt in check.body:
        uses = any(_uses(stmt, name) for name in aliases)
        text = _rename(_source(test, stmt), param, entry)
        if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Name) and stmt.value.id in aliases \
                and all(isinstance(t, ast.Name) for t in stmt.targets):
            aliases.update(t.id for t in stmt.targets)
            setup_parts.append(text)
            continue
        if group is not None and _reads(stmt) & group_names:
            group.append(text)  # `res = candidate(x)`, `res.sort()`, `assert res == [...]`
            group_names |= _binds(stmt)
            continue
        if group is not None:
            tests.append("\n".join(group))
            group, group_names = None, set()
        if isinstance(stmt, ast.Assert) and uses:
            tests.append(text)
        elif uses and not isinstance(stmt, (ast.FunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom)):
            group, group_names = [text], _binds(stmt)
        else:
            setup_parts.append(text)
    if group is not None:
        tests.append("\n".join(group))
    if not tests:
        raise ProblemError("test", f"check() has no assert that calls {param!r}")
    return tests, "\n".join(p.rstrip("\n") for p in setup_parts if p.strip()) + ("\n" if setup_parts else "")


def _is_check_call(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) \
        and isinstance(stmt.value.func, ast.Name) and stmt.value.func.id == "check"


def _source(src: str, stmt: ast.stmt) -> str:
    segment = ast.get_source_segment(src, stmt, padded=True)
    if segment is None:  # positions missing: fall back to the normalised source
        segment = ast.unparse(stmt)
    # Decorators sit above the def's first line; get_source_segment starts at `def`.
    decorators = getattr(stmt, "decorator_list", None)
    if decorators:
        lines = src.split("\n")[decorators[0].lineno - 1:stmt.lineno - 1]
        segment = "\n".join(lines) + "\n" + segment
    return textwrap.dedent(segment).strip("\n")


def _uses(stmt: ast.stmt, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(stmt))


def _reads(stmt: ast.stmt) -> set[str]:
    return {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _binds(stmt: ast.stmt) -> set[str]:
    return {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def _rename(code: str, old: str, new: str) -> str:
    """Replace the name `old` by `new` token by token, keeping layout and comments.

    Attributes (`obj.candidate`) and keyword names inside calls (`f(candidate=1)`) are left alone.
    One forward pass, so hostile input cannot make it quadratic.
    """
    if old == new or old not in code:
        return code
    try:
        tokens = [t for t in tokenize.generate_tokens(io.StringIO(code).readline)
                  if t.type not in (tokenize.NL, tokenize.COMMENT)]
    except (tokenize.TokenError, SyntaxError):
        return code
    brackets: list[str] = []
    spots = []
    for i, tok in enumerate(tokens):
        if tok.type == tokenize.OP and tok.string in "([{":
            brackets.append(tok.string)
        elif tok.type == tokenize.OP and tok.string in ")]}":
            if brackets:
                brackets.pop()
        elif tok.type == tokenize.NAME and tok.string == old:
            after_dot = i > 0 and tokens[i - 1].string == "."
            keyword_arg = i + 1 < len(tokens) and tokens[i + 1].string == "=" and brackets[-1:] == ["("]
            if not after_dot and not keyword_arg:
                spots.append(tok)
    lines = code.split("\n")
    for tok in reversed(spots):  # from the end, so earlier columns stay valid
        (row, col), (_, end) = tok.start, tok.end
        line = lines[row - 1]
        lines[row - 1] = line[:col] + new + line[end:]
    return "\n".join(lines)
