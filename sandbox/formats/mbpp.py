"""MBPP: `{task_id, text, code, test_list, test_setup_code, challenge_test_list}`.

Also reads the "sanitized" variant (`prompt` instead of `text`, `test_imports` list). The id is
`mbpp/<task_id>`; `test_list` are the tests, `test_setup_code` (and `test_imports`) the setup, `code`
the reference. `challenge_test_list` is ignored: it is a separate, harder benchmark in the original
release and MBPP's own evaluation does not use it.

The entry point is the function the first test calls that `code` defines. The prompt is written
HumanEval style so that completion- and chat-style prompting both work: the reference's top-level
imports, then the function's signature with a docstring holding the task text and the first test.
"""

from __future__ import annotations

import ast
import builtins

from sandbox.formats._common import docstring_text, get_list, get_str, require, split_of, str_items
from sandbox.problems import Problem, ProblemError, named_calls, short

FORMAT = "mbpp"


def convert(obj: dict) -> Problem:
    task_id = require(obj, "task_id", FORMAT)
    if isinstance(task_id, bool) or not isinstance(task_id, (int, str)) or not str(task_id).strip():
        raise ProblemError("task_id", f"must be an integer or a non-empty string, got {short(task_id)}")
    pid = str(task_id) if "/" in str(task_id) else f"mbpp/{task_id}"
    text_key = "text" if "text" in obj or "prompt" not in obj else "prompt"
    text = get_str(obj, text_key, FORMAT, allow_empty=False)
    code = get_str(obj, "code", FORMAT, allow_empty=False)
    tests = [t.strip("\n") for t in str_items(get_list(obj, "test_list", FORMAT), "test_list")]
    if not tests:
        raise ProblemError("test_list", "is empty; an MBPP problem needs at least one test")
    setup = get_str(obj, "test_setup_code", FORMAT, default="")
    imports = str_items(get_list(obj, "test_imports", FORMAT, default=[]), "test_imports")
    if imports:
        setup = "\n".join(imports) + ("\n" + setup if setup.strip() else "\n")

    code_tree = _parse(code)
    entry = obj.get("entry_point") if isinstance(obj.get("entry_point"), str) else None
    entry = entry or find_entry_point(tests, code_tree)
    if entry is None:
        raise ProblemError("test_list", f"cannot tell which function the tests call: {short(tests[0])}")
    return Problem(id=pid, kind="function", prompt=build_prompt(text, tests[0], entry, code_tree),
                   entry_point=entry, tests=tuple(tests), setup=setup if setup.strip() else "",
                   reference_solution=code, split=split_of(obj), tags=("mbpp",))


def _parse(code: str) -> ast.Module | None:
    try:
        return ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _defined(tree: ast.Module | None) -> dict[str, ast.stmt]:
    if tree is None:
        return {}
    return {s.name: s for s in tree.body if isinstance(s, (ast.FunctionDef, ast.ClassDef))}


def find_entry_point(tests: list[str], code_tree: ast.Module | None) -> str | None:
    """The first name the tests call that the code defines (else that is not a builtin)."""
    defined = _defined(code_tree)
    called = [node.func.id for node in named_calls(tests)]
    for name in called:
        if name in defined:
            return name
    for name in called:
        if not hasattr(builtins, name):
            return name
    return None


def build_prompt(text: str, first_test: str, entry: str, code_tree: ast.Module | None) -> str:
    doc = docstring_text(text.strip()) + "\n" + docstring_text(first_test.strip())
    node = _defined(code_tree).get(entry)
    imports = ""
    if code_tree is not None:
        imports = "".join(ast.unparse(s) + "\n" for s in code_tree.body
                          if isinstance(s, (ast.Import, ast.ImportFrom)))
    if isinstance(node, ast.FunctionDef):
        returns = f" -> {ast.unparse(node.returns)}" if node.returns else ""
        signature = f"def {entry}({ast.unparse(node.args)}){returns}:"
        body = "\n".join(("    " + line) if line.strip() else "" for line in doc.split("\n"))
        return f"{imports}{chr(10) if imports else ''}{signature}\n    \"\"\"{body.lstrip()}\n    \"\"\"\n"
    # No function to show (the entry is a class, or the code does not parse): a module docstring.
    return f"{imports}\"\"\"{doc}\n\"\"\"\n"
