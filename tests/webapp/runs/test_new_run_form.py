"""The new-run form as a first-time user meets it: which set it offers, what it warns about, its help."""
from webapp.problems.models import ProblemSet
from webapp.runs.models import Run

from tests.factories import form_data, make_problem_set, problem_lines


def test_it_preselects_the_newest_set_with_a_held_out_split_not_the_newest_upload(client_alice, user):
    good = make_problem_set(user, "with held-out", problem_lines(8, 2))
    make_problem_set(user, "scratch upload", problem_lines(4, 0))  # newer, but no held-out split
    form = client_alice.get("/runs/new").context["form"]
    assert form.initial["problem_set"] == good.pk


def test_the_set_dropdown_names_what_is_wrong_with_a_set(client_alice, user):
    make_problem_set(user, "scratch upload", problem_lines(4, 0))
    html = client_alice.get("/runs/new").content.decode()
    assert "scratch upload: 4 problems (4 train / 0 held-out) ⚠ no held-out problems" in html


def test_launching_on_a_set_without_held_out_problems_asks_first(client_alice, user):
    scratch = make_problem_set(user, "scratch upload", problem_lines(4, 0))
    r = client_alice.post("/runs/new", form_data(scratch))
    assert r.status_code == 200 and not Run.objects.exists()
    html = r.content.decode()
    assert "no held-out problems" in html and "Launch anyway" in html
    digest = r.context["warnings_digest"]
    r = client_alice.post("/runs/new", form_data(scratch, confirm_warnings=digest))
    assert r.status_code == 302 and Run.objects.count() == 1


def test_a_confirmation_covers_only_the_warnings_it_was_given_for(client_alice, user):
    scratch = make_problem_set(user, "scratch upload", problem_lines(4, 0))
    digest = client_alice.post("/runs/new", form_data(scratch)).context["warnings_digest"]
    r = client_alice.post("/runs/new", form_data(scratch, confirm_warnings=digest, **{"sampling.problems_per_step": 8}))
    assert r.status_code == 200 and not Run.objects.exists()
    assert "only 4 train problems but problems_per_step is 8" in r.content.decode()


def test_failing_validation_is_a_warning_before_launch(client_alice, user):
    ps = make_problem_set(user, "two bad references", problem_lines(3, 1))
    ProblemSet.objects.filter(pk=ps.pk).update(validation_status="done", validation_passed=2, validation_failed=2)
    r = client_alice.post("/runs/new", form_data(ps))
    assert r.status_code == 200 and "2 problems of this set failed validation" in r.content.decode()


def test_a_clean_set_launches_without_a_question(client_alice, problem_set):
    r = client_alice.post("/runs/new", form_data(problem_set))
    assert r.status_code == 302


def test_a_run_on_a_set_without_held_out_problems_says_so_instead_of_waiting(client_alice, user):
    scratch = make_problem_set(user, "scratch upload", problem_lines(4, 0))
    digest = client_alice.post("/runs/new", form_data(scratch)).context["warnings_digest"]
    client_alice.post("/runs/new", form_data(scratch, confirm_warnings=digest))
    html = client_alice.get(f"/runs/{Run.objects.get().pk}/").content.decode()
    assert "has no held-out problems" in html and "waiting for the first evaluation" not in html


def test_help_and_browser_bounds_agree_with_the_server(client_alice, problem_set):
    html = client_alice.get("/runs/new").content.decode()
    candidates = html.split('name="sampling.candidates_per_problem"')[1]
    assert 'min="2"' in candidates.split(">")[0] and "(≥ 2, ≤ " in candidates.split("</div>")[0]
    assert 'data-below-minimum="a group of one candidate has no baseline' in candidates.split(">")[0]
    clip = html.split('name="ppo.clip_range"')[1].split(">")[0]
    assert 'min="0.0"' in clip and 'max="1.0"' in clip and 'data-exclusive-min="true"' in clip
    lr = html.split('name="ppo.learning_rate"')[1].split(">")[0]
    assert 'min="0.0"' in lr and 'max="1.0"' in lr


def test_the_launch_bar_sits_with_the_chosen_preset(client_alice, problem_set):
    html = client_alice.get("/runs/new?preset=qwen3.5-9b-lora-80gb").content.decode()
    assert 'id="launch-bar"' in html and 'data-preset="qwen3.5-9b-lora-80gb"' in html
    assert 'name="preset" value="qwen3.5-9b-lora-80gb"' in html


def test_the_form_asks_the_server_what_each_set_lacks_at_a_problems_per_step(client_alice, user):
    scratch = make_problem_set(user, "scratch upload", problem_lines(4, 0))
    answer = client_alice.get("/runs/new/set-issues?problems_per_step=8").json()
    assert answer == {"problems_per_step": 8, "sets": {str(scratch.pk): [
        "no held-out problems", "only 4 train problems for problems_per_step 8"]}}
    assert client_alice.get("/runs/new/set-issues?problems_per_step=4").json()["sets"][str(scratch.pk)] == [
        "no held-out problems"]
    assert client_alice.get("/runs/new/set-issues?problems_per_step=x").json()["problems_per_step"] is None


def test_the_form_page_comes_with_the_answers_at_its_own_and_the_presets_problems_per_step(client_alice, user):
    import json
    import re

    scratch = make_problem_set(user, "scratch upload", problem_lines(4, 0))
    html = client_alice.get(f"/runs/new?problem_set={scratch.pk}").content.decode()
    facts = json.loads(re.search(r'<script id="sets-data" type="application/json">(.*?)</script>', html,
                                 re.S).group(1))
    assert facts["names"] == {str(scratch.pk): "scratch upload"}
    assert facts["issues"]["8"][str(scratch.pk)] == ["no held-out problems",
                                                     "only 4 train problems for problems_per_step 8"]
    assert facts["issues"]["32"][str(scratch.pk)][-1] == "only 4 train problems for problems_per_step 32"


def test_the_form_offers_reward_normalization_with_the_configs_choices_and_help(client_alice, problem_set):
    html = client_alice.get("/runs/new").content.decode()
    select = html.split('name="reward.normalize"')[1].split("</select>")[0]
    assert 'value="sum" selected' in select and 'value="per_component"' in select
    field = html.split('data-field="reward.normalize"')[1].split('data-field="reward.weighted_mean"')[0]
    assert "normalized within its group" in field  # the help text is the field's docstring
    assert 'name="reward.weighted_mean"' in html
    r = client_alice.post("/runs/new", form_data(problem_set, **{"reward.normalize": "per_component"}))
    assert r.status_code == 302
    assert Run.objects.get().config["reward"]["normalize"] == "per_component"
