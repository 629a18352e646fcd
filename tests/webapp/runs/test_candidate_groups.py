"""The inspector groups failing candidates by identical code and by first error, with counts."""
import time

from tests.factories import ingest, result
from webapp.runs.candidate_groups import code_key, first_error, group_failures, member_of


def candidate(step, index, code, status="failed", error="AssertionError", stderr=""):
    res = result(status, passed=2 if status == "passed" else 1, stderr=stderr)
    for t in res["tests"]:
        if not t["passed"]:
            t["error"] = error
    return {"step": step, "index": index, "code": code, "passed": status == "passed", "result": res,
            "outcome": status}


def test_identical_code_up_to_trailing_space_is_one_group_largest_first():
    listed = [candidate(3, 0, "def f():\n    return 1  \n"), candidate(2, 1, "\ndef f():\n    return 1\n"),
              candidate(2, 0, "def f():\n    return 2\n"), candidate(1, 0, "def f():\n    return 1\n", "passed")]
    groups = group_failures(listed)
    assert groups["failing"] == 3
    assert [(g["count"], g["label"], g["newest"]) for g in groups["by_code"]] == [
        (2, "def f(): ⏎ return 1", {"step": 3, "index": 0}), (1, "def f(): ⏎ return 2", {"step": 2, "index": 0})]
    assert member_of(groups, listed[1]) == (0, 0) and member_of(groups, listed[3]) == (None, None)


def test_the_first_error_is_the_first_failing_tests_then_stderrs_last_line_then_the_outcome():
    assert first_error(candidate(1, 0, "x", error="Traceback\n  ...\nAssertionError: 3 != 4")) == "AssertionError: 3 != 4"
    no_tests = candidate(1, 0, "x", "error", stderr="Traceback (most recent call last):\nNameError: name 'y'\n\n")
    no_tests["result"]["tests"] = []
    assert first_error(no_tests) == "NameError: name 'y'"
    no_tests["result"]["stderr"] = ""
    assert first_error(no_tests) == "error"
    assert code_key("  \ndef f():  \n  pass \n\n") == "def f():\n  pass"


def test_the_fragment_lists_the_groups_with_counts_over_every_page(client_alice, run):
    same = "def add0(a, b):\n    return a - b\n"
    cands = [{"code": same if i < 3 else f"def add0(a, b):\n    return {i}\n", "reward": 0.3,
              "rewards": {"pass_rate": 0.5}, "result": result("failed")} for i in range(4)]
    ingest(run, [{"event": "problem", "step": 1, "problem_id": "HumanEval/0", "candidates": cands, "time": time.time()}])
    html = client_alice.get(f"/runs/{run.pk}/problems/HumanEval%2F0/candidates?status=failed").content.decode()
    assert "4 failing, in 2 distinct codes and 1 first error" in html
    assert '<strong class="group-count">3×</strong> <code>def add0(a, b): ⏎ return a - b</code>' in html
    assert '<strong class="group-count">4×</strong> <code>AssertionError</code>' in html
    assert html.count('data-code-group="0"') == 3 and html.count('data-error-group="0"') == 4


def test_a_long_codes_label_is_cut_and_says_how_many_lines():
    from webapp.runs.candidate_groups import CODE_CHARS, code_label

    label = code_label({"code": "\n".join(f"x{i} = {i}" for i in range(40))})
    assert len(label) < CODE_CHARS + 15 and label.endswith("… (40 lines)") and label.startswith("x0 = 0 ⏎ x1 = 1")
