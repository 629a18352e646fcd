"""Problem-set validation: every reference solution must pass and an empty program must fail."""

from __future__ import annotations

from typing import Sequence

from .runner import Candidate, Runner


def check_problems(problems: Sequence, *, backend: str = "process", workers: int | None = None,
                   mode: str = "warm", timeout_s: float | None = None) -> list[dict]:
    """One row per problem, in order: {problem_id, reference_passed, empty_failed, detail}."""
    # Keyed by position so a set with a repeated id still checks each problem on its own.
    pmap = {f"{k}:{p.id}": p for k, p in enumerate(problems)}
    cands, index = [], []
    for key, p in pmap.items():
        if p.reference_solution is not None:
            index.append((key, "reference"))
            cands.append(Candidate(problem_id=key, code=p.reference_solution))
        index.append((key, "empty"))
        cands.append(Candidate(problem_id=key, code=""))
    with Runner(backend=backend, workers=workers, mode=mode, timeout_s=timeout_s) as runner:
        results = runner.run_batch(pmap, cands)
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
                row["detail"] = f"reference solution {res.status.value}: {why}"[:500]
        else:
            row["empty_failed"] = not res.passed
            if res.passed:
                row["detail"] = "; ".join(filter(None, [row["detail"],
                                                        "an empty program passes every test"]))
    return list(rows.values())
