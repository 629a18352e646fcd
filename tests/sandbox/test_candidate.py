"""Candidate assembly: which program runs, whether it compiles, whether it has the asked-for shape."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox.candidate import MAX_CODE_BYTES, assemble, call_arities, extract_code
from sandbox.formats import load_problems
from sandbox.problems import Problem, TestCase

DATA = Path(__file__).parent / "data"

FUNC = Problem(id="add", kind="function", prompt="def add(a, b):\n    \"\"\"Add.\"\"\"\n",
               entry_point="add", tests=("assert add(1, 2) == 3", "assert add(0, 0) == 0"),
               reference_solution="def add(a, b):\n    return a + b\n")
STDIO = Problem(id="echo", kind="stdio", test_cases=(TestCase("1\n", "1\n"),))

FENCE = "```"


# --- styles ----------------------------------------------------------------------------------------

def test_completion_is_appended_to_the_prompt():
    got = assemble(FUNC, completion="    return a + b\n")
    assert got.code == FUNC.prompt + "    return a + b\n"
    assert got.syntax_ok and got.format_ok and got.detail == ""


def test_humaneval_canonical_solutions_assemble_cleanly_as_completions():
    import json
    for line in (DATA / "humaneval.jsonl").read_text().splitlines():
        row = json.loads(line)
        problem = next(p for p in load_problems(DATA / "humaneval.jsonl").problems if p.id == row["task_id"])
        got = assemble(problem, completion=row["canonical_solution"])
        assert got.code == problem.reference_solution and got.syntax_ok and got.format_ok, got.detail


def test_code_is_used_as_is():
    assert assemble(FUNC, code="def add(a, b): return a + b").code == "def add(a, b): return a + b"


def test_a_reply_uses_its_first_python_block():
    reply = f"Here you go:\n\n{FENCE}python\ndef add(a, b):\n    return a + b\n{FENCE}\n\nThanks!"
    got = assemble(FUNC, reply=reply)
    assert got.code == "def add(a, b):\n    return a + b\n" and got.format_ok


def test_a_reply_without_a_fence_runs_whole_but_is_not_well_formatted():
    got = assemble(FUNC, reply="def add(a, b):\n    return a + b\n")
    assert got.code == "def add(a, b):\n    return a + b\n"
    assert got.syntax_ok and not got.format_ok and "fenced" in got.detail


@pytest.mark.parametrize("kwargs", [{}, {"code": "x", "completion": "y"},
                                    {"code": "a", "completion": "b", "reply": "c"}])
def test_exactly_one_style_must_be_given(kwargs):
    with pytest.raises(ValueError, match="exactly one"):
        assemble(FUNC, **kwargs)


# --- extract_code ----------------------------------------------------------------------------------

@pytest.mark.parametrize("tag", ["python", "py", "Python3", "", "python title=sol.py", "{python}"])
def test_python_and_untagged_fences_are_recognised(tag):
    assert extract_code(f"x\n{FENCE}{tag}\nprint(1)\n{FENCE}\n") == ("print(1)\n", True)


def test_the_first_python_block_wins_over_an_earlier_shell_block():
    reply = f"Run:\n{FENCE}bash\npython sol.py\n{FENCE}\nCode:\n{FENCE}python\nprint(2)\n{FENCE}\n{FENCE}python\nprint(3)\n{FENCE}"
    assert extract_code(reply) == ("print(2)\n", True)


def test_a_block_in_another_language_is_used_when_there_is_no_python_block():
    assert extract_code(f"{FENCE}cpp\nint main(){{}}\n{FENCE}") == ("int main(){}\n", True)


def test_an_unclosed_fence_runs_to_the_end_of_the_reply():
    assert extract_code(f"Sure.\n{FENCE}python\ndef f():\n    return 1\n") == ("def f():\n    return 1\n", True)


def test_tilde_fences_and_longer_fences_holding_backticks_work():
    assert extract_code("~~~python\nprint(1)\n~~~\n") == ("print(1)\n", True)
    inner = f"s = '''{FENCE}'''\n"
    assert extract_code(f"````python\n{inner}````\n") == (inner, True)


def test_an_indented_fence_is_dedented():
    assert extract_code(f"1. code:\n  {FENCE}python\n  x = 1\n  print(x)\n  {FENCE}\n") == ("x = 1\nprint(x)\n", True)


def test_inline_backticks_are_not_a_fence():
    reply = f"Use {FENCE}print{FENCE} here"
    assert extract_code(reply) == (reply, False)


# --- syntax ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("code, why", [
    ("def add(a, b)\n    return a + b\n", "SyntaxError"),
    ("return 1\n", "SyntaxError"),
    ("x = 1\x00\n", "null bytes"),
    ("x = " + "(" * 5000 + ")" * 5000 + "\n", ""),
    ("def f():\n\treturn 1\n        return 2\n", ""),
])
def test_code_that_does_not_compile_is_reported_without_crashing(code, why):
    got = assemble(FUNC, code=code)
    assert not got.syntax_ok and not got.format_ok
    assert why in got.detail and got.detail


def test_oversized_code_is_not_compiled():
    got = assemble(FUNC, code="x = 1\n" * (MAX_CODE_BYTES // 6 + 10))
    assert not got.syntax_ok and "limit" in got.detail


# --- format: function problems ---------------------------------------------------------------------

def test_a_missing_entry_point_is_named():
    got = assemble(FUNC, code="def plus(a, b):\n    return a + b\n")
    assert got.syntax_ok and not got.format_ok and "'add'" in got.detail


def test_a_nested_definition_is_not_a_top_level_entry_point():
    got = assemble(FUNC, code="def outer():\n    def add(a, b):\n        return a + b\n")
    assert not got.format_ok


@pytest.mark.parametrize("signature, ok", [("a, b", True), ("a, b, c=0", True), ("*args", True),
                                           ("a, *rest", True), ("a", False), ("a, b, c", False),
                                           ("a, b, *, key", False), ("a, b, *, key=1", True)])
def test_the_signature_must_accept_the_arguments_the_tests_pass(signature, ok):
    got = assemble(FUNC, code=f"def add({signature}):\n    return 0\n")
    assert got.format_ok is ok, got.detail


def test_an_async_entry_point_is_flagged():
    assert not assemble(FUNC, code="async def add(a, b):\n    return a + b\n").format_ok


def test_a_lambda_or_class_named_like_the_entry_point_counts():
    assert assemble(FUNC, code="add = lambda a, b: a + b\n").format_ok
    leet = next(p for p in load_problems(DATA / "apps.jsonl").problems if p.id == "apps/200")
    assert assemble(leet, code="class Solution:\n    def maxArea(self, h):\n        return 0\n").format_ok


def test_arity_comes_from_the_tests_then_from_a_fixed_reference_signature():
    assert call_arities(FUNC) == {2}
    via_candidate = Problem(id="x", kind="function", entry_point="f", tests=("assert check(f)",),
                            reference_solution="def f(a, b, c):\n    pass\n")
    assert call_arities(via_candidate) == {3}
    optional = Problem(id="y", kind="function", entry_point="f", tests=("assert check(f)",),
                       reference_solution="def f(a, b=1):\n    pass\n")
    assert call_arities(optional) == set()


# --- format: stdio problems ------------------------------------------------------------------------

@pytest.mark.parametrize("code", ["n = input()\n", "import sys\ndata = sys.stdin.read()\n",
                                  "data = open(0).read()\n", "from sys import stdin\nx = stdin.readline()\n",
                                  "print(42)\n", "import sys\nsys.stdout.write('1')\n",
                                  "for line in __import__('sys').stdin.buffer:\n    pass\n"])
def test_a_stdio_program_that_reads_or_prints_is_well_formatted(code):
    got = assemble(STDIO, code=code)
    assert got.syntax_ok and got.format_ok, got.detail


def test_a_stdio_program_that_neither_reads_nor_prints_is_not():
    got = assemble(STDIO, code="def solve(x):\n    return x\n")
    assert got.syntax_ok and not got.format_ok and "standard input" in got.detail


def test_a_long_fence_info_line_does_not_backtrack_forever():
    reply = FENCE + " " * 200000 + "x"
    assert extract_code(reply) == (reply, False)
