"""A run's difficulty filter: the probe its ``difficulty`` section names (docs/design.md run config,
``difficulty``), checked at launch as the trainer will apply it. The probes themselves are
``webapp.probes``' jobs; a run reads only their stored rows and output files."""
from __future__ import annotations

from training.config import ConfigError
from training.difficulty import ProblemDifficulty, ProbeReport, drop_by_difficulty

from webapp.problems.models import Probe, ProblemSet

from .config import PROBE_REFERENCE


def resolve_run_probe(difficulty: dict, problem_set: ProblemSet) -> Probe | None:
    """The probe a run's ``difficulty`` section names on ``problem_set``: ``probe:<id>`` (a finished
    probe of that set), or, when it names none and a drop rule is on, the set's latest finished probe.
    None when no probe is named and no rule is on. ConfigError naming the field otherwise."""
    reference = difficulty.get("probe")
    rules = difficulty.get("drop_unsolved") or difficulty.get("drop_solved")
    if reference is None:
        if not rules:
            return None
        probe = problem_set.latest_finished_probe()
        if probe is None:
            field = "difficulty.drop_unsolved" if difficulty.get("drop_unsolved") else "difficulty.drop_solved"
            raise ConfigError(field, f"problem set '{problem_set.name}' has no finished difficulty probe to filter "
                                     "by: estimate its difficulty on its page first, or turn the rule off")
        return _on_disk(probe, "difficulty.probe")
    match = PROBE_REFERENCE.fullmatch(reference)
    probe = (Probe.objects.filter(pk=int(match[1]), problem_set=problem_set, status=Probe.Status.DONE).first()
             if match else None)
    if probe is None:
        raise ConfigError("difficulty.probe", f"must be a finished difficulty probe of problem set "
                                              f"'{problem_set.name}' as probe:<id>, or null for its latest")
    return _on_disk(probe, "difficulty.probe")


def _on_disk(probe: Probe, field: str) -> Probe:
    if not probe.output_file.is_file():
        raise ConfigError(field, f"the output of {probe.reference} is no longer on disk; estimate the set's "
                                 "difficulty again")
    return probe


def check_run_filter(probe: Probe, problem_set: ProblemSet, difficulty: dict) -> dict[str, int]:
    """What the run's rules drop from the set's train problems by ``probe`` (``{"unsolved", "solved"}``),
    checked at launch as the trainer will apply it: ConfigError when nothing would be left to train on."""
    class _Problem:
        def __init__(self, problem_id: str):
            self.id = problem_id

    report = ProbeReport(tuple(ProblemDifficulty(r["problem_id"], r["samples"], r["passed"]) for r in probe.results),
                         probe.summary)
    in_use = problem_set.problems.filter(split="train", excluded=False)  # excluded problems are never trained on
    train = [_Problem(pid) for pid in in_use.values_list("problem_id", flat=True)]
    kept, dropped = drop_by_difficulty(train, report, drop_unsolved=bool(difficulty.get("drop_unsolved")),
                                       drop_solved=bool(difficulty.get("drop_solved")))
    if train and not kept:
        rules = " and ".join(f"{n} {rule}" for rule, n in dropped.items() if n)
        raise ConfigError("difficulty", f"dropping {rules} train problems (by {probe.reference}) leaves none to "
                                        "train on; turn off drop_unsolved or drop_solved")
    return dropped
