"""APPS: `{problem_id, question, solutions, input_output, difficulty, starter_code}`.

`solutions` and `input_output` are JSON encoded as strings (decoded values are accepted too).
- With `fn_name`: a `function` problem. Each input is the argument list of one call and each test is
  `assert fn_name(*args) == expected`. APPS usually wraps call-based outputs in a one-element list
  (`outputs[i] == [value]`) and its own checker accepts either the list or its item, so such a test
  is `assert fn_name(*args) in (value, [value])`. LeetCode-style starter code (`class Solution:`) makes the entry point `Solution`
  and the tests call `Solution().fn_name(...)`.
- Without `fn_name`: a `stdio` problem; inputs are stdin texts (a list of lines is joined).
The prompt is the question; for function problems it is written as comment lines followed by the
starter code, so that completion-style prompting yields a program. The reference is the first
solution, after the import header APPS' own harness puts before every solution (its solutions rely
on it). id `apps/<problem_id>`; tags: difficulty.
"""

from __future__ import annotations

from sandbox.formats._common import (comment_block, get_str, json_string, py_literal, require,
                                     split_of, str_items)
from sandbox.problems import Problem, ProblemError, TestCase, short, type_name

FORMAT = "apps"

# The standard-library part of the header APPS' testing_util.py prepends to every solution.
APPS_HEADER = (
    "import sys\nimport time\nimport itertools\n"
    "from itertools import accumulate, product, permutations, combinations\nimport collections\n"
    "from collections import Counter, OrderedDict, deque, defaultdict, ChainMap\n"
    "from functools import lru_cache\nimport math\n"
    "from math import sqrt, sin, cos, tan, ceil, fabs, floor, gcd, exp, log, log2\n"
    "import fractions\nfrom typing import List, Tuple\nimport random\nimport heapq\nfrom heapq import *\n"
)


def convert(obj: dict) -> Problem:
    pid = require(obj, "problem_id", FORMAT)
    if isinstance(pid, bool) or not isinstance(pid, (int, str)) or not str(pid).strip():
        raise ProblemError("problem_id", f"must be an integer or a non-empty string, got {short(pid)}")
    question = get_str(obj, "question", FORMAT, allow_empty=False)
    starter = get_str(obj, "starter_code", FORMAT, default="")
    io = json_string(obj, "input_output", FORMAT)
    if not isinstance(io, dict):
        raise ProblemError("input_output", f"must hold an object with inputs and outputs, got {type_name(io)}")
    inputs, outputs = io.get("inputs"), io.get("outputs")
    for key, value in (("inputs", inputs), ("outputs", outputs)):
        if not isinstance(value, list):
            raise ProblemError(f"input_output.{key}", f"must be a list, got {type_name(value)}")
    if len(inputs) != len(outputs):
        raise ProblemError("input_output", f"has {len(inputs)} inputs but {len(outputs)} outputs")
    if not inputs:
        raise ProblemError("input_output.inputs", "is empty; the problem has no tests")
    reference = _first_solution(obj)
    difficulty = obj.get("difficulty")
    tags = (difficulty,) if isinstance(difficulty, str) and difficulty else ()
    fn_name = io.get("fn_name")
    common = dict(id=f"apps/{pid}", split=split_of(obj), tags=("apps",) + tags,
                  reference_solution=APPS_HEADER + reference if reference else None)
    if fn_name is None:
        cases = tuple(TestCase(_stdio_text(i, f"input_output.inputs[{n}]"),
                               _stdio_text(o, f"input_output.outputs[{n}]"))
                      for n, (i, o) in enumerate(zip(inputs, outputs)))
        prompt = question.strip("\n") + "\n" + (f"\n{starter}" if starter.strip() else "")
        return Problem(kind="stdio", prompt=prompt, test_cases=cases, **common)
    if not isinstance(fn_name, str) or not fn_name.isidentifier():
        raise ProblemError("input_output.fn_name", f"{short(fn_name)} is not a Python name")
    method = "class Solution" in starter
    entry = "Solution" if method else fn_name
    call = f"Solution().{fn_name}" if method else fn_name
    tests = []
    for n, (args, expected) in enumerate(zip(inputs, outputs)):
        if not isinstance(args, list):
            args = [args]
        where = f"input_output.inputs[{n}]"
        arg_text = ", ".join(py_literal(a, where) for a in args)
        out = py_literal(expected, f"input_output.outputs[{n}]")
        if isinstance(expected, list) and len(expected) == 1:
            # APPS accepts the output itself or its only item: the wrapping is ambiguous.
            inner = py_literal(expected[0], f"input_output.outputs[{n}]")
            tests.append(f"assert {call}({arg_text}) in ({inner}, {out})")
        else:
            tests.append(f"assert {call}({arg_text}) == {out}")
    prompt = comment_block(question)
    if starter.strip():
        if "List[" in starter or "Tuple[" in starter:
            prompt += "from typing import *\n"
        prompt += "\n" + starter
    return Problem(kind="function", prompt=prompt, entry_point=entry, tests=tuple(tests), **common)


def _first_solution(obj: dict) -> str | None:
    if "solutions" not in obj or obj["solutions"] in (None, ""):
        return None
    solutions = json_string(obj, "solutions", FORMAT)
    if not isinstance(solutions, list):
        raise ProblemError("solutions", f"must hold a list of programs, got {type_name(solutions)}")
    str_items(solutions, "solutions")
    return next((s for s in solutions if s.strip()), None)


def _stdio_text(value, where: str) -> str:
    if isinstance(value, list):  # a few APPS problems store stdin/stdout as a list of lines
        str_items(value, where)
        return "".join(line if line.endswith("\n") else line + "\n" for line in value)
    if not isinstance(value, str):
        raise ProblemError(where, f"must be a string, got {type_name(value)} {short(value)}")
    return value
