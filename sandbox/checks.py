"""Problem-set validation: every reference solution must pass and an empty program must fail."""

from __future__ import annotations

from typing import Sequence

from .runner import Candidate, Runner


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


def check_problems(problems: Sequence, *, backend: str = "process", workers: int | None = None,
                   mode: str = "warm", timeout_s: float | None = None, runner=None) -> list[dict]:
    """One row per problem, in order: {problem_id, reference_passed, empty_failed, detail}. Each
    reference runs in its problem's environment; `runner` (e.g. a RemoteRunner) replaces the local pool."""
    # Keyed by position so a set with a repeated id still checks each problem on its own.
    pmap = {f"{k}:{p.id}": p for k, p in enumerate(problems)}
    cands, index = [], []
    for key, p in pmap.items():
        if p.reference_solution is not None:
            index.append((key, "reference"))
            cands.append(Candidate(problem_id=key, code=p.reference_solution))
        index.append((key, "empty"))
        cands.append(Candidate(problem_id=key, code=""))
    if runner is not None:
        results = runner.run_batch(pmap, cands)
    else:
        with Runner(backend=backend, workers=workers, mode=mode, timeout_s=timeout_s) as local:
            results = local.run_batch(pmap, cands)
    rows = {key: {"problem_id": p.id, "reference_passed": False, "empty_failed": False,
                  "detail": "" if p.reference_solution is not None else "no reference_solution"}
            for key, p in pmap.items()}
    for (key, what), res in zip(index, results):
        row = rows[key]
        if what == "reference":
            row["reference_passed"] = res.passed
            if not res.passed:
                failing = next((t for t in res.tests if not t.passed), None)
                why = f"{failing.name}: {failing.error}" if failing else res.detail
                row["detail"] = missing_module_note(pmap[key], res) or \
                    f"reference solution {res.status.value}: {why}"[:500]
        else:
            row["empty_failed"] = not res.passed
            if res.passed:
                row["detail"] = "; ".join(filter(None, [row["detail"],
                                                        "an empty program passes every test"]))
    return list(rows.values())
