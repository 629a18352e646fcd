"""`python -m sandbox run | run-batch | check`: output contract, exit codes, no stray processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.sandbox.conftest import cli, processes_in_cgroups_of

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SQ = {"id": "sq", "kind": "function", "entry_point": "sq", "tests": ["assert sq(2) == 4"],
      "reference_solution": "def sq(x):\n    return x * x\n", "prompt": "def sq(x):\n",
      "time_limit_s": 1.0, "memory_limit_mb": 128}
SUM = {"id": "sum", "kind": "stdio", "test_cases": [{"input": "1 2\n", "output": "3\n"}],
       "reference_solution": "print(sum(map(int, input().split())))", "time_limit_s": 1.0}


@pytest.fixture
def files(tmp_path):
    (tmp_path / "p.json").write_text(json.dumps(SQ))
    (tmp_path / "set.jsonl").write_text(json.dumps(SQ) + "\n" + json.dumps(SUM) + "\n")
    (tmp_path / "good.py").write_text("def sq(x):\n    return x * x\n")
    (tmp_path / "loop.py").write_text("while True:\n    pass\n")
    (tmp_path / "completion.txt").write_text("    return x ** 2\n")
    return tmp_path


def test_run_prints_one_result_and_exits_zero_whatever_the_verdict(files):
    for code, status in (("good.py", "passed"), ("loop.py", "timeout")):
        out = cli("run", "--problem", files / "p.json", "--code", files / code, "--timeout", 0.5)
        assert out.returncode == 0, out.stderr
        (line,) = out.stdout.splitlines()
        res = json.loads(line)
        assert res["status"] == status and res["isolation"] == "bwrap"
        assert {"tests_passed", "tests_total", "stdout_truncated", "isolation_features"} <= set(res)


def test_run_appends_a_completion_to_the_prompt(files):
    out = cli("run", "--problem", files / "p.json", "--completion", files / "completion.txt")
    assert json.loads(out.stdout)["status"] == "passed"


def test_run_batch_prints_a_line_per_candidate_then_a_summary(files):
    cands = files / "c.jsonl"
    cands.write_text("\n".join(json.dumps(c) for c in (
        {"problem_id": "sq", "code": "def sq(x):\n    return x * x\n"},
        {"problem_id": "sum", "code": "print(4)"},
        {"problem_id": "sq", "completion": "    return x + x\n"})) + "\n")
    out = cli("run-batch", "--problems", files / "set.jsonl", "--candidates", cands, "--workers", 2)
    assert out.returncode == 0, out.stderr
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    assert [(r["problem_id"], r["candidate_index"], r["status"]) for r in lines[:3]] == [
        ("sq", 0, "passed"), ("sum", 1, "failed"), ("sq", 2, "passed")]
    summary = lines[3]["summary"]
    assert summary["candidates"] == 3 and summary["passed"] == 2 and summary["isolation"] == "bwrap"
    assert summary["executions_per_s"] > 0


def test_run_batch_names_the_bad_candidate_line(files):
    cands = files / "c.jsonl"
    cands.write_text('{"problem_id": "sq", "code": "x"}\n{"problem_id": "zzz", "code": "x"}\n')
    out = cli("run-batch", "--problems", files / "set.jsonl", "--candidates", cands)
    assert out.returncode == 2 and "line 2" in out.stderr and "zzz" in out.stderr


def test_check_passes_good_problems_and_exits_one_on_a_bad_reference(files):
    out = cli("check", files / "set.jsonl")
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.splitlines()[-1] == "2 passed, 0 failed"
    bad = dict(SQ, id="bad", reference_solution="def sq(x):\n    return 0\n")
    (files / "bad.jsonl").write_text(json.dumps(SQ) + "\n" + json.dumps(bad) + "\n")
    out = cli("check", files / "bad.jsonl")
    assert out.returncode == 1
    rows = [json.loads(line) for line in out.stdout.splitlines()[:-1]]
    assert rows[1]["problem_id"] == "bad" and not rows[1]["reference_passed"] and rows[1]["detail"]
    assert out.stdout.splitlines()[-1] == "1 passed, 1 failed"


def test_usage_errors_exit_two(files):
    assert cli("run", "--problem", files / "p.json").returncode == 2  # no --code/--completion
    out = cli("run", "--problem", files / "missing.json", "--code", files / "good.py")
    assert out.returncode == 2 and "missing.json" in out.stderr
    out = cli("run", "--problem", files / "p.json", "--code", files / "good.py", "--backend", "nope")
    assert out.returncode == 2 and "valid" in out.stderr


def test_no_cli_call_leaves_a_process_behind(files):
    daemon = files / "daemon.py"
    daemon.write_text("import os, time\nif os.fork() == 0:\n    os.setsid()\n"
                      "    if os.fork() == 0:\n        time.sleep(300)\n    os._exit(0)\n"
                      "def sq(x):\n    return x * x\n")
    for verb in (("run", "--problem", files / "p.json", "--code", daemon),
                 ("run", "--problem", files / "p.json", "--code", files / "loop.py",
                  "--timeout", "0.5", "--mode", "warm")):
        proc = subprocess.Popen([sys.executable, "-m", "sandbox", *map(str, verb)], cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        proc.communicate(timeout=120)
        assert proc.returncode == 0
        assert processes_in_cgroups_of(proc.pid) == set()
        assert _orphaned_sandboxes() == []


def _orphaned_sandboxes() -> list[str]:
    """Sandbox processes whose harness copy is gone: their CLI exited and cleaned up, they did not."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            cmd = open(f"/proc/{name}/cmdline", "rb").read().split(b"\0")
        except OSError:
            continue
        for arg in cmd:
            if b"/crucible-harness-" in arg:
                path = arg.decode(errors="replace")
                if not os.path.exists(path):
                    found.append(f"{name}: {path}")
                break
    return found


def test_run_batch_candidate_index_is_the_line_number_even_after_a_blank_line(files):
    cands = files / "c.jsonl"
    cands.write_text('{"problem_id": "sq", "code": "def sq(x):\\n    return x * x\\n"}\n\n'
                     '{"problem_id": "sq", "completion": "    return 0\\n"}\n')
    out = cli("run-batch", "--problems", files / "set.jsonl", "--candidates", cands, "--workers", 1)
    assert out.returncode == 0, out.stderr
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    assert [(r["candidate_index"], r["status"]) for r in lines[:2]] == [(0, "passed"), (2, "failed")]
    assert set(lines[2]) == {"summary"}
    assert {"candidates", "passed", "wall_s", "executions_per_s", "isolation"} <= set(lines[2]["summary"])


def test_run_batch_names_the_field_of_a_candidate_whose_code_is_not_a_string(files):
    cands = files / "c.jsonl"
    cands.write_text('{"problem_id": "sq", "code": 5}\n')
    out = cli("run-batch", "--problems", files / "set.jsonl", "--candidates", cands)
    assert out.returncode == 2 and "line 1" in out.stderr and "code: must be a string" in out.stderr
    assert "Traceback" not in out.stderr


def test_run_batch_refuses_a_bad_limit_as_a_usage_error(files):
    cands = files / "c.jsonl"
    cands.write_text('{"problem_id": "sq", "code": "x"}\n')
    out = cli("run-batch", "--problems", files / "set.jsonl", "--candidates", cands, "--timeout", -1)
    assert out.returncode == 2 and "time_limit_s" in out.stderr and out.stdout == ""


def test_check_last_line_stays_exact_when_some_lines_cannot_be_imported(files):
    (files / "mixed.jsonl").write_text(json.dumps(SQ) + "\n" + '{"id": "x", "kind": "nope"}\n')
    out = cli("check", files / "mixed.jsonl")
    assert out.returncode == 1
    assert out.stdout.splitlines()[-1] == "1 passed, 1 failed"
    assert "line 2" in out.stderr and "kind" in out.stderr


def test_check_checks_an_excluded_problem_but_does_not_count_it(files):
    bad = dict(SQ, id="bad", reference_solution="def sq(x):\n    return 0\n", excluded=True)
    (files / "curated.jsonl").write_text(json.dumps(SQ) + "\n" + json.dumps(bad) + "\n")
    out = cli("check", files / "curated.jsonl")
    assert out.returncode == 0, out.stdout + out.stderr  # runs skip it: its failure fails nothing
    rows = [json.loads(line) for line in out.stdout.splitlines()[:-1]]
    assert [(r["problem_id"], r.get("excluded")) for r in rows] == [("sq", None), ("bad", True)]
    assert not rows[1]["reference_passed"] and rows[1]["detail"]  # its verdict is still there to read
    assert out.stdout.splitlines()[-1] == "1 passed, 0 failed"
    assert "1 excluded problem(s) checked but not counted (1 of them failing" in out.stderr
    (files / "broken.jsonl").write_text(json.dumps(dict(SQ, excluded="yes")) + "\n")
    out = cli("check", files / "broken.jsonl")
    assert out.returncode == 1 and "line 1: excluded: 'yes' must be true or false" in out.stderr
