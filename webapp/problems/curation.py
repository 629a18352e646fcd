"""What a user changes of a stored set without uploading it again: a seeded held-out share for a set whose
file brought no held-out problems, and problems excluded from runs (kept in the set, marked excluded).

Runs and probes read the set through ``services.write_problems_jsonl``, which leaves excluded problems out;
the export keeps every problem, as uploaded apart from a chosen split and `"excluded": true` on an excluded
one (the native format's field), so uploading the export again keeps the same problems out of runs."""
from __future__ import annotations

import hashlib
from typing import Iterable

from django.db import transaction

from .models import Problem, ProblemSet, assign_splits

MAX_HELDOUT_SHARE = 0.9


class CurationError(ValueError):
    """A change the set cannot take; the message says why and what to do instead."""


def heldout_ids(problem_ids: Iterable[str], share: float, seed: int) -> set[str]:
    """The ``round(share * n)`` problems (at least one when ``share`` > 0, never all) whose seeded hash of
    their id ranks lowest: the same ids, share and seed choose the same problems whatever the rows' order."""
    ids = sorted(set(problem_ids))
    if share <= 0 or len(ids) < 2:
        return set()
    k = min(max(1, round(share * len(ids))), len(ids) - 1)
    rank = sorted(ids, key=lambda pid: hashlib.sha256(f"{seed}\0{pid}".encode()).hexdigest())
    return set(rank[:k])


def check_share(share: float, seed: int) -> None:
    if not 0 <= share <= MAX_HELDOUT_SHARE:
        raise CurationError(f"the held-out share must be between 0 and {MAX_HELDOUT_SHARE} (0: no held-out "
                            f"problems); got {share}")
    if seed < 0:
        raise CurationError(f"the seed must be a whole number >= 0; got {seed}")


def brings_heldout(ps: ProblemSet) -> bool:
    """The set's file has a held-out split of its own (a chosen share never overrides it)."""
    return not ps.split_choosable


def own_split_words(ps: ProblemSet) -> str:
    """``3 problems``, or ``3 problems, 3 of them excluded: include them again to evaluate on them``: the file's
    held-out split, counted with its excluded problems."""
    heldout = ps.problems.filter(split="heldout")
    excluded = heldout.filter(excluded=True).count()
    return f"{heldout.count()} problems" + (f", {excluded} of them excluded: include them again to evaluate on them"
                                            if excluded else "")


def apply_heldout_share(ps: ProblemSet, rows: list[Problem]) -> None:
    """Set the splits of ``rows`` fresh from a file (``split`` and ``data["split"]``; the caller saves them) from
    the set's chosen share. A file that brings held-out problems keeps its splits, and the set forgets the share."""
    if ps.heldout_share is None:
        return
    if any(r.split == "heldout" for r in rows):
        ps.choose_heldout(None)
        return
    assign_splits(rows, heldout_ids((r.problem_id for r in rows), ps.heldout_share, ps.heldout_seed))


def set_heldout_share(ps: ProblemSet, share: float, seed: int = 0) -> ProblemSet:
    """Choose ``share`` of the set's problems as held-out (seeded; 0 puts every problem back in train)."""
    check_share(share, seed)
    with transaction.atomic():
        locked = ProblemSet.objects.select_for_update().get(pk=ps.pk)
        if locked.import_status != ProblemSet.Import.DONE:
            raise CurationError(f"the set's import is {locked.import_status}: choose a held-out share once it is done")
        if brings_heldout(locked):
            raise CurationError(f"the set's file brings its own held-out split ({own_split_words(locked)}); "
                                "change it in the file and upload it again")
        locked.choose_heldout(share, seed)
        locked.resplit(heldout_ids(locked.problems.values_list("problem_id", flat=True), share, seed))
    return locked


def set_excluded(ps: ProblemSet, problem: Problem, excluded: bool) -> ProblemSet:
    """Exclude a problem from the runs launched afterwards (or include it again); it stays in the set."""
    with transaction.atomic():
        locked = ProblemSet.objects.select_for_update().get(pk=ps.pk)
        locked.set_excluded(problem, excluded)
    return locked
