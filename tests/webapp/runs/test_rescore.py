"""What-if re-scoring: POST /api/runs/{id}/rescore, the run page's panel and "Start a run with these weights"."""
from __future__ import annotations


import pytest

from training.rescore import RewardSettings, StoredCandidate, rescore
from webapp.runs.models import Candidate
from webapp.runs.services import create_run

from tests.factories import DEFAULT_WEIGHTS, DIMS, TINY_OVERRIDES, trained


def post(client, run, body):
    return client.post(f"/api/runs/{run.pk}/rescore", body, content_type="application/json")


def test_it_answers_the_last_ten_steps_with_trainings_own_functions(client_alice, run):
    trained(run)
    r = post(client_alice, run, {"weights": {"pass_rate": 1.0, "syntax": 0, "efficiency": 0, "conciseness": 0,
                                             "format": 0}})
    assert r.status_code == 200, r.content
    data = r.json()
    assert data["range"] == [3, 12]
    assert [s["step"] for s in data["steps"]] == list(range(3, 13))
    assert all(set(s) >= {"step", "sign_flips", "rank_corr"} for s in data["steps"])
    assert data["weights"]["pass_rate"] == 1.0 and data["weights_before"]["pass_rate"] == 0.6
    assert {p["problem_id"] for p in data["problems"]} == {"HumanEval/0", "add-1"}

    # The same numbers as training.rescore on the stored candidates (which tests/training checks by brute force).
    rows = Candidate.objects.filter(run=run, step__gte=3)
    expected = rescore([StoredCandidate(step=c.step, problem_id=c.problem_id, index=c.index, rewards=c.rewards,
                                        reward=c.reward) for c in rows],
                       RewardSettings(weights=dict(zip(DIMS, DEFAULT_WEIGHTS))), data["weights"])
    assert data["steps"] == [{**s} for s in expected["steps"]]
    for got, want in zip(data["problems"], expected["problems"]):
        assert got["problem_id"] == want["problem_id"] and got["rank_corr"] == pytest.approx(want["rank_corr"])
        for c, w in zip(got["candidates"], want["candidates"]):
            assert c["sign_flip"] == w["sign_flip"] and c["step"] == w["step"] and c["index"] == w["index"]
            for key in ("reward_before", "reward_after", "advantage_before", "advantage_after"):
                assert c[key] == pytest.approx(w[key]), key
            stored = rows.get(step=c["step"], problem_id=got["problem_id"], index=c["index"])
            assert c["reward_before"] == stored.reward and c["status"] == stored.status


def test_weights_left_out_keep_the_runs_own_and_the_same_weights_change_nothing(client_alice, run):
    trained(run)
    data = post(client_alice, run, {"weights": {}}).json()
    assert data["weights"] == data["weights_before"]
    assert data["summary"]["sign_flips"] == 0.0 and data["summary"]["rank_corr"] == 1.0
    data = post(client_alice, run, {"weights": {"conciseness": 2.0}}).json()
    assert data["weights"] == {**data["weights_before"], "conciseness": 2.0}


@pytest.mark.parametrize("weights,field", [
    ({"pass_rate": -1}, "weights.pass_rate"),
    ({"pass_rate": "lots"}, "weights.pass_rate"),
    ({"pass_rate": True}, "weights.pass_rate"),
    ({"speed": 1.0}, "weights.speed"),
    ({d: 0 for d in DIMS}, "weights"),
    (["pass_rate"], "weights"),
])
def test_bad_weights_are_a_400_naming_the_field(client_alice, run, weights, field):
    trained(run, steps=2)
    r = post(client_alice, run, {"weights": weights})
    assert r.status_code == 400, r.content
    assert r.json()["field"] == field and field in r.json()["detail"]


def test_the_step_range_is_clamped_to_the_stored_steps_and_checked(client_alice, run):
    trained(run)
    assert post(client_alice, run, {"weights": {}, "steps": [0, 10**12]}).json()["range"] == [1, 12]
    assert post(client_alice, run, {"weights": {}, "steps": [5, 5]}).json()["range"] == [5, 5]
    for steps in ([6, 2], [20, 30], [1, 2, 3], [1]):
        r = post(client_alice, run, {"weights": {}, "steps": steps})
        assert r.status_code == 400 and r.json()["field"] == "steps", steps
    r = post(client_alice, run, {"weights": {}, "top": 0})
    assert r.status_code == 400 and r.json()["field"] == "top"


def test_a_range_longer_than_the_limit_is_refused(client_alice, run):
    Candidate.objects.bulk_create([Candidate(run=run, step=s, problem_id="p", index=i, reward=float(i),
                                             rewards={d: float(i) for d in DIMS})
                                   for s in range(1, 151) for i in (0, 1)])
    r = post(client_alice, run, {"weights": {}, "steps": [1, 150]})
    assert r.status_code == 400 and r.json()["field"] == "steps" and "at most 100" in r.json()["detail"]
    assert post(client_alice, run, {"weights": {}}).json()["range"] == [141, 150]


def test_a_run_without_candidates_answers_an_empty_rescore(client_alice, run):
    data = post(client_alice, run, {"weights": {"pass_rate": 1.0}}).json()
    assert data["range"] is None and data["steps"] == [] and data["problems"] == []


def test_the_runs_penalised_flags_still_zero_a_flagged_candidate(client_alice, user, problem_set):
    run = create_run(user, "flagged", problem_set,
                     {**TINY_OVERRIDES, "reward": {"penalize_flags": ["spoofed_output"]}})
    trained(run, steps=3, flags=("spoofed_output",))
    data = post(client_alice, run, {"weights": {"pass_rate": 1.0}}).json()
    problem = next(p for p in data["problems"] if p["problem_id"] == "HumanEval/0")
    flagged = [c for c in problem["candidates"] if c["index"] == 0]
    assert len(flagged) == 3 and all(c["reward_after"] == 0.0 for c in flagged)


def test_another_users_run_is_not_found_and_anonymous_gets_401(client, other_user, run):
    assert post(client, run, {"weights": {}}).status_code == 401
    client.force_login(other_user)
    assert post(client, run, {"weights": {}}).status_code == 404


def test_the_run_page_renders_the_what_if_panel_with_the_runs_weights(client_alice, run):
    trained(run, steps=3)
    html = client_alice.get(f"/runs/{run.pk}/").content.decode()
    assert 'id="whatif"' in html and "What-if re-scoring" in html and "js/whatif.js" in html
    for name, value in zip(DIMS, ("0.6", "0.15", "0.1", "0.05", "0.1")):
        assert f'name="{name}" min="0" step="any" value="{value}"' in html, name
    assert "candidates stored for steps 1–3" in html
    assert f'href="/runs/new?clone={run.pk}"' in html and "Start a run with these weights" in html


def test_start_a_run_with_these_weights_prefills_the_new_run_form(client_alice, run):
    r = client_alice.get(f"/runs/new?clone={run.pk}&reward.weights.pass_rate=1&reward.weights.syntax=0")
    form = r.context["form"]
    assert form.initial["reward.weights.pass_rate"] == 1.0 and form.initial["reward.weights.syntax"] == 0.0
    assert form.initial["reward.weights.format"] == 0.1  # left out: the cloned run's own
    assert form.initial["name"] == "first run (re-weighted)"
    clone = next(p for p in r.context["presets"] if p["name"] == f"run-{run.pk}")
    assert clone["values"]["reward.weights.pass_rate"] == 0.6  # so the launch bar lists the change

    r = client_alice.get(f"/runs/new?clone={run.pk}&reward.weights.pass_rate=-2")
    assert r.context["form"].initial["reward.weights.pass_rate"] == 0.6
    assert "reward.weights.pass_rate" in r.content.decode() and "is not a weight" in r.content.decode()


def test_a_run_page_with_stored_candidates_loads_the_rescoring_in_the_background(client_alice, run, monkeypatch):
    from webapp.runs import rescore as web_rescore

    calls = []
    monkeypatch.setattr(web_rescore, "warm_up", lambda: calls.append(1))
    client_alice.get(f"/runs/{run.pk}/")
    assert calls == []  # nothing to re-score yet: torch stays out of the web process
    trained(run, steps=2)
    client_alice.get(f"/runs/{run.pk}/")
    assert calls == [1]


def test_warm_up_imports_trainings_rescoring_once_in_a_thread_of_a_fresh_web_process():
    import os
    import subprocess
    import sys

    from django.conf import settings

    code = ("import django, sys; django.setup(); from webapp.runs import rescore; "
            "assert 'torch' not in sys.modules; t = rescore.warm_up(); assert t.name == 'crucible-rescore-warm-up'; "
            "assert rescore.warm_up() is None; t.join(120); print('training.rescore' in sys.modules, t.daemon)")
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "webapp.settings.test"}
    out = subprocess.run([sys.executable, "-c", code], cwd=settings.BASE_DIR, env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "True"]
