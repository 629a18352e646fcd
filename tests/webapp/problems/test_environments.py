"""An uploaded problem set that brings its own packages validates in its environment, and one that
forgot them fails validation naming the problem and the module."""
import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from webapp.problems.services import validate_problem_set

EXAMPLE = Path(__file__).resolve().parents[3] / "data" / "examples" / "numpy-problems.jsonl"


@pytest.fixture
def env_cache(monkeypatch):
    path = tempfile.mkdtemp(prefix="crucible-envs-test-")  # readable by the sandbox user
    os.chmod(path, 0o755)
    monkeypatch.setenv("CRUCIBLE_ENV_DIR", path)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def lines(with_environment: bool) -> list[dict]:
    objects = [json.loads(line) for line in EXAMPLE.read_text().splitlines()]
    return objects if with_environment else [o for o in objects if set(o) != {"environment"}]


@pytest.mark.django_db
def test_a_numpy_set_validates_in_its_environment(make_set, env_cache):
    ps = validate_problem_set(make_set(*lines(with_environment=True)).pk)
    assert (ps.validation_passed, ps.validation_failed) == (3, 0)
    assert all(p.data["environment"] == {"python_packages": ["numpy==2.*"]} for p in ps.problems.all())


@pytest.mark.django_db
def test_a_numpy_set_without_its_environment_fails_naming_problem_and_module(make_set, env_cache):
    ps = validate_problem_set(make_set(*lines(with_environment=False)).pk)
    assert (ps.validation_passed, ps.validation_failed) == (0, 3)
    for p in ps.problems.select_related("validation"):
        assert f"problem '{p.problem_id}' needs module 'numpy'" in p.validation.detail, p.validation.detail
