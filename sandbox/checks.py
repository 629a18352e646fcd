"""Problem-set validation: every reference solution must pass and an empty program must fail.

One check for every caller: `python -m sandbox check` prints `check_problems`' rows, and the web app
stores `run_checks`' `ProblemCheck`s (with their execution results) as a set's validation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from .result import ExecutionResult
from .runner import BatchRunner, Candidate, Runner

EMPTY_SOLUTION = ""
"""The "empty solution": a program that defines nothing, so tests that pass on it check nothing."""


@dataclass
class ProblemCheck:
    """The verdicts on one problem: its reference must pass and an empty solution must fail."""

    problem_id: str
    reference: ExecutionResult | None
    """The reference solution's execution (None: the problem has no `reference_solution`)."""
    empty: ExecutionResult
    """The empty solution's execution."""
    detail: str
    """Why the problem fails the check, or what its passing looked like (`ok: ...`)."""

    @property
    def reference_passed(self) -> bool:
        return self.reference is not None and self.reference.passed

    @property
    def empty_failed(self) -> bool:
        return not self.empty.passed

    @property
    def ok(self) -> bool:
        return self.reference_passed and self.empty_failed

    def row(self) -> dict:
        """`{problem_id, reference_passed, empty_failed, detail}`: a line of `python -m sandbox check`."""
        return {"problem_id": self.problem_id, "reference_passed": self.reference_passed,
                "empty_failed": self.empty_failed, "detail": self.detail}


def missing_module_note(problem, result) -> str | None:
    """Why a reference solution failed when it is a module its environment lacks, else None:
    `problem 'p' needs module 'numpy', which its environment (...) does not have; ...`."""
    from .environments import missing_module
    texts = [result.stderr, result.detail, *(t.error or "" for t in result.tests)]
    module = missing_module(texts)
    if module is None:
        return None
    env = getattr(problem, "environment", None)
    has = f"its environment ({env.describe()})" if env is not None else "the standard library (it names no environment)"
    return (f"problem {problem.id!r} needs module {module!r}, which {has} does not have: add the package that "
            f"provides it to environment.python_packages of the problem or its set")


def run_checks(problems: Sequence, runner: BatchRunner) -> list[ProblemCheck]:
    """One `ProblemCheck` per problem, in order, from one batch on `runner`. Each reference runs in its
    problem's environment."""
    # Keyed by position so a set with a repeated id still checks each problem on its own.
    pmap = {f"{k}:{p.id}": p for k, p in enumerate(problems)}
    cands, index = [], []
    for key, p in pmap.items():
        if p.reference_solution is not None:
            index.append((key, "reference"))
            cands.append(Candidate(problem_id=key, code=p.reference_solution))
        index.append((key, "empty"))
        cands.append(Candidate(problem_id=key, code=EMPTY_SOLUTION))
    results: dict[str, dict[str, ExecutionResult]] = {key: {} for key in pmap}
    for (key, which), res in zip(index, runner.run_batch(pmap, cands)):
        results[key][which] = res
    return [_verdict(p, results[key].get("reference"), results[key]["empty"]) for key, p in pmap.items()]


def check_problems(problems: Sequence, *, backend: str = "process", workers: int | None = None,
                   mode: str = "warm", timeout_s: float | None = None, runner: BatchRunner | None = None) -> list[dict]:
    """One row per problem, in order: {problem_id, reference_passed, empty_failed, detail}
    (`ProblemCheck.row`). `runner` (e.g. a RemoteRunner) replaces the local pool."""
    if runner is not None:
        return [c.row() for c in run_checks(problems, runner)]
    with Runner(backend=backend, workers=workers, mode=mode, timeout_s=timeout_s) as local:
        return [c.row() for c in run_checks(problems, local)]


def _verdict(problem, reference: ExecutionResult | None, empty: ExecutionResult) -> ProblemCheck:
    notes = []
    if reference is None:
        notes.append("no reference_solution to check")
    elif not reference.passed:
        notes.append(missing_module_note(problem, reference) or f"reference solution: {_describe(reference)}")
    if empty.passed:
        notes.append("an empty solution passes every test: the tests check nothing")
    detail = "; ".join(notes) or (f"ok: reference passed {reference.tests_passed}/{reference.tests_total} "
                                  f"tests, empty solution {empty.status.value}")
    return ProblemCheck(problem_id=problem.id, reference=reference, empty=empty, detail=detail)


def _describe(result: ExecutionResult) -> str:
    text = f"{result.status.value} ({result.tests_passed}/{result.tests_total} tests passed)"
    failing = next((t for t in result.tests if not t.passed), None)
    if failing is not None and failing.error:
        text += f"; {failing.name}: {failing.error[:300]}"
    elif result.detail:
        text += f"; {result.detail[:300]}"
    return text
