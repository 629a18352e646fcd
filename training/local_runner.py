"""A fallback executor for when the sandbox's execution engine is not available.

THIS IS NOT A SECURITY SANDBOX. It forks one plain child process per candidate with a CPU-time and
address-space limit and nothing else: no namespaces, no seccomp, network and file system open. It
exists so that building the tiny model and the unit tests work on a checkout where
``sandbox.Runner`` cannot run; ``make_runner()`` prefers the sandbox whenever it imports.

Same surface as ``sandbox.Runner``: ``run_batch(problems, candidates) -> list[result]`` where a
candidate has ``problem_id`` and one of ``code`` / ``completion`` / ``reply`` and a result has
``status``, ``tests_passed``, ``tests_total``, ``passed`` and ``to_dict()``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from dataclasses import asdict, dataclass
from typing import Any, Mapping, Sequence

# Runs in a child interpreter: reads jobs as JSON on stdin, forks per job, prints results as JSON.
_CHILD = r'''
import io, json, os, resource, signal, sys
jobs = json.load(sys.stdin)
out = []
for job in jobs:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        res = {"status": "error", "tests_passed": 0, "detail": ""}
        try:
            t = max(1, int(job["time_limit_s"] + 0.999))
            resource.setrlimit(resource.RLIMIT_CPU, (t, t + 1))
            mem = job["memory_mb"] << 20
            resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
            signal.alarm(t + 1)
            sys.stdout = io.StringIO()
            if job["kind"] == "stdio":
                passed = 0
                for case in job["cases"]:
                    sys.stdin = io.StringIO(case["input"])
                    sys.stdout = io.StringIO()
                    try:
                        exec(compile(job["code"], "<candidate>", "exec"), {"__name__": "__main__"})
                    except SystemExit:
                        pass
                    except BaseException:
                        continue
                    if sys.stdout.getvalue().split() == case["output"].split():
                        passed += 1
                res = {"status": "passed" if passed == len(job["cases"]) else "failed", "tests_passed": passed}
            else:
                try:
                    code = compile(job["code"], "<candidate>", "exec")
                except SyntaxError as e:
                    res = {"status": "syntax_error", "tests_passed": 0, "detail": str(e)}
                    raise SystemExit
                ns = {"__name__": "__candidate__"}
                try:
                    exec(code, ns)
                    exec(job["setup"], ns)
                except BaseException as e:
                    res = {"status": "error", "tests_passed": 0, "detail": repr(e)[:200]}
                    raise SystemExit
                passed = 0
                for test in job["tests"]:
                    try:
                        exec(test, ns)
                        passed += 1
                    except BaseException:
                        pass
                res = {"status": "passed" if passed == len(job["tests"]) else "failed", "tests_passed": passed}
        except SystemExit:
            pass
        except BaseException as e:
            res = {"status": "error", "tests_passed": 0, "detail": repr(e)[:200]}
        os.write(w, json.dumps(res).encode())
        os._exit(0)
    os.close(w)
    data = b""
    while True:
        chunk = os.read(r, 65536)
        if not chunk:
            break
        data += chunk
    os.close(r)
    _, status = os.waitpid(pid, 0)
    if data:
        out.append(json.loads(data))
    elif os.WIFSIGNALED(status) and os.WTERMSIG(status) in (signal.SIGXCPU, signal.SIGALRM, signal.SIGKILL):
        out.append({"status": "timeout", "tests_passed": 0, "detail": "time limit"})
    else:
        out.append({"status": "killed", "tests_passed": 0, "detail": "child died: %r" % status})
sys.stdout = sys.__stdout__
print(json.dumps(out))
'''


@dataclass
class LocalResult:
    """The subset of the sandbox's ExecutionResult that training reads."""

    status: str
    tests_passed: int
    tests_total: int
    syntax_ok: bool = True
    format_ok: bool = True
    detail: str = ""
    isolation: str = "none"

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    def to_dict(self) -> dict:
        return asdict(self)


class SubprocessRunner:
    """Unisolated fallback with ``sandbox.Runner``'s ``run_batch`` surface (see module docstring)."""

    def __init__(self, workers: int = 1, timeout_s: float | None = None, memory_mb: int | None = None, **_: Any):
        self.timeout_s = timeout_s
        self.memory_mb = memory_mb

    def __enter__(self) -> "SubprocessRunner":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        pass

    def run_batch(self, problems: Mapping[str, Any] | Sequence[Any], candidates: Sequence[Any]) -> list[LocalResult]:
        from sandbox.candidate import assemble

        by_id = problems if isinstance(problems, Mapping) else {p.id: p for p in problems}
        jobs, assembled = [], []
        for c in candidates:
            problem = by_id[c.problem_id]
            kw = {k: getattr(c, k) for k in ("code", "completion", "reply") if getattr(c, k, None) is not None}
            a = assemble(problem, **kw)
            assembled.append((problem, a))
            jobs.append({"kind": problem.kind, "code": a.code, "tests": list(problem.tests),
                         "setup": problem.setup or "",
                         "cases": [{"input": t.input, "output": t.output} for t in problem.test_cases],
                         "time_limit_s": self.timeout_s or problem.time_limit_s,
                         "memory_mb": self.memory_mb or max(problem.memory_limit_mb, 512)})
        if not jobs:
            return []
        proc = subprocess.run([sys.executable, "-c", _CHILD], input=json.dumps(jobs), capture_output=True,
                              text=True, timeout=60 + sum(j["time_limit_s"] + 1 for j in jobs))
        if proc.returncode != 0:
            raise RuntimeError(f"local runner failed: {proc.stderr[-2000:]}")
        rows = json.loads(proc.stdout.strip().splitlines()[-1])
        results = []
        for (problem, a), row in zip(assembled, rows):
            total = len(problem.tests) if problem.kind == "function" else len(problem.test_cases)
            status = row["status"] if a.syntax_ok else "syntax_error"
            results.append(LocalResult(status, row.get("tests_passed", 0), total, a.syntax_ok, a.format_ok,
                                       row.get("detail", "") or a.detail))
        return results


def make_runner(backend: str = "process", workers: int = 2, mode: str = "warm", timeout_s: float | None = None,
                memory_mb: int | None = None) -> Any:
    """``sandbox.Runner`` when the sandbox's execution engine imports, else the unisolated fallback."""
    try:
        from sandbox import Runner  # type: ignore[attr-defined]
    except ImportError:
        warnings.warn("sandbox.Runner is not available; executing candidates WITHOUT isolation "
                      "(training.local_runner.SubprocessRunner)", RuntimeWarning, stacklevel=2)
        return SubprocessRunner(workers=workers, timeout_s=timeout_s, memory_mb=memory_mb)
    return Runner(backend=backend, workers=workers, mode=mode, timeout_s=timeout_s, memory_mb=memory_mb)


@dataclass(frozen=True)
class LocalCandidate:
    problem_id: str
    code: str | None = None
    completion: str | None = None
    reply: str | None = None


def make_candidate(problem_id: str, *, code: str | None = None, completion: str | None = None,
                   reply: str | None = None) -> Any:
    """A ``sandbox.Candidate`` when the sandbox provides one, else an equivalent local dataclass."""
    try:
        from sandbox import Candidate  # type: ignore[attr-defined]
    except ImportError:
        Candidate = LocalCandidate
    return Candidate(problem_id=problem_id, code=code, completion=completion, reply=reply)
