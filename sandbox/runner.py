"""Batch execution: keep every worker slot busy, one deadline per candidate.

`Runner(workers=N)` runs N executions at once, each on its own warm worker (mode `warm`) or its own
fresh sandbox (mode `cold`). Slots pull the next candidate from a shared queue as soon as they are
free, so a candidate that runs into its time limit holds up only its own slot.
"""

from __future__ import annotations

import os
import queue
import threading
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Mapping, Sequence

from .limits import Limits
from .result import ExecutionResult, Outcome, TestResult


@dataclass(frozen=True)
class Candidate:
    """One program to judge: exactly one of `code` (whole program), `completion` (appended to the
    problem's prompt) or `reply` (chat reply; its first fenced block)."""

    problem_id: str
    code: str | None = None
    completion: str | None = None
    reply: str | None = None


def _problem_map(problems) -> dict:
    if isinstance(problems, Mapping):
        return dict(problems)
    out = {}
    for p in problems:
        out[p.id] = p
    return out


class Runner:
    """Runs batches of candidates on `workers` parallel sandboxes. Use as a context manager."""

    def __init__(self, backend: str = "process", workers: int | None = None, mode: str = "warm",
                 timeout_s: float | None = None, memory_mb: int | None = None, **backend_options):
        from .backends import get_executor
        if timeout_s is not None or memory_mb is not None:
            # Fail here, once, rather than as a "sandbox failure" result on every candidate.
            Limits(time_limit_s=2.0 if timeout_s is None else timeout_s,
                   memory_mb=256 if memory_mb is None else memory_mb)
        self.workers = max(1, int(workers or os.cpu_count() or 1))
        self.mode = mode
        self.timeout_s = timeout_s
        self.memory_mb = memory_mb
        self.backend = backend
        opts = dict(backend_options)
        opts.setdefault("mode", mode)
        self.executor = get_executor(backend, **opts)
        self._jobs: queue.Queue = queue.Queue()
        self._threads: list[threading.Thread] = []
        self._closed = False
        self._lock = threading.Lock()

    # -- public ---------------------------------------------------------------------------------
    def run_one(self, problem, candidate: Candidate | None = None, *, code: str | None = None
                ) -> ExecutionResult:
        cand = candidate or Candidate(problem_id=problem.id, code=code)
        return self._execute(problem, cand)

    def run_batch(self, problems, candidates: Sequence[Candidate]) -> list[ExecutionResult]:
        """Results in the same order as `candidates`."""
        return self.submit_batch(problems, candidates).result()

    def submit_batch(self, problems, candidates: Sequence[Candidate]) -> Future:
        """Start a batch and return at once; the Future holds the list of results."""
        if self._closed:
            raise RuntimeError("Runner is closed")
        pmap = _problem_map(problems)
        fut: Future = Future()
        fut.set_running_or_notify_cancel()
        n = len(candidates)
        results: list[ExecutionResult | None] = [None] * n
        if n == 0:
            fut.set_result([])
            return fut
        state = {"left": n}
        lock = threading.Lock()

        def done(i: int, res: ExecutionResult) -> None:
            results[i] = res
            with lock:
                state["left"] -= 1
                last = state["left"] == 0
            if last:
                fut.set_result(results)

        self._ensure_threads()
        for i, cand in enumerate(candidates):
            problem = pmap.get(cand.problem_id)
            if problem is None:
                done(i, ExecutionResult(status=Outcome.ERROR, syntax_ok=False, format_ok=False,
                                        detail=f"candidate {i}: unknown problem_id {cand.problem_id!r}"))
                continue
            self._jobs.put((problem, cand, i, done))
        return fut

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        for _ in self._threads:
            self._jobs.put(None)
        for t in self._threads:
            t.join(timeout=30)
        self.executor.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def isolation(self) -> str:
        describe = getattr(self.executor, "describe", None)
        return describe()[0] if describe else self.backend

    # -- internals ------------------------------------------------------------------------------
    def _ensure_threads(self) -> None:
        with self._lock:
            if self._threads:
                return
            prefetch = getattr(self.executor, "set_prefetch", None)
            if prefetch and self.mode == "cold":
                prefetch(self.workers)
            warm = getattr(self.executor, "warm_up", None)
            if warm and self.mode == "warm":
                warm(self.workers)  # started in parallel by the executor's spawner threads
            for k in range(self.workers):
                t = threading.Thread(target=self._slot, name=f"sandbox-slot-{k}", daemon=True)
                t.start()
                self._threads.append(t)

    def _slot(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            problem, cand, i, done = job
            try:
                res = self._execute(problem, cand)
            except Exception as e:  # a broken sandbox: report it on this candidate, keep going
                res = ExecutionResult(status=Outcome.KILLED, detail=f"sandbox failure: {type(e).__name__}: {e}",
                                      tests=[TestResult(name=n, error="not run: sandbox failure")
                                             for n in _names(problem)])
            done(i, res)

    def _execute(self, problem, cand: Candidate) -> ExecutionResult:
        from .candidate import assemble
        limits = Limits.for_problem(problem, timeout_s=self.timeout_s, memory_mb=self.memory_mb)
        given = {k: v for k, v in (("code", cand.code), ("completion", cand.completion),
                                   ("reply", cand.reply)) if v is not None}
        try:
            asm = assemble(problem, **given)
        except (TypeError, ValueError) as e:  # not exactly one string of code/completion/reply
            return ExecutionResult(status=Outcome.ERROR, syntax_ok=False, format_ok=False,
                                   detail=f"bad candidate for {problem.id!r}: {e}",
                                   tests=[TestResult(name=n, error="not run: bad candidate")
                                          for n in _names(problem)])
        return self.executor.run(problem, asm.code, limits, syntax_ok=asm.syntax_ok,
                                 format_ok=asm.format_ok, assembly_detail=asm.detail)


def _names(problem) -> list[str]:
    if problem.kind == "stdio":
        return [f"case {i + 1}" for i in range(len(problem.test_cases))]
    return [f"test {i + 1}" for i in range(len(problem.tests))]


def run_batch(problems, candidates: Sequence[Candidate], workers: int | None = None,
              backend: str = "process", mode: str = "warm", **kw) -> list[ExecutionResult]:
    """One-shot: start a Runner, run the batch, shut everything down."""
    with Runner(backend=backend, workers=workers, mode=mode, **kw) as runner:
        return runner.run_batch(problems, candidates)


def summarize(results: Sequence[ExecutionResult], wall_s: float, isolation: str) -> dict:
    n = len(results)
    return {"candidates": n, "passed": sum(r.passed for r in results), "wall_s": round(wall_s, 4),
            "executions_per_s": round(n / wall_s, 2) if wall_s > 0 else None, "isolation": isolation}

