"""Multi-turn repair candidates in the web app: their turns stored on the candidate rows and served by
the candidates API and the inspector, turn-1 pass rates in the per-problem table and evaluations."""
import pytest

from tests.factories import (FEEDBACK, RIGHT_ADD0, WRONG_ADD0, discounted_repair_run, eval_event, form_data,
                             ingest, problem_event, repair_event, step_event)


def test_a_candidates_turns_are_stored_and_served_with_the_feedback_between_them(client_alice, run):
    ingest(run, [step_event(1), repair_event(1)])
    cands = client_alice.get(f"/api/runs/{run.pk}/problems/HumanEval/0/candidates").json()
    assert [len(c["turns"]) for c in cands] == [2, 0]  # one turn is a one-turn candidate: no turns list
    first, second = cands[0]["turns"]
    assert first["code"] == WRONG_ADD0 and first["feedback"] == FEEDBACK and first["result"]["status"] == "failed"
    assert second["code"] == cands[0]["code"] == RIGHT_ADD0 and second["feedback"] is None


def test_the_inspector_shows_each_turn_what_the_model_was_told_and_a_diff(client_alice, run):
    ingest(run, [step_event(1), repair_event(1)])
    html = client_alice.get(f"/runs/{run.pk}/problems/HumanEval/0/candidates?status=passed").content.decode()
    assert html.count('class="turn"') == 2 and "2 turns" in html
    assert "What the model was told after turn 1" in html and "assert add0(2, 2) == 4" in html
    assert '<span class="diff-del">-    return a - b</span>' in html
    assert '<span class="diff-add">+    return a + b</span>' in html


def test_turn_one_pass_rates_reach_the_problem_table_and_the_evaluations(client_alice, run):
    evaluation = eval_event(0, 0.5, {"add-3": 0.5})
    evaluation["pass@1/turn1"] = 0.25
    evaluation["per_problem"]["add-3"]["pass@1/turn1"] = 0.25
    ingest(run, [evaluation, step_event(1), repair_event(1)])
    rows = {p["problem_id"]: p for p in client_alice.get(f"/api/runs/{run.pk}/problems").json()}
    assert rows["HumanEval/0"]["pass_rate_turn1"] == 0.5 and rows["add-3"]["pass_rate_turn1"] == 0.25
    detail = client_alice.get(f"/runs/{run.pk}/").content.decode()
    assert '"pass@1/turn1": 0.25' in detail and '"pass_rate_turn1":0.5' in detail


def test_a_one_turn_runs_page_has_no_repair_chart(client_alice, run):
    ingest(run, [step_event(1), problem_event(1)])
    assert 'id="chart-repair"' not in client_alice.get(f"/runs/{run.pk}/").content.decode()


def test_the_new_run_form_takes_turns_and_feedback_and_refuses_turns_with_completion_prompts(client_alice,
                                                                                             problem_set):
    from webapp.runs.models import Run

    data = form_data(problem_set, **{"sampling.prompt_style": "chat", "sampling.turns": "2",
                                     "reward.turns": "discounted", "feedback.tests_shown": "1"})
    assert client_alice.post("/runs/new", data).status_code == 302
    run = Run.objects.get()
    assert run.config["sampling"]["turns"] == 2 and run.config["feedback"]["tests_shown"] == 1
    html = client_alice.get(f"/runs/{run.pk}/").content.decode()
    assert "up to 2 turns; credit: discounted per turn (γ 0.4)" in html and 'id="chart-repair"' in html
    r = client_alice.post("/runs/new", form_data(problem_set, **{"sampling.turns": "2"}))  # completion style
    assert "prompt_style: chat" in r.context["form"]["sampling.turns"].errors[0]


def test_a_flag_raised_by_an_earlier_turn_is_found_by_the_flag_filter_and_shown_on_that_turn(client_alice, run):
    event = repair_event(1)
    event["candidates"][0]["turns"][0]["flags"] = ["hardcoded_outputs"]  # turn 1 hard-coded; turn 2 is clean
    ingest(run, [step_event(1), event])
    listed = client_alice.get(f"/api/runs/{run.pk}/problems/HumanEval/0/candidates?flag=hardcoded_outputs").json()
    assert [c["index"] for c in listed] == [0]
    html = client_alice.get(f"/runs/{run.pk}/problems/HumanEval/0/candidates?status=passed"
                            "&flag=hardcoded_outputs").content.decode()
    first_turn = html.split('data-turn="1"')[1].split('data-turn="2"')[0]
    assert "hardcoded_outputs" in first_turn and "hardcoded_outputs (1)" in html  # the filter counts it


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.parametrize("model", ["models/tiny", "models/tiny-qwen3_5"], ids=["qwen3", "qwen3_5"])
def test_a_two_turn_run_trains_evaluates_checkpoints_and_resumes_through_a_worker(celery_worker, user, models_dir,
                                                                                  settings, client, model):
    import time as _time

    from webapp.runs.models import Candidate, Checkpoint, Eval, Run, StepMetric
    from webapp.runs.services import create_run

    from tests.factories import DEMO, make_problem_set
    from .conftest import demo_config

    def wait(statuses):
        deadline = _time.monotonic() + 600
        while Run.objects.get(pk=run.pk).status not in statuses:
            assert _time.monotonic() < deadline, "the run did not finish"
            _time.sleep(0.3)
        run.refresh_from_db()
        return run.status

    settings.MODELS_DIR = models_dir
    client.force_login(user)
    problem_set = make_problem_set(user, "demo", DEMO.read_bytes())
    config = demo_config(steps=3, model=model)
    config["sampling"].update({"prompt_style": "chat", "turns": 2, "max_new_tokens": 24})
    run = create_run(user, "two turns", problem_set, config)
    deadline = _time.monotonic() + 600
    while not StepMetric.objects.filter(run=run).exists():  # stopped after its first step, then resumed
        assert _time.monotonic() < deadline and Run.objects.get(pk=run.pk).status not in ("failed", "succeeded")
        _time.sleep(0.3)
    assert client.post(f"/api/runs/{run.pk}/cancel").status_code == 200
    assert wait(("cancelled", "failed", "succeeded")) == "cancelled", run.error
    assert client.post(f"/api/runs/{run.pk}/resume").status_code == 200
    assert wait(("succeeded", "failed", "cancelled")) == "succeeded", run.error
    assert list(StepMetric.objects.filter(run=run).order_by("step").values_list("step", flat=True)) == [1, 2, 3]
    metrics = StepMetric.objects.get(run=run, step=3).metrics
    assert {"pass@1/turn1", "pass@1/final", "repair/rate", "turns/mean"} <= set(metrics)
    assert 1.0 <= metrics["turns/mean"] <= 2.0
    train = Candidate.objects.filter(run=run, phase="train")
    assert train.count() == 3 * 2 * 2
    two = [c for c in train if c.turns and len(c.turns) == 2]
    assert two, "an untrained tiny model fails its first turn: some candidate must have a second"
    assert any(t.get("feedback") for t in two[0].turns)  # what the model was told between its turns
    assert Eval.objects.filter(run=run).exists() and Checkpoint.objects.filter(run=run, step=3).exists()
    served = client.get(f"/api/runs/{run.pk}/problems/{two[0].problem_id}/candidates?step={two[0].step}").json()
    assert any(len(c.get("turns") or []) == 2 for c in served)


def test_what_if_rescoring_credits_each_turn_as_discounted_training_did(client_alice, user, problem_set):
    """POST /api/runs/{id}/rescore on a ``reward.turns: discounted`` run: one advantage per stored turn."""
    run = discounted_repair_run(user, problem_set)
    r = client_alice.post(f"/api/runs/{run.pk}/rescore", {"weights": {"pass_rate": 1.0, "syntax": 0.0}},
                          content_type="application/json")
    assert r.status_code == 200, r.content
    data = r.json()
    first, second = data["problems"][0]["candidates"]
    # before: A's returns (0.5 + 0.5 * 1.0, 1.0), B's 0.75; pool mean 11/12 -> (1/12, 1/12, -1/6)
    # after:  A's returns (0 + 0.5 * 1.0, 1.0), B's 0.5;    pool mean 2/3   -> (-1/6, 1/3, -1/6)
    assert [(t["return_before"], t["return_after"]) for t in first["turns"]] == [(1.0, 0.5), (1.0, 1.0)]
    assert [t["advantage_before"] for t in first["turns"]] == pytest.approx([1 / 12, 1 / 12], abs=1e-6)
    assert [t["advantage_after"] for t in first["turns"]] == pytest.approx([-1 / 6, 1 / 3], abs=1e-6)
    assert [t["sign_flip"] for t in first["turns"]] == [True, False] and first["sign_flip"]
    assert second["turns"] is None  # passed at once: stored as a one-turn candidate, a trajectory of one turn
    assert second["advantage_before"] == pytest.approx(-1 / 6, abs=1e-6) and not second["sign_flip"]
    assert (first["reward_before"], first["reward_after"]) == (1.0, 0.5)  # the trajectory's return
    assert data["summary"]["sign_flips"] == pytest.approx(1 / 3)  # one of three turn advantages
    assert data["steps"][0]["rank_corr"] == pytest.approx(0.5)
