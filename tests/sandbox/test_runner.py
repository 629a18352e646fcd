"""Runner / run_batch: order, isolation of slow candidates, assembly styles, bad input."""

from __future__ import annotations

from concurrent.futures import Future

import pytest

from sandbox.problems import Problem
from sandbox.result import Outcome
from sandbox.runner import Candidate, Runner, run_batch

SQ = Problem(id="sq", kind="function", entry_point="sq", tests=("assert sq(3) == 9",),
             prompt="def sq(x):\n", time_limit_s=1.0, memory_limit_mb=128)
SUM = Problem(id="sum", kind="stdio", test_cases=[{"input": "1 2\n", "output": "3\n"}],
              time_limit_s=1.0, memory_limit_mb=128)


@pytest.mark.parametrize("mode", ["warm", "cold"])
def test_results_come_back_in_candidate_order(mode):
    cands = [Candidate("sq", code="def sq(x):\n    return x * x\n"),
             Candidate("sum", code="print(3)"),
             Candidate("sq", completion="    return x + x\n"),
             Candidate("sq", reply="Here:\n```python\ndef sq(x):\n    return x ** 2\n```\n"),
             Candidate("sum", code="print(4)")]
    results = run_batch([SQ, SUM], cands, workers=2, mode=mode)
    assert [r.status for r in results] == [Outcome.PASSED, Outcome.PASSED, Outcome.FAILED,
                                          Outcome.PASSED, Outcome.FAILED]


def test_a_slow_candidate_does_not_hold_up_the_others():
    cands = [Candidate("sq", code="while True: pass")] + \
        [Candidate("sq", code="def sq(x):\n    return x * x\n") for _ in range(12)]
    finished = []
    with Runner(workers=2) as runner:
        fut = runner.submit_batch({"sq": SQ}, cands)
        assert isinstance(fut, Future)
        results = fut.result()
        finished = [r.status for r in results]
    assert finished[0] is Outcome.TIMEOUT
    assert all(s is Outcome.PASSED for s in finished[1:])


def test_a_syntax_error_is_judged_without_a_sandbox():
    (res,) = run_batch([SQ], [Candidate("sq", code="def sq(:")], workers=1)
    assert res.status is Outcome.SYNTAX_ERROR and not res.syntax_ok and res.tests_total == 1


def test_an_unknown_problem_id_is_an_error_result_not_a_crash():
    (res,) = run_batch([SQ], [Candidate("nope", code="x = 1")], workers=1)
    assert res.status is Outcome.ERROR and "nope" in res.detail


def test_runner_overrides_the_problems_time_limit():
    with Runner(workers=1, timeout_s=0.5) as runner:
        (res,) = runner.run_batch([SQ], [Candidate("sq", code="import time\ntime.sleep(5)")])
    assert res.status is Outcome.TIMEOUT


def test_an_unknown_backend_names_the_valid_ones():
    with pytest.raises(ValueError, match="valid: .*process"):
        Runner(backend="nope")


def test_a_mixed_batch_of_attacks_and_good_code_gets_the_right_verdicts():
    good = "def sq(x):\n    return x * x\n"
    attacks = ["while True: pass", "import os\nwhile True:\n    try: os.fork()\n    except OSError: pass",
               "x = []\nwhile True: x.append(bytearray(1 << 24))", "import os\nos._exit(0)",
               "class A:\n    def __eq__(s, o): return True\ndef sq(x): return A()",
               "while True: print('x' * 100000)"]
    cands = []
    for a in attacks:
        cands += [Candidate("sq", code=a), Candidate("sq", code=good)]
    with Runner(workers=2, mode="warm") as runner:
        results = runner.run_batch([SQ], cands)
    assert all(r.status is Outcome.PASSED for r in results[1::2]), [r.detail for r in results[1::2]]
    assert not any(r.passed for r in results[0::2])


def test_warm_workers_are_recycled_and_keep_judging_correctly():
    from sandbox.backends.process import ProcessExecutor
    from sandbox.limits import Limits
    with ProcessExecutor("warm", max_executions_per_worker=2) as ex:
        results = [ex.run(SQ, "def sq(x):\n    return x * x\n", Limits.for_problem(SQ))
                   for _ in range(5)]
        started = len(ex._all)
    assert all(r.status is Outcome.PASSED for r in results)
    assert started <= 1  # retired workers are closed, not kept


def test_a_candidate_without_exactly_one_program_is_an_error_result():
    (res,) = run_batch([SQ], [Candidate("sq", code="x = 1", completion="y")], workers=1)
    assert res.status is Outcome.ERROR and "exactly one" in res.detail and res.tests_total == 1
