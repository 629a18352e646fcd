"""The inspector's groups of failing candidates: by identical code and by first error, with counts (42
nearly identical failures read one by one hid that they were two mistakes)."""
from __future__ import annotations

ERROR_CHARS = 160
"""A first error's label is cut to this many characters (a traceback's last line is what tells them apart)."""


def code_key(code: str) -> str:
    """Code as compared: trailing spaces and blank lines at either end do not make two candidates differ."""
    return "\n".join(line.rstrip() for line in (code or "").strip().splitlines())


def first_error(candidate: dict) -> str:
    """What went wrong first: the first failing test's error, else stderr's last line, else the outcome."""
    result = candidate.get("result") or {}
    for test in result.get("tests") or ():
        if not test.get("passed") and (test.get("error") or "").strip():
            return test["error"].strip().splitlines()[-1][:ERROR_CHARS]
    stderr = [line for line in (result.get("stderr") or "").splitlines() if line.strip()]
    if stderr:
        return stderr[-1].strip()[:ERROR_CHARS]
    return candidate.get("outcome") or result.get("status") or "unknown"


def _groups(failing: list[dict], key, label) -> list[dict]:
    by: dict[str, list[dict]] = {}
    for c in failing:
        by.setdefault(key(c), []).append(c)
    ordered = sorted(by.values(), key=lambda members: (-len(members), -members[0]["step"], members[0]["index"]))
    return [{"id": n, "count": len(members), "label": label(members[0]),
             "newest": {"step": members[0]["step"], "index": members[0]["index"]},
             "members": {(c["step"], c["index"]) for c in members}} for n, members in enumerate(ordered)]


CODE_CHARS = 120
"""A code group's label: its lines joined with ⏎, cut to this many characters."""


def code_label(candidate: dict) -> str:
    """The code on one line, so that two groups' labels show where they differ (often the last line)."""
    lines = [line.strip() for line in code_key(candidate["code"]).splitlines() if line.strip()]
    text = " ⏎ ".join(lines) or "(empty)"
    return text if len(text) <= CODE_CHARS else text[:CODE_CHARS - 1] + f"… ({len(lines)} lines)"


def group_failures(candidates: list[dict]) -> dict:
    """``candidates`` (newest first, as queries.candidates lists them) → their failing ones grouped:
    ``{"failing": n, "by_code": [...], "by_error": [...]}``, each group ``{id, count, label, newest:
    {step, index}, members: {(step, index)}}``, the largest first (then the newest)."""
    failing = [c for c in candidates if not c.get("passed")]
    return {"failing": len(failing),
            "by_code": _groups(failing, lambda c: code_key(c["code"]), code_label),
            "by_error": _groups(failing, first_error, first_error)}


def member_of(groups: dict, candidate: dict) -> tuple[int | None, int | None]:
    """The (code group, error group) ids of one candidate; None for a passing one."""
    at = (candidate["step"], candidate["index"])
    code = next((g["id"] for g in groups["by_code"] if at in g["members"]), None)
    error = next((g["id"] for g in groups["by_error"] if at in g["members"]), None)
    return code, error
