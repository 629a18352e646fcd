"""Difficulty probes are jobs on problem sets: the problem-set tests' samples and ``make_set``."""
from tests.webapp.problems.conftest import make_set  # noqa: F401  (a fixture, found by name)
