"""Process backend specifics: honest isolation reports, the rlimits-only fallback, import cost."""

from __future__ import annotations

import subprocess
import sys

from sandbox.backends.process import ProcessExecutor
from sandbox.result import Outcome

from .conftest import fn_problem, limits

SQUARE = fn_problem(["assert f(2) == 4"])
GOOD = "def f(x):\n    return x * x\n"


def test_bubblewrap_results_list_the_mechanisms_applied():
    with ProcessExecutor("cold") as ex:
        res = ex.run(SQUARE, GOOD, limits(SQUARE))
    assert res.status is Outcome.PASSED and res.isolation == "bwrap"
    assert {"user_ns", "pid_ns", "net_ns", "mount_ns", "rlimits"} <= set(res.isolation_features)


def test_without_seccomp_the_result_does_not_claim_it():
    with ProcessExecutor("cold", use_seccomp=False) as ex:
        res = ex.run(SQUARE, GOOD, limits(SQUARE))
    assert res.status is Outcome.PASSED and "seccomp" not in res.isolation_features


def test_without_bubblewrap_it_runs_and_reports_rlimits_isolation():
    with ProcessExecutor("warm", use_bwrap=False) as ex:
        res = ex.run(SQUARE, GOOD, limits(SQUARE))
        forged = ex.run(SQUARE, "class A:\n    def __eq__(s, o): return True\ndef f(x): return A()",
                        limits(SQUARE))
        loop = ex.run(SQUARE, "while True: pass", limits(SQUARE))
    assert res.status is Outcome.PASSED and res.isolation == "rlimits"
    assert not {"user_ns", "pid_ns", "net_ns", "mount_ns", "seccomp"} & set(res.isolation_features)
    assert forged.status is Outcome.FAILED  # verdicts are decided outside, whatever the isolation
    assert loop.status is Outcome.TIMEOUT


def test_importing_sandbox_pulls_in_neither_torch_nor_django_nor_threads():
    code = ("import sys, threading, sandbox; from sandbox import Runner, Problem, check_problems\n"
            "assert 'torch' not in sys.modules and 'django' not in sys.modules, 'heavy import'\n"
            "assert threading.active_count() == 1\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
