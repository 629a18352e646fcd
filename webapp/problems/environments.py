"""The per-user limit on distinct problem environments, checked when a set's problems are stored."""
from __future__ import annotations

from sandbox.environments import EnvironmentSettings, past_user_limit
from sandbox.problems import Environment, ProblemError

from .models import Problem


def user_environments(owner, exclude_set_id: int | None = None) -> set[tuple[str, ...]]:
    """The normalized requirement lists the owner's stored problems name."""
    rows = Problem.objects.filter(problem_set__owner=owner)
    if exclude_set_id is not None:
        rows = rows.exclude(problem_set_id=exclude_set_id)
    found = set()
    for env in rows.values_list("data__environment", flat=True).distinct():
        if not env:
            continue
        try:
            found.add(Environment.from_dict(env).requirements())
        except ProblemError:
            continue  # stored before today's rules: it counts for nothing, it is refused at its next build
    return found


def environment_quota_errors(owner, problems, exclude_set_id: int | None = None) -> list[dict]:
    """Upload errors (`{line, field, message}`, line 0: the file as a whole) for the problems whose
    environment would take `owner` past CRUCIBLE_ENV_MAX_PER_USER distinct environments."""
    limit = EnvironmentSettings.from_environ().max_per_user
    return [{"line": 0, "field": "environment", "message": message}
            for _, message in past_user_limit(user_environments(owner, exclude_set_id), problems, limit)]
