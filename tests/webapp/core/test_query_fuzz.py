"""No page or API endpoint answers 500 to odd query parameters (issue 13, finding 6)."""
import itertools

import pytest

from tests.factories import TINY_OVERRIDES, install_model_stub, make_problem_set

ODD_VALUES = ["9" * 25, "9" * 19, "-1", "0", "²", "１２", "1e9", "0x10", " ", "", ",", "1,,2", "1,-2",
              "NaN", "\x00", "%00", "a" * 3000, "<script>", "1;2", "[]", "{}", "true"]
PARAMS = ["ids", "step", "status", "page", "q", "split", "verdict", "preset", "problem_set", "flag", "since"]


@pytest.fixture
def client(user):
    """Collects 500s instead of raising the view's exception, so one test lists them all."""
    from django.test import Client

    return Client(raise_request_exception=False)


@pytest.fixture
def pages(client, user, settings, tmp_path):
    from webapp.runs.services import create_run

    settings.RUNS_DIR, settings.MODELS_DIR = tmp_path / "runs", tmp_path / "models"
    for name in ("tiny", "tiny-qwen3_5"):  # the presets' models: the run names models/tiny, nothing loads it
        install_model_stub(settings.MODELS_DIR / name)
    client.force_login(user)
    problem_set = make_problem_set(user)
    run = create_run(user, "fuzzed", problem_set, TINY_OVERRIDES)
    problem = problem_set.problems.first()
    return [
        "/", "/runs/", "/runs/new", "/runs/compare", f"/runs/{run.pk}/",
        f"/runs/{run.pk}/problems/{problem.problem_id}/candidates",
        "/problem-sets/", f"/problem-sets/{problem_set.pk}/", f"/problem-sets/{problem_set.pk}/problems/{problem.pk}/",
        f"/problem-sets/{problem_set.pk}/export.jsonl", "/tokens/",
        "/api/runs", f"/api/runs/{run.pk}", f"/api/runs/{run.pk}/metrics", f"/api/runs/{run.pk}/problems",
        f"/api/runs/{run.pk}/problems/{problem.problem_id}/candidates", f"/api/runs/{run.pk}/checkpoints",
        "/api/problem-sets", f"/api/problem-sets/{problem_set.pk}", "/api/presets", "/healthz",
    ]


@pytest.mark.django_db
def test_no_page_answers_500_to_odd_query_parameters(client, pages):
    # Every parameter at once carries the same odd value (each page parses all it reads, so a 500 from
    # any of them shows), then one odd value per parameter in turn across the values' kinds.
    failures = []
    queries = [{name: value for name in PARAMS} for value in ODD_VALUES]
    queries += [{name: ODD_VALUES[i % len(ODD_VALUES)]} for i, name in enumerate(PARAMS)]
    for path, query in itertools.product(pages, queries):
        response = client.get(path, query)
        if response.status_code == 500:  # /healthz answers 503 here: no worker runs in this test
            failures.append((path, {k: v[:30] for k, v in query.items()}, response.status_code))
    assert not failures, failures[:20]


@pytest.mark.django_db
def test_comparing_a_run_number_too_large_for_the_database_is_refused_not_a_500(client, user):
    client.force_login(user)
    response = client.get("/runs/compare", {"ids": "1" * 25})
    assert response.status_code in (302, 404)


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/runs/{}/", "/problem-sets/{}/", "/api/runs/{}", "/api/problem-sets/{}"])
def test_an_object_number_too_large_for_the_database_is_a_404(client, user, path):
    client.force_login(user)
    assert client.get(path.format("9" * 25)).status_code == 404
