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
from typing import Callable, Mapping, Protocol, Sequence

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

    def to_dict(self) -> dict:
        """The JSON line form (`{"problem_id": ..., "code"|"completion"|"reply": ...}`)."""
        return {"problem_id": self.problem_id, **{k: v for k, v in (
            ("code", self.code), ("completion", self.completion), ("reply", self.reply)) if v is not None}}

    @classmethod
    def from_dict(cls, obj, problem_ids) -> "Candidate":
        """A candidate from its JSON line form; ValueError (saying what is wrong) for anything else,
        including a `problem_id` not in `problem_ids`."""
        if not isinstance(obj, dict):
            raise ValueError("expected an object")
        pid = obj.get("problem_id")
        if not isinstance(pid, (str, int)) or isinstance(pid, bool) or str(pid) not in problem_ids:
            raise ValueError(f"problem_id {str(pid)[:80]!r} is not in the problems")
        given = [k for k in ("code", "completion", "reply") if obj.get(k) is not None]
        if len(given) != 1:
            raise ValueError(f"needs exactly one of the fields code, completion, reply "
                             f"(got {', '.join(given) or 'none'})")
        if not isinstance(obj[given[0]], str):
            raise ValueError(f"{given[0]}: must be a string, got {type(obj[given[0]]).__name__}")
        return cls(problem_id=str(pid), **{given[0]: obj[given[0]]})


class BatchRunner(Protocol):
    """What executes batches of candidates: the local pool (`Runner`) and the service replicas
    (`remote.RemoteRunner`), both made by `remote.make_runner`. Training depends on this seam only."""

    def submit_batch(self, problems, candidates: Sequence[Candidate]) -> Future:
        """Start a batch and return at once; the Future holds the results in the order of `candidates`.
        `problems`: a mapping id -> problem, or a sequence of problems."""
        ...

    def run_batch(self, problems, candidates: Sequence[Candidate]) -> list[ExecutionResult]:
        """`submit_batch(...).result()`."""
        ...

    def close(self) -> None:
        ...


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
            _check_overrides(timeout_s, memory_mb)
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
        return self._execute(problem, cand, self.timeout_s, self.memory_mb)

    def run_batch(self, problems, candidates: Sequence[Candidate]) -> list[ExecutionResult]:
        """Results in the same order as `candidates`."""
        return self.submit_batch(problems, candidates).result()

    def start(self) -> None:
        """Start the worker slots (and warm workers) now rather than at the first batch."""
        self._ensure_threads()

    def submit_batch(self, problems, candidates: Sequence[Candidate], *,
                     timeout_s: float | None = None, memory_mb: int | None = None,
                     on_result: Callable[[int, ExecutionResult], None] | None = None,
                     cancel: threading.Event | None = None) -> Future:
        """Start a batch and return at once; the Future holds the list of results.

        `timeout_s` / `memory_mb` override the Runner's own overrides for this batch only;
        `on_result(i, result)` is called as each candidate finishes (on a slot thread); once
        `cancel` is set, candidates not yet started end as `killed` without running."""
        if self._closed:
            raise RuntimeError("Runner is closed")
        if timeout_s is not None or memory_mb is not None:
            _check_overrides(timeout_s, memory_mb)
        overrides = (self.timeout_s if timeout_s is None else timeout_s,
                     self.memory_mb if memory_mb is None else memory_mb)
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
            if on_result is not None:
                on_result(i, res)
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
            self._jobs.put((problem, cand, i, done, overrides, cancel))
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
            problem, cand, i, done, overrides, cancel = job
            if cancel is not None and cancel.is_set():
                done(i, ExecutionResult(status=Outcome.KILLED, detail="not run: the batch was cancelled",
                                        tests=[TestResult(name=n, error="not run: cancelled")
                                               for n in _names(problem)]))
                continue
            try:
                res = self._execute(problem, cand, *overrides)
            except Exception as e:  # a broken sandbox: report it on this candidate, keep going
                res = ExecutionResult(status=Outcome.KILLED, detail=f"sandbox failure: {type(e).__name__}: {e}",
                                      tests=[TestResult(name=n, error="not run: sandbox failure")
                                             for n in _names(problem)])
            done(i, res)

    def _execute(self, problem, cand: Candidate, timeout_s: float | None = None,
                 memory_mb: int | None = None) -> ExecutionResult:
        from .candidate import assemble
        limits = Limits.for_problem(problem, timeout_s=timeout_s, memory_mb=memory_mb)
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


def _check_overrides(timeout_s: float | None, memory_mb: int | None) -> None:
    """Raise ValueError for bad limit overrides here, once, rather than as a "sandbox failure"
    result on every candidate."""
    Limits(time_limit_s=2.0 if timeout_s is None else timeout_s,
           memory_mb=256 if memory_mb is None else memory_mb)


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

