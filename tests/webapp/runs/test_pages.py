"""Run pages: the generated config form, inline errors, the run page, candidates fragment, compare."""

from webapp.runs.models import Run
from webapp.runs.services import create_run

from tests.factories import TINY_OVERRIDES, finished_run, form_data


def test_the_form_has_every_config_field_with_defaults_bounds_and_help(client_alice, problem_set):
    from training.config import json_schema

    from webapp.runs.forms import SKIP

    html = client_alice.get(f"/runs/new?problem_set={problem_set.pk}").content.decode()
    for section in ("model", "sampling", "ppo", "schedule", "train", "sandbox"):
        for key in json_schema()["properties"][section]["properties"]:
            if f"{section}.{key}" not in SKIP:  # model.adapters comes from model.name_or_path
                assert f'name="{section}.{key}"' in html, f"{section}.{key}"
    for key in ("pass_rate", "syntax", "efficiency", "conciseness", "format"):
        assert f'name="reward.weights.{key}"' in html
    assert 'name="model.lora.r"' in html and 'name="model.lora"' in html
    assert "PPO clip epsilon" in html  # help text from the dataclass docstring
    assert 'max="1024"' in html  # lora.r bound from the schema
    assert f'<option value="{problem_set.pk}" selected>' in html
    assert "CPU demo — tiny model" in html and "Qwen3.5-9B LoRA on one 80 GB GPU" in html


def test_the_form_offers_thinking_overlong_and_tis_cap_with_their_help(client_alice, problem_set):
    r = client_alice.get(f"/runs/new?problem_set={problem_set.pk}")
    html = r.content.decode()
    assert 'type="checkbox" name="sampling.thinking"' in html and "enable_thinking" in html
    assert 'name="ppo.tis_cap"' in html and 'placeholder="null"' in html and "Truncated importance sampling" in html
    groups = dict(r.context["form"].groups())
    overlong = [f.name for f in groups["Truncated replies (reward.overlong)"]]
    assert overlong == ["reward.overlong.mode", "reward.overlong.buffer_tokens"]
    assert '<option value="soft">soft</option>' in html and "DAPO&#x27;s length penalty" in html
    assert 'name="reward.overlong"' not in html  # a section that cannot be null gets no switch


def test_the_new_fields_reach_the_run_config_and_their_errors_their_field(client_alice, problem_set):
    data = form_data(problem_set, **{"sampling.prompt_style": "chat", "sampling.thinking": "on", "ppo.tis_cap": "2",
                                     "reward.overlong.mode": "soft", "reward.overlong.buffer_tokens": "16"})
    assert client_alice.post("/runs/new", data).status_code == 302
    config = Run.objects.get().config
    assert config["sampling"]["thinking"] is True and config["ppo"]["tis_cap"] == 2.0
    assert config["reward"]["overlong"] == {"mode": "soft", "buffer_tokens": 16}
    html = client_alice.get(f"/runs/{Run.objects.get().pk}/").content.decode()
    assert "thinking on" in html and "TIS cap 2" in html and "soft penalty over the last 16 tokens" in html
    r = client_alice.post("/runs/new", form_data(problem_set, **{"sampling.thinking": "on"}))  # completion style
    assert "needs prompt_style: chat" in r.context["form"]["sampling.thinking"].errors[0]
    r = client_alice.post("/runs/new", form_data(problem_set, **{"ppo.tis_cap": "0.5"}))
    assert r.context["form"]["ppo.tis_cap"].errors


def test_a_valid_form_launches_a_run(client_alice, problem_set):
    r = client_alice.post("/runs/new", form_data(problem_set))
    run = Run.objects.get()
    assert r.status_code == 302 and r["Location"] == f"/runs/{run.pk}/"
    assert run.config["train"]["steps"] == 3 and run.config["model"]["lora"]["r"] == 8


def test_lora_switched_off_is_a_full_fine_tune(client_alice, problem_set):
    data = form_data(problem_set)
    del data["model.lora"]
    client_alice.post("/runs/new", data)
    assert Run.objects.get().config["model"]["lora"] is None


def test_a_bad_value_comes_back_inline_on_its_field(client_alice, problem_set):
    r = client_alice.post("/runs/new", form_data(problem_set, **{"ppo.clip_range": "3"}))
    assert r.status_code == 200 and not Run.objects.exists()
    field = r.context["form"]["ppo.clip_range"]
    assert field.errors and "< 1.0; got 3.0" in field.errors[0]
    r = client_alice.post("/runs/new", form_data(problem_set, **{"sampling.stop": "not a list"}))
    assert r.context["form"]["sampling.stop"].errors


def test_cross_field_errors_land_on_the_named_field(client_alice, problem_set):
    r = client_alice.post("/runs/new", form_data(problem_set, **{"ppo.minibatch_size": "1000"}))
    assert "only has 4 candidates" in r.context["form"]["ppo.minibatch_size"].errors[0]


def test_a_group_of_one_candidate_is_refused_on_its_field_with_the_reason(client_alice, problem_set):
    r = client_alice.post("/runs/new", form_data(problem_set, **{"sampling.candidates_per_problem": "1"}))
    [error] = r.context["form"]["sampling.candidates_per_problem"].errors
    assert error.startswith("must be >= 2 and <= ") and error.endswith("; got 1: a group of one candidate has "
                                                                      "no baseline, so every advantage is zero "
                                                                      "and nothing is learned")


def test_the_run_page_embeds_its_state_and_the_headline(client_alice, run):
    finished_run(run)
    html = client_alice.get(f"/runs/{run.pk}/").content.decode()
    assert "held-out pass@1 25% → 75%" in html and "(+50)" in html
    assert 'id="run-state"' in html and "reward/mean" in html
    assert "js/run_detail.js" in html and "vendor/plotly/plotly.min.js" in html


def test_the_candidates_fragment_highlights_code_and_shows_tests(client_alice, run):
    finished_run(run)
    html = client_alice.get(f"/runs/{run.pk}/problems/HumanEval%2F0/candidates?status=failed").content.decode()
    assert 'class="codehilite"' in html and "wrong answer" in html and "AssertionError" in html
    assert "Traceback: boom" in html  # stderr
    assert html.count('class="candidate"') == 2


def test_the_candidates_fragment_badges_truncated_candidates_and_shows_their_overlong_penalty(client_alice, run):
    from webapp.runs.services import ingest_event

    from tests.factories import problem_event

    event = problem_event(1, statuses=("failed", "failed"))
    event["candidates"][0].update(truncated=True, overlong_penalty=-0.5)
    ingest_event(run, event, seq=0)
    html = client_alice.get(f"/runs/{run.pk}/problems/HumanEval%2F0/candidates").content.decode()
    assert html.count('class="status status-truncated truncated"') == 1 and "hit max_new_tokens" in html
    assert html.count("overlong-penalty") == 1 and "(overlong -0.500)" in html


def test_other_users_get_404_on_pages(client, other_user, run):
    client.force_login(other_user)
    for url in (f"/runs/{run.pk}/", f"/runs/{run.pk}/problems/x/candidates", f"/runs/compare?ids={run.pk}"):
        assert client.get(url).status_code == 404, url
    assert client.post(f"/runs/{run.pk}/cancel").status_code == 404
    assert run.name not in client.get("/runs/").content.decode()


def test_compare_overlays_runs_and_diffs_their_configs(client_alice, user, problem_set, run):
    other = create_run(user, "other", problem_set, {**TINY_OVERRIDES, "ppo": {"kl_coef": 0.1}})
    html = client_alice.get(f"/runs/compare?ids={run.pk},{other.pk}").content.decode()
    assert "ppo.kl_coef" in html and "0.04" in html and "0.1" in html
    assert "ppo.clip_range</code>" not in html  # the same in both
    assert 'id="compare-data"' in html


def test_cancel_and_resume_buttons(client_alice, run):
    client_alice.post(f"/runs/{run.pk}/cancel")
    run.refresh_from_db()
    assert run.status == "cancelled"
    client_alice.post(f"/runs/{run.pk}/resume")
    run.refresh_from_db()
    assert run.status == "queued"


def test_the_embedded_state_is_json_that_cannot_close_its_script_tag(client_alice, run):
    import json
    import re

    from webapp.runs.services import ingest_event

    from tests.factories import problem_event, step_event

    ingest_event(run, step_event(1), seq=0)
    ingest_event(run, problem_event(1, "</script><b>x"), seq=1)
    html = client_alice.get(f"/runs/{run.pk}/").content.decode()
    assert "</script><b>" not in html
    raw = re.search(r'<script id="run-state" type="application/json">(.*?)</script>', html, re.S).group(1)
    state = json.loads(raw)
    assert state["metrics"][0]["step"] == 1 and state["metrics"][0]["metrics"]["kl"] == 0.001
    assert state["problems"][0]["problem_id"] == "</script><b>x" and state["problems"][0]["history"] == [[1, 0.5]]
    assert state["health"]["passed"] == 1 and state["last_seq"] == 1


def test_every_out_of_range_field_is_marked_at_once(client_alice, problem_set):
    r = client_alice.post("/runs/new", form_data(problem_set, **{"ppo.clip_range": "-1", "sampling.temperature": "99",
                                                                 "train.steps": "0"}))
    form = r.context["form"]
    assert "got -1.0" in form["ppo.clip_range"].errors[0]
    assert "<= 10.0; got 99.0" in form["sampling.temperature"].errors[0]
    assert ">= 1 and <= 100000; got 0" in form["train.steps"].errors[0]  # the server's ceiling on steps


def test_compare_diffs_the_problem_set_not_each_runs_copy_of_the_problems(client_alice, user, problem_set, run):
    other = create_run(user, "other", problem_set, {**TINY_OVERRIDES, "ppo": {"kl_coef": 0.1}})
    html = client_alice.get(f"/runs/compare?ids={run.pk},{other.pk}").content.decode()
    assert "problems.jsonl" not in html


def test_the_run_page_says_a_run_stopped_by_a_worker_shutdown_resumes_by_itself(client_alice, run):
    run.finish("failed", "the gpu worker supervising this run was stopped; its last checkpoint is step 2.")
    Run.objects.filter(pk=run.pk).update(auto_resume=True)
    html = client_alice.get(f"/runs/{run.pk}/").content.decode()
    assert 'id="auto-resume"' in html and "resumes automatically" in html
    Run.objects.filter(pk=run.pk).update(auto_resume=False, auto_resumes=1, resume_count=1, status="running")
    html = client_alice.get(f"/runs/{run.pk}/").content.decode()
    assert 'id="auto-resume"' not in html and "1× automatically after a worker restart" in html


def test_the_run_page_of_a_run_stored_before_the_new_config_fields_still_renders(client_alice, run):
    config = run.config
    del config["sampling"]["thinking"], config["ppo"]["tis_cap"], config["reward"]["overlong"]
    Run.objects.filter(pk=run.pk).update(config=config)
    r = client_alice.get(f"/runs/{run.pk}/")
    assert r.status_code == 200 and "thinking on" not in r.content.decode()


def test_a_candidates_page_past_the_last_is_not_found(client_alice, run):
    r = client_alice.get(f"/runs/{run.pk}/problems/HumanEval%2F0/candidates?page=2")
    assert r.status_code == 404
    assert client_alice.get(f"/runs/{run.pk}/problems/HumanEval%2F0/candidates?page=x").status_code == 404
    assert client_alice.get(f"/runs/{run.pk}/problems/HumanEval%2F0/candidates?page=1").status_code == 200
