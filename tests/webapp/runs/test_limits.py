"""Run configs sent to the web app are bounded: the dataclass bounds, then this server's ceilings."""
import json

import pytest

from webapp.runs.models import Run

from tests.factories import TINY_OVERRIDES, form_data

HUGE = [
    ({"train": {"steps": 2**63}}, "train.steps"),
    ({"train": {"steps": 2**31}}, "train.steps"),
    ({"sampling": {"problems_per_step": 10**9}}, "sampling.problems_per_step"),
    ({"sampling": {"max_new_tokens": 10**9}}, "sampling.max_new_tokens"),
    ({"sampling": {"candidates_per_problem": 10**6}}, "sampling.candidates_per_problem"),
    ({"sandbox": {"workers": 1024}}, "sandbox.workers"),
    ({"sandbox": {"memory_mb": 65536}}, "sandbox.memory_mb"),
]


@pytest.mark.parametrize("config,field", HUGE, ids=[f for _, f in HUGE])
def test_the_api_refuses_unbounded_resources_naming_the_field(client_alice, problem_set, config, field):
    r = client_alice.post("/api/runs", {"name": "big", "problem_set": problem_set.pk, "config": config},
                          content_type="application/json")
    assert r.status_code == 400, r.content
    assert r.json()["field"] == field and r.json()["detail"].startswith(field + ":")
    assert not Run.objects.exists()


def test_a_deployment_ceiling_lowers_the_limit_for_the_api_and_the_form(client_alice, problem_set, settings):
    settings.CONFIG_CEILINGS = {**settings.CONFIG_CEILINGS, "train.steps": 50}
    body = {"name": "r", "problem_set": problem_set.pk, "config": {**TINY_OVERRIDES, "train": {"steps": 51}}}
    r = client_alice.post("/api/runs", body, content_type="application/json")
    assert r.status_code == 400 and r.json()["field"] == "train.steps"
    assert "<= 50 on this server" in r.json()["detail"]
    body["config"]["train"]["steps"] = 50
    assert client_alice.post("/api/runs", body, content_type="application/json").status_code == 201

    html = client_alice.get(f"/runs/new?problem_set={problem_set.pk}").content.decode()
    assert 'name="train.steps" value="60" max="50" min="1"' in html or \
        ('name="train.steps"' in html and 'max="50"' in html.split('name="train.steps"')[1].split(">")[0])
    r = client_alice.post("/runs/new", form_data(problem_set, **{"train.steps": 51}))
    assert r.status_code == 200 and "train.steps" in r.content.decode() and not Run.objects.filter(name="form run")
    assert "&lt;= 50" in r.content.decode() or "≤ 50" in r.content.decode()


def test_number_inputs_carry_the_bounds_for_the_browser(client_alice, problem_set):
    html = client_alice.get(f"/runs/new?problem_set={problem_set.pk}").content.decode()

    def tag(name):
        start = html.index(f'name="{name}"')
        return html[html.rindex("<", 0, start):html.index(">", start)]

    assert 'max="100000"' in tag("train.steps") and 'min="1"' in tag("train.steps")
    assert 'max="4096"' in tag("sandbox.memory_mb") and 'min="16"' in tag("sandbox.memory_mb")
    assert 'max="64"' in tag("sandbox.workers")
    assert 'max="0.99' not in tag("ppo.clip_range")  # exclusive float bounds stay server-side


def test_an_oversized_json_body_answers_json(client_alice, problem_set, settings):
    body = json.dumps({"name": "x" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1024), "problem_set": problem_set.pk})
    r = client_alice.post("/api/runs", body, content_type="application/json")
    assert r.status_code == 400
    assert r["Content-Type"].startswith("application/json")
    assert "too large" in r.json()["detail"]
