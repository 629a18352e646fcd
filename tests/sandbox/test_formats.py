"""Problems, the native format and the importers, on hand-made samples shaped like the real datasets."""

from __future__ import annotations

import gzip
import io
import json
import math
import random
import subprocess
import sys
from pathlib import Path

import pytest

from sandbox import formats
from sandbox.formats import FORMATS, LoadError, detect_format, dump_problems, load_problems, load_problems_bytes
from sandbox.problems import Problem, ProblemError, TestCase

DATA = Path(__file__).parent / "data"


def errors_of(result) -> list[tuple[int, str | None]]:
    return [(e.line, e.field) for e in result.errors]


# --- a trusted in-process judge, only for our own sample data -----------------------------------

def run_function(problem: Problem, program: str) -> list[bool]:
    ns: dict = {"__name__": "__main__"}
    try:
        exec(compile(program, "<candidate>", "exec"), ns)
        exec(compile(problem.setup, "<setup>", "exec"), ns)
    except Exception:
        return [False] * len(problem.tests)
    outcome = []
    for test in problem.tests:
        try:
            exec(compile(test, "<test>", "exec"), dict(ns))
            outcome.append(True)
        except Exception:
            outcome.append(False)
    return outcome


def same_output(problem: Problem, got: str, want: str) -> bool:
    if problem.checker == "exact":
        return got == want
    a, b = got.split(), want.split()
    if problem.checker == "tokens":
        return a == b
    eps = float(problem.checker.split(":", 1)[1])
    return len(a) == len(b) and all(math.isclose(float(x), float(y), abs_tol=eps) for x, y in zip(a, b))


def run_stdio(problem: Problem, program: str) -> list[bool]:
    outcome = []
    for case in problem.test_cases:
        proc = subprocess.run([sys.executable, "-I", "-c", program], input=case.input,
                              capture_output=True, text=True, timeout=30)
        outcome.append(proc.returncode == 0 and same_output(problem, proc.stdout, case.output))
    return outcome


def judge(problem: Problem, program: str) -> list[bool]:
    return run_function(problem, program) if problem.kind == "function" else run_stdio(problem, program)


SAMPLES = {"native.jsonl": ("native", 4), "humaneval.jsonl": ("humaneval", 6),
           "humaneval.jsonl.gz": ("humaneval", 3), "mbpp.jsonl": ("mbpp", 6),
           "mbpp_sanitized.jsonl": ("mbpp", 2), "apps.jsonl": ("apps", 5),
           "codecontests.jsonl": ("codecontests", 2)}


# --- every sample ----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_each_sample_is_detected_and_loads_without_errors(name):
    fmt, count = SAMPLES[name]
    result = load_problems(DATA / name)
    assert result.errors == []
    assert result.format == fmt
    assert len(result.problems) == count


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_every_reference_solution_passes_and_an_empty_solution_fails(name):
    for problem in load_problems(DATA / name).problems:
        assert problem.reference_solution, problem.id
        assert all(judge(problem, problem.reference_solution)), problem.id
        empty = problem.prompt.rstrip(" \t") + _stub_body(problem.prompt) if problem.kind == "function" else ""
        assert not all(judge(problem, empty)), problem.id


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_imported_problems_survive_a_native_round_trip(name):
    problems = load_problems(DATA / name).problems
    buf = io.StringIO()
    assert dump_problems(problems, buf) == len(problems)
    again = load_problems_bytes(buf.getvalue().encode(), "dumped.jsonl")
    assert again.errors == [] and again.format == "native"
    assert again.problems == problems


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_function_prompts_are_valid_python_prefixes(name):
    # Completion-style prompting needs prompt + completion to be able to compile.
    for problem in load_problems(DATA / name).problems:
        if problem.kind == "function":
            compile(problem.prompt.rstrip(" \t") + _stub_body(problem.prompt), problem.id, "exec")


def _stub_body(prompt: str) -> str:
    """A `pass` at the indentation the prompt's last line asks for."""
    last = prompt.rstrip().split("\n")[-1]
    if last.rstrip().endswith(":"):
        return " " * (len(last) - len(last.lstrip()) + 4) + "pass\n"
    return "\npass\n" if last.startswith((" ", "\t")) is False else "    pass\n"


# --- native ----------------------------------------------------------------------------------------

def test_native_fields_take_their_documented_defaults():
    p = Problem.from_dict({"id": "x", "kind": "function", "entry_point": "f", "tests": ["assert f()"]})
    assert (p.prompt, p.setup, p.reference_solution, p.time_limit_s, p.memory_limit_mb, p.checker,
            p.split, p.tags) == ("", "", None, 2.0, 256, "tokens", "train", ())


def test_to_dict_and_from_dict_round_trip_both_kinds():
    for problem in load_problems(DATA / "native.jsonl").problems:
        assert Problem.from_dict(json.loads(json.dumps(problem.to_dict()))) == problem


def test_null_in_an_optional_native_field_means_its_default():
    p = Problem.from_dict({"id": "x", "kind": "stdio", "test_cases": [{"input": "", "output": ""}],
                           "prompt": None, "tags": None, "time_limit_s": None, "checker": None})
    assert (p.prompt, p.tags, p.time_limit_s, p.checker) == ("", (), 2.0, "tokens")
    with pytest.raises(ProblemError, match="id"):
        Problem.from_dict({"id": None, "kind": "stdio", "test_cases": [{"input": "", "output": ""}]})


def test_excluded_is_an_optional_boolean_written_only_when_true(tmp_path):
    base = {"id": "x", "kind": "function", "entry_point": "f", "tests": ["assert f()"]}
    assert Problem.from_dict(base).excluded is False and "excluded" not in Problem.from_dict(base).to_dict()
    assert Problem.from_dict({**base, "excluded": None}).excluded is False  # null: the default
    assert "excluded" not in Problem.from_dict({**base, "excluded": False}).to_dict()
    out = Problem.from_dict({**base, "excluded": True})
    assert out.excluded is True and out.to_dict()["excluded"] is True
    path = tmp_path / "set.jsonl"
    with open(path, "w") as f:
        dump_problems([out, Problem.from_dict({**base, "id": "y"})], f)
    result = load_problems(path)  # detected as native, the field kept through a file
    assert result.format == "native" and not result.errors
    assert [(p.id, p.excluded) for p in result.problems] == [("x", True), ("y", False)]


@pytest.mark.parametrize("value, shown", [("yes", "'yes'"), (1, "1"), (0, "0"), ("true", "'true'"),
                                          ([True], "[True]"), ({}, "{}")])
def test_an_excluded_that_is_not_a_boolean_is_refused_on_its_line_naming_the_value(value, shown):
    base = {"id": "x", "kind": "function", "entry_point": "f", "tests": ["assert f()"]}
    data = (json.dumps(base) + "\n" + json.dumps({**base, "id": "y", "excluded": value}) + "\n").encode()
    result = load_problems_bytes(data, "set.jsonl", "native")
    assert [p.id for p in result.problems] == ["x"]
    assert errors_of(result) == [(2, "excluded")]
    assert result.errors[0].message.startswith(f"{shown} must be true or false, got ")
    with pytest.raises(ProblemError) as e:
        Problem(id="z", kind="function", entry_point="f", tests=("assert f()",), excluded=value)
    assert e.value.field == "excluded"


def test_importing_problems_and_candidate_pulls_in_neither_torch_nor_django():
    code = ("import sys, sandbox.problems, sandbox.candidate, sandbox.formats; "
            "sandbox.formats.converters(); "
            "print(sorted(m for m in ('torch', 'django') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=Path(__file__).parents[2], check=True).stdout
    assert out.strip() == "[]"


def test_to_dict_leaves_out_fields_of_the_other_kind():
    stdio = Problem(id="s", kind="stdio", test_cases=(TestCase("1\n", "1\n"),))
    assert "tests" not in stdio.to_dict() and "entry_point" not in stdio.to_dict()
    func = Problem(id="f", kind="function", entry_point="f", tests=("assert f()",))
    assert "test_cases" not in func.to_dict()


def test_direct_construction_validates_and_freezes_lists():
    p = Problem(id="f", kind="function", entry_point="f", tests=["assert f()"], tags=["a"],
                time_limit_s=3)
    assert p.tests == ("assert f()",) and p.tags == ("a",) and p.time_limit_s == 3.0
    hash(p)
    with pytest.raises(ProblemError) as e:
        Problem(id="f", kind="function", entry_point="not a name", tests=["assert f()"])
    assert e.value.field == "entry_point"


def test_dump_problems_writes_to_binary_files_too(tmp_path):
    problems = load_problems(DATA / "native.jsonl").problems
    path = tmp_path / "out.jsonl"
    with open(path, "wb") as f:
        dump_problems(problems, f)
    assert load_problems(path).problems == problems


NATIVE_MALFORMED = [(3, None), (4, "test"), (5, "kind"), (6, "time_limit_s"), (7, "memory_limit_mb"),
                    (8, "tests"), (9, "id"), (10, None), (11, "split"), (12, "checker"),
                    (13, "entry_point"), (14, "test_cases"), (15, "test_cases[0].input"),
                    (16, "tests[0]"), (17, "kind"), (19, None), (21, None)]


def test_each_bad_native_line_reports_its_line_and_field():
    result = load_problems(DATA / "native_malformed.jsonl")
    assert errors_of(result) == NATIVE_MALFORMED


def test_good_native_lines_are_kept_next_to_bad_ones():
    result = load_problems(DATA / "native_malformed.jsonl")
    assert [p.id for p in result.problems] == ["two-sum", "ok-stdio"]


def test_a_typo_in_a_field_name_is_an_error_that_suggests_the_right_name():
    result = load_problems(DATA / "native_malformed.jsonl")
    typo = next(e for e in result.errors if e.line == 4)
    assert "unknown field" in typo.message and "'tests'" in typo.message


def test_duplicate_ids_are_reported_on_the_later_line():
    dup = next(e for e in load_problems(DATA / "native_malformed.jsonl").errors if e.line == 9)
    assert "first on line 1" in dup.message


def test_bad_utf8_and_deep_nesting_are_line_errors_not_crashes():
    errors = {e.line: e.message for e in load_problems(DATA / "native_malformed.jsonl").errors}
    assert "UTF-8" in errors[19]
    assert "nested too deeply" in errors[21]


def _check_stdio_field(field: str, value, ok: bool, stored=lambda value: value) -> None:
    """A stdio problem with ``field: value`` loads, keeping ``stored(value)``, when ``ok``; else it is
    refused with a ProblemError that names ``field``."""
    d = {"id": "x", "kind": "stdio", "test_cases": [{"input": "", "output": ""}], field: value}
    if ok:
        assert getattr(Problem.from_dict(d), field) == stored(value)
    else:
        with pytest.raises(ProblemError, match=field):
            Problem.from_dict(d)


@pytest.mark.parametrize("value, ok", [(0.5, True), (60, True), (0, False), (-1, False), (61, False),
                                       (float("nan"), False), (True, False), ("2", False)])
def test_time_limit_must_be_a_positive_sane_number(value, ok):
    _check_stdio_field("time_limit_s", value, ok, stored=float)


@pytest.mark.parametrize("value, ok", [(16, True), (256.0, True), (16384, True), (8, False),
                                       (100000, False), (256.5, False), (False, False)])
def test_memory_limit_must_be_an_integer_in_range(value, ok):
    _check_stdio_field("memory_limit_mb", value, ok, stored=int)


@pytest.mark.parametrize("checker, ok", [("exact", True), ("tokens", True), ("float:1e-6", True),
                                         ("float:0.5", True), ("float:", False), ("float:0", False),
                                         ("float:inf", False), ("float:abc", False), ("regex", False)])
def test_checker_is_exact_tokens_or_float_with_a_positive_epsilon(checker, ok):
    _check_stdio_field("checker", checker, ok)


def test_a_stdio_problem_with_function_tests_is_rejected_rather_than_silently_ignored():
    with pytest.raises(ProblemError) as e:
        Problem.from_dict({"id": "x", "kind": "stdio", "tests": ["assert True"],
                           "test_cases": [{"input": "", "output": ""}]})
    assert e.value.field == "tests"


def test_an_unknown_key_in_a_test_case_is_named():
    with pytest.raises(ProblemError) as e:
        Problem.from_dict({"id": "x", "kind": "stdio", "test_cases": [{"input": "", "ouput": ""}]})
    assert e.value.field in ("test_cases[0].output", "test_cases[0].ouput")


def test_long_values_are_cut_short_in_messages():
    line = json.dumps({"id": "x" * 100000, "kind": "stdio", "test_cases": [{"input": "", "output": ""}]})
    result = load_problems_bytes(line.encode(), "big.jsonl")
    assert errors_of(result) == [(1, "id")]
    assert len(result.errors[0].message) < 300


# --- whole-file problems ---------------------------------------------------------------------------

def test_gzip_is_recognised_by_its_magic_bytes_whatever_the_name(tmp_path):
    data = gzip.compress((DATA / "native.jsonl").read_bytes())
    (tmp_path / "renamed.jsonl").write_bytes(data)
    assert len(load_problems(tmp_path / "renamed.jsonl").problems) == 4
    (tmp_path / "plain.jsonl.gz").write_bytes((DATA / "native.jsonl").read_bytes())
    assert len(load_problems(tmp_path / "plain.jsonl.gz").problems) == 4


def test_concatenated_gzip_members_are_all_read():
    lines = (DATA / "native.jsonl").read_bytes().splitlines(keepends=True)
    data = gzip.compress(b"".join(lines[:2])) + gzip.compress(b"".join(lines[2:]))
    assert len(load_problems_bytes(data, "x.jsonl.gz").problems) == 4


def test_a_truncated_gzip_file_is_a_file_error():
    data = gzip.compress((DATA / "native.jsonl").read_bytes())[:-30]
    result = load_problems_bytes(data, "cut.jsonl.gz")
    assert result.problems == [] and errors_of(result) == [(0, None)]
    assert "gzip" in result.errors[0].message


@pytest.mark.parametrize("data", [b"", b"\n\n  \n", b"\xef\xbb\xbf"])
def test_an_empty_file_is_a_clear_error(data):
    result = load_problems_bytes(data, "empty.jsonl")
    assert errors_of(result) == [(0, None)] and "empty" in result.errors[0].message


def test_a_pretty_printed_json_document_is_reported_as_not_json_lines():
    doc = json.dumps({"id": "x", "kind": "stdio", "test_cases": [{"input": "", "output": ""}]}, indent=2)
    result = load_problems_bytes(doc.encode(), "pretty.json")
    assert result.errors[0].line == 0 and "not JSON Lines" in result.errors[0].message


def test_a_json_array_on_one_line_says_to_write_one_object_per_line():
    rows = [json.loads(line) for line in (DATA / "native.jsonl").read_text().splitlines()]
    result = load_problems_bytes(json.dumps(rows).encode(), "array.json")
    assert errors_of(result) == [(1, None)] and "one problem object per line" in result.errors[0].message


def test_a_zip_archive_is_named_as_such():
    result = load_problems_bytes(b"PK\x03\x04" + b"\x00" * 100, "set.zip")
    assert "zip archive" in result.errors[0].message


def test_crlf_line_endings_and_a_byte_order_mark_are_accepted():
    data = b"\xef\xbb\xbf" + (DATA / "native.jsonl").read_bytes().replace(b"\n", b"\r\n")
    result = load_problems_bytes(data, "windows.jsonl")
    assert result.errors == [] and len(result.problems) == 4


def test_errors_past_the_cap_are_counted_in_one_last_error():
    data = b"nope\n" * (formats.MAX_ERRORS + 25)
    result = load_problems_bytes(data, "junk.jsonl")
    assert len(result.errors) == formats.MAX_ERRORS + 1
    assert result.errors[-1].message == "25 more errors not listed"


def test_a_line_over_the_size_cap_is_rejected(monkeypatch):
    monkeypatch.setattr(formats, "MAX_LINE_BYTES", 1000)
    big = json.dumps({"id": "big", "kind": "stdio", "test_cases": [{"input": "x" * 2000, "output": ""}]})
    small = (DATA / "native.jsonl").read_bytes()
    result = load_problems_bytes(big.encode() + b"\n" + small, "x.jsonl")
    assert errors_of(result) == [(1, None)] and len(result.problems) == 4


def test_load_problems_reads_file_objects_and_an_unknown_format_name_is_an_error():
    with open(DATA / "mbpp.jsonl", "rb") as f:
        assert len(load_problems(f).problems) == 6
    result = load_problems(DATA / "mbpp.jsonl", format="csv")
    assert errors_of(result) == [(0, "format")]


# --- detection and forced formats ------------------------------------------------------------------

def test_detection_uses_distinctive_keys_then_the_best_key_overlap():
    assert detect_format({"id": 1, "kind": "function"}) == "native"
    assert detect_format({"task_id": "HumanEval/1", "canonical_solution": ""}) == "humaneval"
    assert detect_format({"task_id": 2, "test_list": []}) == "mbpp"
    assert detect_format({"input_output": "{}"}) == "apps"
    assert detect_format({"name": "x", "public_tests": {}}) == "codecontests"
    assert detect_format({"id": "x", "prompt": "", "tests": []}) == "native"  # kind missing
    assert detect_format({"id": "x"}) == "native"
    assert detect_format({"foo": 1}) is None


def test_an_undetectable_first_object_names_its_keys_and_later_objects_still_decide():
    data = b'{"foo": 1, "bar": 2}\n' + (DATA / "mbpp.jsonl").read_bytes()
    result = load_problems_bytes(data, "x.jsonl")
    assert errors_of(result) == [(1, None)] and "'foo'" in result.errors[0].message
    assert result.format == "mbpp" and len(result.problems) == 6


def test_a_forced_format_reports_the_missing_field_on_each_line():
    result = load_problems(DATA / "humaneval.jsonl", format="mbpp")
    assert result.problems == []
    assert {e.field for e in result.errors} == {"code"}
    assert [e.line for e in result.errors] == list(range(1, 7))


def test_a_line_of_another_format_in_a_detected_file_is_an_error_for_that_line():
    data = (DATA / "mbpp.jsonl").read_bytes() + (DATA / "native.jsonl").read_bytes().split(b"\n")[0] + b"\n"
    result = load_problems_bytes(data, "mixed.jsonl")
    assert result.format == "mbpp" and errors_of(result) == [(7, "task_id")]


# --- HumanEval -------------------------------------------------------------------------------------

def he(task_id: str) -> Problem:
    return next(p for p in load_problems(DATA / "humaneval.jsonl").problems if p.id == task_id)


def test_humaneval_ids_prompts_and_reference_are_kept():
    raw = json.loads((DATA / "humaneval.jsonl").read_text().splitlines()[0])
    p = he("HumanEval/0")
    assert p.id == "HumanEval/0" and p.entry_point == "has_close_elements" and p.prompt == raw["prompt"]
    assert p.reference_solution == raw["prompt"] + raw["canonical_solution"]
    assert p.kind == "function" and p.split == "train"


def test_humaneval_top_level_asserts_become_separate_tests_calling_the_entry_point():
    p = he("HumanEval/0")
    assert len(p.tests) == 7
    assert p.tests[0] == "assert has_close_elements([1.0, 2.0, 3.9, 4.0, 5.0, 2.2], 0.3) == True"
    assert "METADATA = {" in p.setup and "candidate" not in p.setup + "".join(p.tests)


def test_humaneval_loops_around_asserts_stay_one_test_and_check_body_code_goes_to_setup():
    p = he("HumanEval/53")
    assert len(p.tests) == 6 and p.tests[-1].startswith("for i in range(100):")
    assert "import random" in p.setup
    zero = he("HumanEval/32")
    assert len(zero.tests) == 1 and "rng = random.Random(42)" in zero.setup


def test_humaneval_asserts_that_ignore_the_candidate_are_not_free_tests():
    p = he("HumanEval/64")
    assert len(p.tests) == 7 and "assert True" in p.setup


def test_humaneval_a_call_stored_in_a_variable_groups_with_the_asserts_that_read_it():
    p = he("HumanEval/900")
    grouped = [t for t in p.tests if t.startswith("got = ")]
    assert grouped == ["got = double_the_difference([0.1, 0.2, 0.3])\nassert got == 0, got\n"
                       "assert isinstance(got, int)"]
    assert "odd_sum = " in p.setup and len(p.tests) == 5


def test_humaneval_renames_only_the_parameter_not_attributes_or_keywords():
    from sandbox.formats.humaneval import split_check
    tests, setup = split_check("def check(c):\n    assert c(1) == obj.c  # c here\n"
                               "    assert c(x=c(2)) == 3\n", "f")
    assert tests == ["assert f(1) == obj.c", "assert f(x=f(2)) == 3"]


def test_humaneval_asserts_through_an_alias_of_the_candidate_are_still_tests():
    from sandbox.formats.humaneval import split_check
    tests, setup = split_check("def check(candidate):\n    f = candidate\n    assert f(1) == 2\n", "inc")
    assert tests == ["assert f(1) == 2"] and setup == "f = inc\n"


def test_humaneval_statements_that_use_a_stored_result_stay_with_it():
    from sandbox.formats.humaneval import split_check
    tests, setup = split_check("def check(candidate):\n    res = candidate([3, 1])\n    res.sort()\n"
                               "    assert res == [1, 3]\n    assert candidate([]) == []\n", "sort_it")
    assert tests == ["res = sort_it([3, 1])\nres.sort()\nassert res == [1, 3]", "assert sort_it([]) == []"]
    assert setup == ""


def test_humaneval_a_trailing_check_call_is_not_copied_into_the_setup():
    from sandbox.formats.humaneval import split_check
    tests, setup = split_check("def check(candidate):\n    assert candidate(1) == 2\n\ncheck(inc)\n", "inc")
    assert tests == ["assert inc(1) == 2"] and "check" not in setup


def test_bad_humaneval_lines_name_their_field():
    result = load_problems(DATA / "humaneval_malformed.jsonl")
    assert errors_of(result) == [(1, "entry_point"), (2, "test"), (3, "test"), (4, "test"), (5, "prompt")]
    assert [p.id for p in result.problems] == ["HumanEval/6"]


# --- MBPP ------------------------------------------------------------------------------------------

def test_mbpp_ids_entry_points_tests_and_setup():
    problems = {p.id: p for p in load_problems(DATA / "mbpp.jsonl").problems}
    assert list(problems) == ["mbpp/2", "mbpp/3", "mbpp/4", "mbpp/11", "mbpp/13", "mbpp/623"]
    assert problems["mbpp/11"].entry_point == "remove_Occ"
    assert len(problems["mbpp/11"].tests) == 3  # challenge_test_list is not used
    assert problems["mbpp/623"].setup.startswith("import math")


def test_mbpp_prompt_shows_the_signature_the_task_and_the_first_test():
    p = next(p for p in load_problems(DATA / "mbpp.jsonl").problems if p.id == "mbpp/4")
    assert p.prompt.startswith("import heapq as hq\n\ndef heap_queue_largest(nums, n):\n    \"\"\"Write a")
    assert p.tests[0].strip() in p.prompt


def test_mbpp_sanitized_variant_reads_prompt_and_test_imports():
    p = load_problems(DATA / "mbpp_sanitized.jsonl").problems[1]
    assert p.id == "mbpp/139" and p.setup == "import math\n" and "circumference" in p.prompt


def test_mbpp_prompt_text_with_triple_quotes_and_backslashes_stays_valid():
    row = {"task_id": 7, "text": 'Split on """ and \\n.', "code": "def f(s):\n    return s\n",
           "test_list": ["assert f('a') == 'a'"]}
    p = load_problems_bytes(json.dumps(row).encode(), "m.jsonl").problems[0]
    compile(p.prompt + "    pass\n", "p", "exec")


def test_bad_mbpp_lines_name_their_field():
    result = load_problems(DATA / "mbpp_malformed.jsonl")
    assert errors_of(result) == [(2, "test_list"), (3, "test_list"), (4, "code"), (5, "task_id")]


# --- APPS ------------------------------------------------------------------------------------------

def apps(pid: str) -> Problem:
    return next(p for p in load_problems(DATA / "apps.jsonl").problems if p.id == pid)


def test_apps_without_fn_name_is_stdio_with_the_first_solution_as_reference():
    p = apps("apps/4100")
    assert p.kind == "stdio" and p.test_cases[0] == TestCase("3\n1 2 3\n", "6\n")
    assert p.reference_solution.endswith("n = int(input())\nprint(sum(map(int, input().split())))\n")
    assert "introductory" in p.tags and p.prompt.startswith("You are given n integers.")


def test_apps_stdio_given_as_lists_of_lines_is_joined():
    assert apps("apps/4101").test_cases[0] == TestCase("2\nhello\nworld\n", "HELLO\nWORLD\n")


def test_apps_call_based_outputs_wrapped_in_a_list_accept_the_item_or_the_list_as_apps_does():
    assert apps("apps/2500").tests[0] == "assert digital_root(16) in (7, [7])"
    assert apps("apps/2501").tests[0] == "assert sort_pair([3, 1]) in ([1, 3], [[1, 3]])"
    assert apps("apps/200").tests[1] == "assert Solution().maxArea([1, 1]) == 1"  # not wrapped


def test_apps_leetcode_starter_code_calls_a_method_of_solution():
    p = apps("apps/200")
    assert p.entry_point == "Solution"
    assert p.tests[0] == "assert Solution().maxArea([1, 8, 6, 2, 5, 4, 8, 3, 7]) == 49"
    assert p.prompt.rstrip().endswith("def maxArea(self, height: List[int]) -> int:")


def test_apps_values_json_cannot_spell_in_python_are_written_as_python():
    io_ = {"fn_name": "f", "inputs": [[float("inf"), None, True, {"a": [1.5]}]], "outputs": [[float("nan")]]}
    row = {"problem_id": 1, "question": "q", "solutions": "[]", "input_output": json.dumps(io_)}
    p = load_problems_bytes(json.dumps(row).encode(), "a.jsonl").problems[0]
    assert p.tests == ("assert f(float('inf'), None, True, {'a': [1.5]}) in (float('nan'), [float('nan')])",)


def test_bad_apps_lines_name_their_field():
    result = load_problems(DATA / "apps_malformed.jsonl")
    assert errors_of(result) == [(2, "input_output"), (3, "input_output"), (4, "input_output"),
                                 (5, "solutions[0]"), (6, "input_output.fn_name")]


@pytest.mark.parametrize("io_, field", [
    ({"inputs": ["1\n", "2 \ud800\n"], "outputs": ["1\n", "2\n"]}, "input_output.inputs[1]"),
    ({"fn_name": "f", "inputs": [[{"k\udc00": 1}]], "outputs": [[1]]}, "input_output.inputs[0][0]"),
    ({"inputs": ["1\n"], "outputs": ["\ud83d"]}, "input_output.outputs[0]"),
])
def test_a_lone_surrogate_inside_an_apps_json_string_is_refused_on_its_line(io_, field):
    good = {"problem_id": 1, "question": "q", "solutions": json.dumps(["print(input())"]),
            "input_output": json.dumps({"inputs": ["1\n"], "outputs": ["1\n"]})}
    bad = {**good, "problem_id": 2, "input_output": json.dumps(io_)}  # "\\ud800" inside the string
    assert "\\ud" in json.dumps(bad)  # valid UTF-8 text on the line: only the inner JSON holds the surrogate
    result = load_problems_bytes((json.dumps(good) + "\n" + json.dumps(bad) + "\n").encode(), "a.jsonl")
    assert [p.id for p in result.problems] == ["apps/1"]
    assert errors_of(result) == [(2, field)]
    assert "lone surrogate" in result.errors[0].message


def test_a_lone_surrogate_inside_apps_solutions_is_refused_on_its_line():
    row = {"problem_id": 3, "question": "q", "solutions": json.dumps(["print(1)  # \udfff"]),
           "input_output": json.dumps({"inputs": ["1\n"], "outputs": ["1\n"]})}
    result = load_problems_bytes(json.dumps(row).encode(), "a.jsonl")
    assert not result.problems and errors_of(result) == [(1, "solutions[0]")]


# --- CodeContests ----------------------------------------------------------------------------------

def test_codecontests_merges_test_groups_without_repeats_and_picks_a_python3_solution():
    p = load_problems(DATA / "codecontests.jsonl").problems[0]
    assert p.id == "1548_A. Sum of Two" and p.kind == "stdio"
    assert [c.input for c in p.test_cases] == ["1 2\n", "-5 5\n", "1000000000 1000000000\n", "7 8\n", "0 0\n"]
    assert p.reference_solution == "a, b = map(int, input().split())\nprint(a + b)\n"
    assert p.time_limit_s == 1.5 and p.memory_limit_mb == 256
    assert p.tags == ("codecontests", "implementation", "math")


def test_codecontests_test_cases_are_capped():
    from sandbox.formats.codecontests import MAX_TEST_CASES
    p = load_problems(DATA / "codecontests.jsonl").problems[1]
    assert len(p.test_cases) == MAX_TEST_CASES and p.test_cases[0].input == "3\n1 5 2\n"


# --- hostile input ---------------------------------------------------------------------------------

def _junk(rng: random.Random, depth: int = 0):
    choices = [None, True, 0, -1, 1e308, "", "x" * rng.randint(0, 300), "\x00", "def (", [], {}]
    value = rng.choice(choices)
    if depth < 3 and rng.random() < 0.3:
        value = [_junk(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    elif depth < 3 and rng.random() < 0.2:
        value = {rng.choice(["input", "output", "fn_name", "inputs", "outputs", "language", "solution"]):
                 _junk(rng, depth + 1) for _ in range(rng.randint(0, 3))}
    return value


@pytest.mark.parametrize("name", ["native.jsonl", "humaneval.jsonl", "mbpp.jsonl", "apps.jsonl",
                                  "codecontests.jsonl"])
def test_wrong_types_in_every_field_give_line_errors_never_a_crash(name):
    rng = random.Random(name)
    rows = [json.loads(line) for line in (DATA / name).read_text().splitlines()]
    fmt = SAMPLES[name][0]
    lines = []
    for _ in range(300):
        row = dict(rng.choice(rows))
        for key in rng.sample(sorted(row), rng.randint(1, 3)):
            row[key] = _junk(rng)
            if key == "input_output" and rng.random() < 0.5:
                row[key] = json.dumps(row[key])
        lines.append(json.dumps(row))
    result = load_problems_bytes("\n".join(lines).encode(), name, format=fmt)
    assert len(result.problems) + len(result.errors) >= 1
    for error in result.errors:
        assert isinstance(error, LoadError) and 1 <= error.line <= 300
        assert not error.message.startswith("cannot read this"), error  # an importer bug
        assert len(error.message) < 1000


def test_deeply_nested_values_inside_a_field_are_a_line_error():
    deep = "[" * 5000 + "]" * 5000
    row = {"problem_id": 1, "question": "q", "solutions": "[]",
           "input_output": '{"fn_name": "f", "inputs": [' + deep + '], "outputs": [1]}'}
    result = load_problems_bytes(json.dumps(row).encode(), "deep.jsonl")
    assert errors_of(result) == [(1, "input_output")]


def test_formats_constant_lists_every_importer():
    assert set(FORMATS) == set(formats.converters())


def test_a_huge_humaneval_check_is_handled_in_linear_time():
    from sandbox.formats.humaneval import split_check
    body = "    assert candidate(" + ", ".join(["candidate"] * 10000) + ") == 1\n"
    tests, _ = split_check("def check(candidate):\n" + body, "f")
    assert tests[0].count("f") == 10001


def _gzip_of_lines(line: bytes, count: int) -> bytes:
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb") as f:
        block = line * 65536
        for _ in range(count // 65536):
            f.write(block)
    return buf.getvalue()


def test_a_flood_of_tiny_lines_is_refused_at_the_line_bound_after_reading_little():
    import tracemalloc

    from sandbox.formats import parse_stream

    data = _gzip_of_lines(b"{}\n", 64 << 20 >> 1)  # ~96 MiB of tiny lines in a small .gz
    expanded = []
    tracemalloc.start()
    result = parse_stream(io.BytesIO(data), "flood.jsonl.gz", max_lines=1000,
                          progress=lambda lines, size: expanded.append(size))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert result.problems == [] and result.limit == "lines"
    assert result.errors[0].line == 0 and "more than 1000 lines" in result.errors[0].message
    assert max(expanded) <= 2 << 20  # it stopped decompressing near the bound, not at 96 MiB
    assert peak < 32 << 20


def test_a_gzip_bomb_is_refused_at_the_byte_bound_with_bounded_memory():
    import tracemalloc

    from sandbox.formats import parse_stream

    data = _gzip_of_lines(b" " * 63 + b"\n", 4 << 20)  # 256 MiB of blank lines
    tracemalloc.start()
    result = parse_stream(io.BytesIO(data), "bomb.jsonl.gz", max_bytes=8 << 20)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert result.limit == "bytes" and "decompresses to more than 8 MiB" in result.errors[0].message
    assert peak < 32 << 20


def test_streaming_reports_progress_and_reads_lines_split_across_chunks(monkeypatch):
    from sandbox import formats

    monkeypatch.setattr(formats, "READ_CHUNK", 7)
    monkeypatch.setattr(formats, "PROGRESS_EVERY", 2)
    rows = [{"id": f"p{i}", "kind": "function", "entry_point": "f", "tests": ["assert f()"]} for i in range(5)]
    text = "\ufeff" + "\r\n".join(json.dumps(r) for r in rows)
    seen = []
    result = formats.parse_stream(io.BytesIO(gzip.compress(text.encode())), "x.jsonl.gz",
                                  progress=lambda lines, size: seen.append(lines))
    assert [p.id for p in result.problems] == [f"p{i}" for i in range(5)] and result.errors == []
    assert seen == [2, 4, 5]
