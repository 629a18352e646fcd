"""A multi-turn candidate as the inspector shows it: each turn's code, what the model was told after
it, and what the next turn changed (a line diff), one turn under the other."""
from __future__ import annotations

import difflib

from webapp.core.highlight import highlight_python

from . import integrity
from .queries import OUTCOME_LABELS


def turn_views(turns: list) -> list[dict]:
    """``[{n, code_html, feedback, reward, status, outcome, tests_passed, tests_total, badges, diff}]``;
    ``diff`` is ``[(kind, line)]`` (``add``, ``del``, ``hunk`` or ``same``) from the previous turn's code,
    None for the first turn. [] for a one-turn candidate."""
    if not isinstance(turns, list) or len(turns) < 2:
        return []
    out, previous = [], None
    for n, turn in enumerate(t for t in turns if isinstance(t, dict)):
        code = str(turn.get("code") or "")
        result = turn.get("result") if isinstance(turn.get("result"), dict) else {}
        status = str(result.get("status") or "")
        reward = turn.get("reward")
        out.append({
            "n": n + 1, "code_html": highlight_python(code), "feedback": turn.get("feedback") or "",
            "reward": reward if isinstance(reward, (int, float)) and not isinstance(reward, bool) else None,
            "status": status, "outcome": OUTCOME_LABELS.get(status, status or "unknown"),
            "tests_passed": result.get("tests_passed") or 0, "tests_total": result.get("tests_total") or 0,
            "badges": integrity.badges(integrity.names_of(turn.get("flags") or result.get("flags"))),
            "diff": None if previous is None else code_diff(previous, code),
        })
        previous = code
    return out


def code_diff(before: str, after: str) -> list[tuple[str, str]]:
    """The unified diff of two programs as ``(kind, line)`` pairs; [] when they are the same."""
    lines = difflib.unified_diff(before.splitlines(), after.splitlines(), "turn before", "this turn", lineterm="", n=2)
    out = []
    for line in lines:
        if line.startswith(("---", "+++")):
            continue
        kind = "hunk" if line.startswith("@@") else "add" if line.startswith("+") else \
            "del" if line.startswith("-") else "same"
        out.append((kind, line))
    return out
