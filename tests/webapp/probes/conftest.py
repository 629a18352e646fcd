"""Difficulty probes are jobs on problem sets: the problem-set tests' samples and ``make_set``, and
``stub_dirs``."""
import pytest

from tests.factories import install_model_stub
from tests.webapp.problems.conftest import make_set  # noqa: F401  (a fixture, found by name)


@pytest.fixture
def stub_dirs(settings, tmp_path):
    """Models, runs and the sets' data dirs under tmp; models/tiny a stub nothing loads."""
    settings.MODELS_DIR = tmp_path / "models"
    settings.RUNS_DIR = tmp_path / "runs"
    settings.PROBLEM_SETS_DIR = tmp_path / "problem-sets"
    install_model_stub(settings.MODELS_DIR / "tiny")
    return tmp_path
