"""The bounded form of a run event that the web app stores in its event log and streams (issue 23).

The trainer's ``problem`` and ``eval`` events carry every candidate whole: its code, per-test
results and captured streams (up to 1 MiB each). The web app stores those once, as ``Candidate`` rows,
and the candidates API serves them on demand. Its event log and websocket carry what a page draws from
an event: ids, rewards, outcomes and counts. So a stored event's size no longer grows with what a
model writes, only with the candidates a step samples (a bounded config value), and a replay of a
long run is many small events rather than megabytes each.

A summarized ``problem`` event keeps every field but ``candidates``, whose entries keep ``index``,
``reward``, ``rewards``, ``truncated``, ``overlong_penalty``, ``penalized_flags``, ``reward_normalized``
(``reward.normalize: per_component``) and a ``result`` of
``status``, ``tests_passed``, ``tests_total`` and ``flags`` (the same names as the trainer's, so a
reader of ``candidates[i].result.status`` needs no change); ``summarized: true`` marks it. An
``eval`` event's ``per_problem`` entries lose their ``candidates`` (stored as phase ``eval`` rows).
Summarizing is idempotent, and every other event is left as it is.

The trainer's own events.jsonl stays whole: it is the run's complete record on disk (and what a
lost worker's follower re-reads by byte offset), and ``python -m training`` knows nothing of the web.
"""
from __future__ import annotations

from typing import Any

CANDIDATE_KEYS = ("index", "reward", "rewards", "truncated", "overlong_penalty", "penalized_flags", "reward_normalized")
RESULT_KEYS = ("status", "tests_passed", "tests_total", "flags")


def summarize(event: dict) -> dict:
    """``event`` as the web app stores and streams it (a new dict when anything was left out)."""
    kind = event.get("event")
    if kind == "problem" and isinstance(event.get("candidates"), list) and not event.get("summarized"):
        candidates = [summarize_candidate(c, i) for i, c in enumerate(event["candidates"])]
        return {**event, "candidates": candidates, "summarized": True}
    if kind == "eval" and isinstance(event.get("per_problem"), dict):
        per_problem = event["per_problem"]
        if any(isinstance(v, dict) and "candidates" in v for v in per_problem.values()):
            return {**event, "per_problem": {pid: _without_candidates(v) for pid, v in per_problem.items()}}
    return event


def summarize_candidate(candidate: Any, index: int) -> dict:
    """What a page shows of one candidate without opening it: its reward and outcome."""
    if not isinstance(candidate, dict):
        return {"index": index}
    out = {k: candidate[k] for k in CANDIDATE_KEYS if k in candidate}
    out.setdefault("index", index)
    result = candidate.get("result")
    if isinstance(result, dict):
        out["result"] = {k: result[k] for k in RESULT_KEYS if k in result}
    return out


def _without_candidates(entry: Any) -> Any:
    if isinstance(entry, dict) and "candidates" in entry:
        return {k: v for k, v in entry.items() if k != "candidates"}
    return entry
