"""Candidate assembly: turn what a model wrote into the program to run, and judge its shape.

Three styles (exactly one per call):
- `completion`: appended to `problem.prompt` (HumanEval style; the prompt ends inside a function).
- `reply`: a chat reply; the code is its first Python (or untagged) fenced block, else the reply.
- `code`: a whole program, used as is.

`syntax_ok` says the program compiles; `format_ok` says it has the shape the problem asks for (a
top-level function or class named `entry_point` that accepts the arguments the tests pass; for stdio a
program that reads stdin or at least prints; for replies also a fenced block). `detail` says why not.
"""

from __future__ import annotations

import ast
import functools
import re
import warnings
from dataclasses import dataclass

from .problems import named_calls

MAX_CODE_BYTES = 256 * 1024
"""Longer programs are not compiled (syntax_ok False): no model answer needs that much."""

_FENCE_OPEN = re.compile(r"^[ \t]{0,3}(```+|~~~+)([^\n`]*)\n", re.MULTILINE)
_PYTHON_TAGS = {"", "python", "py", "python3", "py3", "python 3", "pycon", "ipython", "sage"}


@dataclass(frozen=True)
class Assembled:
    """The program to run and what assembly found about it."""

    code: str
    syntax_ok: bool
    format_ok: bool
    detail: str = ""


def extract_code(reply: str) -> tuple[str, bool]:
    """(code, had_fence): the first Python or untagged fenced block of a reply, else the reply.

    A block of another language is used only when the reply has no Python/untagged block. A fence
    that is never closed (generation cut off) runs to the end of the reply.
    """
    if not isinstance(reply, str):
        raise TypeError(f"reply must be a string, got {type(reply).__name__}")
    first_other = None
    pos = 0
    while True:
        m = _FENCE_OPEN.search(reply, pos)
        if m is None:
            break
        fence, info = m.group(1), m.group(2).strip()
        tag = info.split()[0].lower() if info else ""
        tag = tag.lstrip("{.").rstrip("}")  # ```{python} and ```{.python}
        body_start = m.end()
        # The closing fence: at least as long, same character, alone on its line.
        close = re.compile(r"^[ \t]{0,3}" + re.escape(fence[0]) + "{" + str(len(fence)) + r",}[ \t]*$",
                           re.MULTILINE)
        c = close.search(reply, body_start)
        body = reply[body_start:c.start()] if c else reply[body_start:]
        indent = len(m.group(0)) - len(m.group(0).lstrip(" \t"))
        if indent:
            body = _dedent(body, indent)
        if tag in _PYTHON_TAGS:
            return body, True
        if first_other is None:
            first_other = body
        if c is None:
            break
        pos = c.end()
    if first_other is not None:
        return first_other, True
    return reply, False


def _dedent(body: str, indent: int) -> str:
    lines = body.split("\n")
    out = []
    for line in lines:
        strip = min(indent, len(line) - len(line.lstrip(" \t")))
        out.append(line[strip:])
    return "\n".join(out)


def assemble(problem, *, code: str | None = None, completion: str | None = None,
             reply: str | None = None) -> Assembled:
    """Build the program for `problem` from exactly one of `code`, `completion` or `reply`."""
    given = [(name, value) for name, value in (("code", code), ("completion", completion),
                                               ("reply", reply)) if value is not None]
    if len(given) != 1:
        raise ValueError("assemble() takes exactly one of code=, completion=, reply= "
                         f"(got {', '.join(n for n, _ in given) or 'none'})")
    style, text = given[0]
    if not isinstance(text, str):
        raise TypeError(f"{style} must be a string, got {type(text).__name__}")
    had_fence = True
    if style == "completion":
        program = (problem.prompt or "") + text
    elif style == "reply":
        program, had_fence = extract_code(text)
    else:
        program = text

    tree, syntax_detail = parse(program)
    if tree is None:
        return Assembled(program, False, False, syntax_detail)
    ok, why = check_format(problem, tree)
    if style == "reply" and not had_fence:
        why = "; ".join(filter(None, ["the reply has no fenced code block", why]))
        ok = False
    return Assembled(program, True, ok, why)


def parse(program: str) -> tuple[ast.Module | None, str]:
    """(tree, "") when the program compiles, else (None, why)."""
    size = len(program.encode("utf-8", "surrogatepass"))
    if size > MAX_CODE_BYTES:
        return None, f"program is {size} bytes, over the {MAX_CODE_BYTES} byte limit"
    try:
        with warnings.catch_warnings():  # model output: its SyntaxWarnings would flood the caller's stderr
            warnings.simplefilter("ignore")
            tree = ast.parse(program, "<candidate>")
            # ast.parse accepts a few things the compiler rejects (e.g. `return` outside a function).
            compile(tree, "<candidate>", "exec", dont_inherit=True)
    except SyntaxError as e:
        where = f" (line {e.lineno})" if e.lineno else ""
        return None, f"SyntaxError: {e.msg}{where}"
    except ValueError as e:  # null bytes, surrogates
        return None, f"does not compile: {e}"
    except (RecursionError, MemoryError) as e:
        return None, f"does not compile: {type(e).__name__} (nested too deeply)"
    return tree, ""


def check_format(problem, tree: ast.Module) -> tuple[bool, str]:
    """(format_ok, why-not) for a parsed program."""
    if problem.kind == "function":
        return _check_function(problem, tree)
    return _check_stdio(tree)


def _check_function(problem, tree: ast.Module) -> tuple[bool, str]:
    name = problem.entry_point
    node = None
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and stmt.name == name:
            node = stmt  # the last definition wins, as at run time
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                node = stmt  # `f = lambda ...` or an alias still defines the name
    if node is None:
        return False, f"no top-level function named {name!r}"
    if isinstance(node, ast.AsyncFunctionDef):
        return False, f"{name!r} is async; the tests call it synchronously"
    if not isinstance(node, ast.FunctionDef):
        return True, ""
    arities = call_arities(problem)
    if not arities:
        return True, ""
    low, high, kwonly_required = _accepted(node.args)
    if kwonly_required:
        return False, f"{name}() has required keyword-only parameters {', '.join(kwonly_required)}"
    bad = sorted(n for n in arities if not low <= n <= high)
    if bad:
        takes = f"{low}" if low == high else (f"{low} or more" if high == float("inf")
                                               else f"{low} to {high}")
        return False, f"{name}() takes {takes} positional arguments but the tests pass {bad[0]}"
    return True, ""


def _accepted(args: ast.arguments) -> tuple[int, float, list[str]]:
    positional = len(args.posonlyargs) + len(args.args)
    low = positional - len(args.defaults)
    high = float("inf") if args.vararg else positional
    kwonly_required = [a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is None]
    return low, high, kwonly_required


def call_arities(problem) -> set[int]:
    """Positional-argument counts of the calls the tests (or, failing that, the reference) make.

    Calls with `*args` or keywords are skipped; an empty set means "no evidence". Cached per
    problem: every candidate of a batch asks (parsing the tests each time was a third of the
    host's work per execution in warm mode).
    """
    return set(_call_arities(problem.entry_point, tuple(problem.tests), problem.reference_solution))


@functools.lru_cache(maxsize=4096)
def _call_arities(name: str, tests: tuple[str, ...], reference_solution: str | None) -> frozenset[int]:
    found = {len(node.args) for node in named_calls(tests) if node.func.id == name and not node.keywords
             and not any(isinstance(a, ast.Starred) for a in node.args)}
    if found or not reference_solution:
        return frozenset(found)
    ref, _ = parse(reference_solution)
    if ref is None:
        return frozenset(found)
    for stmt in ref.body:
        if isinstance(stmt, ast.FunctionDef) and stmt.name == name and not stmt.args.vararg:
            low, high, _ = _accepted(stmt.args)
            if low == high:  # only a fixed arity is evidence; optional parameters may go unused
                found = {low}
    return frozenset(found)


_STDIN_ATTRS = {"stdin", "buffer"}


def _check_stdio(tree: ast.Module) -> tuple[bool, str]:
    reads = prints = False
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name):
                if func.id in ("input", "raw_input"):
                    reads = True
                elif func.id == "print":
                    prints = True
                elif func.id == "open" and node.args and isinstance(node.args[0], ast.Constant) \
                        and node.args[0].value in (0, "/dev/stdin"):
                    reads = True
            elif isinstance(func, ast.Attribute) and func.attr == "write" \
                    and _mentions(func.value, {"stdout", "stderr"}):
                prints = True
        elif isinstance(node, ast.Attribute) and node.attr == "stdin":
            reads = True
        elif isinstance(node, ast.Name) and node.id == "stdin":  # from sys import stdin
            reads = True
    if reads or prints:
        return True, ""
    return False, "the program neither reads standard input nor prints"


def _mentions(node: ast.AST, names: set[str]) -> bool:
    return any((isinstance(n, ast.Attribute) and n.attr in names) or
               (isinstance(n, ast.Name) and n.id in names) for n in ast.walk(node))
