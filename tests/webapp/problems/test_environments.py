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


def with_environment(problem_id: str, *packages: str) -> dict:
    return {"id": problem_id, "kind": "function", "entry_point": "f", "tests": ["assert f() == 1"],
            "reference_solution": "def f():\n    return 1\n", "environment": {"python_packages": list(packages)}}


@pytest.mark.django_db
@pytest.mark.parametrize("spec", ["probe-1.0-py3-none-any.whl", "probe-1.0.tar.gz"])
def test_an_upload_naming_a_file_as_a_package_is_refused_naming_problem_field_and_value(client_alice, spec):
    from tests.factories import jsonl
    from webapp.problems.models import ProblemSet

    from .conftest import upload_file

    response = client_alice.post("/api/problem-sets", {"file": upload_file(jsonl(with_environment("p1", spec)))})
    assert response.status_code == 400, response.content
    error = response.json()["errors"][0]
    assert error["line"] == 1 and error["field"] == "environment.python_packages[0]"
    assert "problem 'p1'" in error["message"] and spec in error["message"]
    assert not ProblemSet.objects.exists()


@pytest.mark.django_db
def test_a_set_past_the_users_limit_of_environments_is_refused_and_nothing_stored_is_lost(
        client_alice, user, make_set, monkeypatch):
    from tests.factories import jsonl
    from webapp.problems.models import Problem, ProblemSet

    from .conftest import upload_file

    monkeypatch.setenv("CRUCIBLE_ENV_MAX_PER_USER", "2")
    first = make_set(with_environment("a", "numpy>=1"), name="first")
    second = make_set(with_environment("b", "six"), with_environment("c", "Six"), name="second")
    # the same two environments spelled otherwise: still two
    again = make_set(with_environment("d", "NumPy>=1.0"), name="again")
    response = client_alice.post("/api/problem-sets", {"name": "third", "file": upload_file(
        jsonl(with_environment("e", "six"), with_environment("f", "pandas==2.*")))})
    assert response.status_code == 400, response.content
    message = response.json()["errors"][-1]["message"]
    assert "problem 'f'" in message and "[pandas==2.*]" in message and "at most 2" in message
    assert "CRUCIBLE_ENV_MAX_PER_USER" in message
    assert set(ProblemSet.objects.values_list("pk", flat=True)) == {first.pk, second.pk, again.pk}
    assert Problem.objects.count() == 4
