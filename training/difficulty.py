"""Difficulty probe output and the launch-time filter (docs/design.md "Training CLI: tiny-model
architectures and the difficulty probe").

``python -m training probe`` writes one JSON line per problem, then a summary line::

    {"problem_id": "two-sum", "samples": 8, "passed": 3, "solve_rate": 0.375, "pass_rate": 0.375}
    ...
    {"summary": {"problems": 194, "unsolved": 61, "solved": 12, "mean_solve_rate": 0.21, "mean_pass_rate": 0.21, ...}}

``solve_rate`` is the share of the problem's samples that passed every test (the quantity a run's
``problem`` events call ``solve_rate`` too); ``pass_rate`` and ``mean_pass_rate`` are its names from before
the rename, still written for the readers that use them, and a file that has only them still reads.

A problem is *unsolved* when none of its samples passed (solve rate 0) and *solved* when every one
did (solve rate 1). GRPO learns nothing from either: every candidate of its group gets the same
reward, so every advantage is zero. A run's ``difficulty`` config drops them from the train split
before the first step (held-out problems are never touched: they measure the run).

This module is plain Python (no torch): config validation, the CLI and the web app read probe files
through it. Sampling the probe is ``training/probe.py``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

RESULT_KEYS = ("problem_id", "samples", "passed", "solve_rate")
SUMMARY_KEYS = ("problems", "unsolved", "solved", "mean_solve_rate")
OLD_NAMES = {"solve_rate": "pass_rate", "mean_solve_rate": "mean_pass_rate"}
"""The names before the rename: written beside the new ones, and read when a file has only them."""


class ProbeFileError(ValueError):
    """A file that is not a complete probe output; the message names the file, the line and the field."""


class DifficultyError(ValueError):
    """The difficulty filter cannot be applied; ``field`` is the config field to fix."""

    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(f"{field}: {message}")


@dataclass(frozen=True)
class ProblemDifficulty:
    """One problem's probe result: ``passed`` of ``samples`` candidates passed every test."""

    problem_id: str
    samples: int
    passed: int

    @property
    def solve_rate(self) -> float:
        return self.passed / self.samples

    @property
    def unsolved(self) -> bool:
        return self.passed == 0

    @property
    def solved(self) -> bool:
        return self.passed == self.samples

    def to_dict(self) -> dict:
        return {"problem_id": self.problem_id, "samples": self.samples, "passed": self.passed,
                "solve_rate": self.solve_rate, "pass_rate": self.solve_rate}


@dataclass(frozen=True)
class ProbeReport:
    """A whole probe output: its results in file order and its summary line."""

    results: tuple[ProblemDifficulty, ...]
    summary: dict

    def by_id(self) -> dict[str, ProblemDifficulty]:
        return {r.problem_id: r for r in self.results}


def summarize(results: Sequence[ProblemDifficulty], **extra: Any) -> dict:
    """The summary line's object: counts of problems, unsolved (solve rate 0) and solved (1), and the
    mean solve rate over problems; ``extra`` (model, samples, split) is appended."""
    n = len(results)
    mean = sum(r.solve_rate for r in results) / n if n else 0.0
    return {"problems": n, "unsolved": sum(r.unsolved for r in results),
            "solved": sum(r.solved for r in results), "mean_solve_rate": mean, "mean_pass_rate": mean, **extra}


def read_probe(path: str | Path) -> ProbeReport:
    """Parse a ``python -m training probe`` output; ProbeFileError names what is wrong and where."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ProbeFileError(f"probe file not found: {path}") from None
    except IsADirectoryError:
        raise ProbeFileError(f"{path} is a directory, not a probe output file") from None
    except UnicodeDecodeError:
        raise ProbeFileError(f"{path} is not a text file (expected the JSON lines of `python -m training probe`)") \
            from None
    except OSError as e:
        raise ProbeFileError(f"cannot read {path}: {e.strerror or e}") from None
    return parse_probe(text.splitlines(), str(path))


def parse_probe(lines: Iterable[str], name: str = "probe") -> ProbeReport:
    """Parse probe output lines (see ``read_probe``); the summary must be the last non-blank line."""
    results: list[ProblemDifficulty] = []
    seen: dict[str, int] = {}
    summary: dict | None = None
    for number, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        where = f"{name} line {number}"
        if summary is not None:
            raise ProbeFileError(f"{where}: a line after the summary line (the summary must come last)")
        try:
            obj = json.loads(raw)
        except ValueError as e:
            raise ProbeFileError(f"{where}: not JSON ({e.msg}); expected the output of `python -m training probe`") \
                from None
        if not isinstance(obj, dict):
            raise ProbeFileError(f"{where}: expected a JSON object, got {type(obj).__name__}")
        if "summary" in obj:
            summary = _summary(obj["summary"], where)
            continue
        result = _result(obj, where)
        if result.problem_id in seen:
            raise ProbeFileError(f"{where}: problem_id {result.problem_id!r} again (first on line "
                                 f"{seen[result.problem_id]})")
        seen[result.problem_id] = number
        results.append(result)
    if summary is None:
        raise ProbeFileError(f"{name}: no summary line; not a complete probe output (was the probe interrupted?)")
    if summary["problems"] != len(results):
        raise ProbeFileError(f"{name}: the summary counts {summary['problems']} problems but the file has "
                             f"{len(results)} (a truncated or edited file?)")
    return ProbeReport(tuple(results), summary)


def with_new_names(obj: dict) -> dict:
    """``obj`` (a probe line or summary) with each renamed field under its new name too (from its old one when
    it has only that: a file or a stored probe from before the rename)."""
    return {**{new: obj[old] for new, old in OLD_NAMES.items() if new not in obj and old in obj}, **obj}


def _result(written: dict, where: str) -> ProblemDifficulty:
    obj = with_new_names(written)
    missing = [k for k in RESULT_KEYS if k not in obj]
    if missing:
        raise ProbeFileError(f"{where}: missing field {missing[0]} (a probe line has {', '.join(RESULT_KEYS)})")
    pid, samples, passed, rate = (obj[k] for k in RESULT_KEYS)
    if not isinstance(pid, str) or not pid:
        raise ProbeFileError(f"{where}: field problem_id must be a non-empty string, got {pid!r}")
    if not _int(samples) or samples < 1:
        raise ProbeFileError(f"{where}: field samples must be an integer >= 1, got {samples!r}")
    if not _int(passed) or not 0 <= passed <= samples:
        raise ProbeFileError(f"{where}: field passed must be an integer from 0 to samples ({samples}), got {passed!r}")
    for key in ("solve_rate", "pass_rate"):  # each name the line has (both, in files written since the rename)
        if key not in written:
            continue
        rate = written[key]
        if not _number(rate) or not math.isclose(rate, passed / samples, abs_tol=1e-6):
            raise ProbeFileError(f"{where}: field {key} must be passed / samples ({passed / samples:g}), got {rate!r}")
    return ProblemDifficulty(pid, samples, passed)


def _summary(obj: Any, where: str) -> dict:
    if not isinstance(obj, dict):
        raise ProbeFileError(f"{where}: field summary must be an object, got {obj!r}")
    obj = with_new_names(obj)
    for key in SUMMARY_KEYS:
        if key not in obj:
            raise ProbeFileError(f"{where}: summary has no field {key}")
        value = obj[key]
        rate = key == "mean_solve_rate"
        if not (_number(value) if rate else _int(value) and value >= 0):
            raise ProbeFileError(f"{where}: summary field {key} must be a {'number' if rate else 'count'}, got {value!r}")
    return dict(obj)


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


# --------------------------------------------------------------------------------------------------
# The launch-time filter
# --------------------------------------------------------------------------------------------------


def drop_by_difficulty(problems: Sequence[Any], report: ProbeReport, *, drop_unsolved: bool,
                       drop_solved: bool) -> tuple[list[Any], dict[str, int]]:
    """The train ``problems`` (anything with ``.id``) without those the rules drop, in their order, and
    ``{"unsolved": N, "solved": M}``: how many each rule dropped. A problem the probe did not measure
    is kept."""
    rates = report.by_id()
    kept: list[Any] = []
    dropped = {"unsolved": 0, "solved": 0}
    for p in problems:
        r = rates.get(p.id)
        if r is not None and drop_unsolved and r.unsolved:
            dropped["unsolved"] += 1
        elif r is not None and drop_solved and r.solved:
            dropped["solved"] += 1
        else:
            kept.append(p)
    return kept, dropped


def filter_train_problems(problems: Sequence[Any], difficulty: Any,
                          source: str = "the problem file") -> tuple[list[Any], dict[str, int] | None]:
    """Apply a run's ``difficulty`` config (``DifficultyConfig``) to its train problems.

    Returns ``(kept, dropped)``; ``dropped`` is None when no rule is on (nothing to report). Raises
    DifficultyError naming the field when the probe file is bad, when it measured none of the train
    problems (a probe of another file), or when the rules leave no train problem.
    """
    if not (difficulty.drop_unsolved or difficulty.drop_solved):
        return list(problems), None
    if difficulty.probe is None:
        raise DifficultyError("difficulty.probe", "drop_unsolved / drop_solved need a probe: the path of a "
                                                  "`python -m training probe` output")
    try:
        report = read_probe(difficulty.probe)
    except ProbeFileError as e:
        raise DifficultyError("difficulty.probe", str(e)) from None
    ids = report.by_id()
    if problems and not any(p.id in ids for p in problems):
        raise DifficultyError("difficulty.probe", f"{difficulty.probe} measured none of the {len(problems)} train "
                                                  f"problems of {source} (a probe of another problem file?)")
    kept, dropped = drop_by_difficulty(problems, report, drop_unsolved=difficulty.drop_unsolved,
                                       drop_solved=difficulty.drop_solved)
    if problems and not kept:
        rules = " and ".join(f"{n} {rule}" for rule, n in dropped.items() if n)
        raise DifficultyError("difficulty", f"dropping {rules} train problems leaves none to train on; turn off "
                                            "drop_unsolved or drop_solved, or probe with more samples")
    return kept, dropped
