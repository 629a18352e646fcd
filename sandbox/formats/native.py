"""The native format: one `Problem.to_dict()` object per line (docs/design.md "Problems (sandbox/)")."""

from __future__ import annotations

from sandbox.problems import Problem


def convert(obj: dict) -> Problem:
    return Problem.from_dict(obj)
