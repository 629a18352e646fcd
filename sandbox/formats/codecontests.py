"""CodeContests (DeepMind): `{name, description, public_tests, private_tests, generated_tests, solutions, ...}`.

Every problem is `stdio`. Test cases are public, then private, then generated tests, with repeated
inputs dropped, capped at MAX_TEST_CASES (generated tests run to hundreds per problem; a training step
cannot afford them all). The reference is the first PYTHON3 solution (language 3, or the string
"PYTHON3"; 1 is Python 2 and is not used). `time_limit` (`{seconds, nanos}`) and `memory_limit_bytes`
become the limits, clamped to the range the sandbox accepts. id = `name`; tags: `codecontests`, the
source's `cf_tags`.
"""

from __future__ import annotations

from sandbox.formats._common import get_str, require, split_of, str_items
from sandbox.problems import (MAX_MEMORY_LIMIT_MB, MAX_TIME_LIMIT_S, MIN_MEMORY_LIMIT_MB, Problem,
                              ProblemError, TestCase, short, type_name)

FORMAT = "codecontests"
MAX_TEST_CASES = 50
PYTHON3 = (3, "PYTHON3", "python3")


def convert(obj: dict) -> Problem:
    name = get_str(obj, "name", FORMAT, allow_empty=False).strip()
    description = get_str(obj, "description", FORMAT, allow_empty=False)
    cases: list[TestCase] = []
    seen: set[str] = set()
    present = [k for k in ("public_tests", "private_tests", "generated_tests") if k in obj]
    if not present:
        require(obj, "public_tests", FORMAT)
    for key in present:
        for case in _tests(obj, key):
            if case.input not in seen and len(cases) < MAX_TEST_CASES:
                seen.add(case.input)
                cases.append(case)
    if not cases:
        raise ProblemError("public_tests", "no test cases in public_tests, private_tests or generated_tests")
    cf_tags = obj.get("cf_tags") or []
    if not isinstance(cf_tags, list):
        raise ProblemError("cf_tags", f"must be a list of strings, got {type_name(cf_tags)}")
    tags = ("codecontests",) + tuple(t for t in cf_tags if isinstance(t, str) and t)
    return Problem(id=name, kind="stdio", prompt=description, test_cases=tuple(cases),
                   reference_solution=_python3_solution(obj), time_limit_s=_time_limit(obj),
                   memory_limit_mb=_memory_limit(obj), split=split_of(obj), tags=tags)


def _tests(obj: dict, key: str) -> list[TestCase]:
    group = obj[key]
    if group is None:
        return []
    if not isinstance(group, dict):
        raise ProblemError(key, f"must be an object with input and output lists, got {type_name(group)}")
    inputs, outputs = group.get("input", []), group.get("output", [])
    for sub, value in (("input", inputs), ("output", outputs)):
        if not isinstance(value, list):
            raise ProblemError(f"{key}.{sub}", f"must be a list, got {type_name(value)}")
        str_items(value, f"{key}.{sub}")
    if len(inputs) != len(outputs):
        raise ProblemError(key, f"has {len(inputs)} inputs but {len(outputs)} outputs")
    return [TestCase(i, o) for i, o in zip(inputs, outputs)]


def _python3_solution(obj: dict) -> str | None:
    solutions = obj.get("solutions")
    if solutions is None:
        return None
    if not isinstance(solutions, dict):
        raise ProblemError("solutions", f"must be an object with language and solution lists, "
                                        f"got {type_name(solutions)}")
    languages, programs = solutions.get("language", []), solutions.get("solution", [])
    if not isinstance(languages, list) or not isinstance(programs, list):
        raise ProblemError("solutions", "language and solution must be lists")
    for language, program in zip(languages, programs):
        if language in PYTHON3 and isinstance(program, str) and program.strip():
            return program
    return None


def _time_limit(obj: dict) -> float:
    limit = obj.get("time_limit")
    if limit is None:
        return 2.0
    if isinstance(limit, dict):
        seconds, nanos = limit.get("seconds") or 0, limit.get("nanos") or 0
        if isinstance(seconds, (int, float)) and isinstance(nanos, (int, float)) \
                and not isinstance(seconds, bool) and not isinstance(nanos, bool):
            total = seconds + nanos / 1e9
            if total > 0:
                return min(float(total), MAX_TIME_LIMIT_S)
    raise ProblemError("time_limit", f"{short(limit)} is not {{seconds, nanos}} with a positive total")


def _memory_limit(obj: dict) -> int:
    limit = obj.get("memory_limit_bytes")
    if limit is None or limit == 0:
        return 256
    if isinstance(limit, bool) or not isinstance(limit, (int, float)) or limit < 0:
        raise ProblemError("memory_limit_bytes", f"{short(limit)} is not a number of bytes")
    return int(min(max(limit // (1 << 20), MIN_MEMORY_LIMIT_MB), MAX_MEMORY_LIMIT_MB))
