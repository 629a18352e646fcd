"""The runs list as an experiment table; rename, notes and clone."""
from webapp.runs.services import create_run

from tests.factories import TINY_OVERRIDES, eval_event, ingest, step_event


def test_the_list_shows_held_out_before_after_best_final_reward_and_duration(client_alice, run):
    ingest(run, [eval_event(0, 0.25), step_event(1, 0.4), eval_event(1, 0.75), step_event(2, 0.55),
                  eval_event(2, 0.5)])
    row = next(r for r in client_alice.get("/runs/").context["rows"] if r["run"].pk == run.pk)
    assert (row["before"], row["after"], row["best"], row["reward"]) == (0.25, 0.5, 0.75, 0.55)
    assert row["duration_s"] is not None and row["duration_s"] >= 0  # running: so far
    html = client_alice.get("/runs/").content.decode()
    assert 'data-sort="best"' in html and 'id="run-search"' in html and f"?clone={run.pk}" in html


def test_a_run_is_renamed_and_given_notes(client_alice, run):
    client_alice.post(f"/runs/{run.pk}/edit", {"name": "lr 1e-5", "notes": "#baseline KL high"})
    run.refresh_from_db()
    assert (run.name, run.notes) == ("lr 1e-5", "#baseline KL high")
    assert "#baseline KL high" in client_alice.get("/runs/").content.decode()
    client_alice.post(f"/runs/{run.pk}/edit", {"name": " ", "notes": ""})
    run.refresh_from_db()
    assert run.name == "lr 1e-5"  # a blank name is refused


def test_another_users_run_cannot_be_renamed(client, other_user, run):
    client.force_login(other_user)
    assert client.post(f"/runs/{run.pk}/edit", {"name": "mine"}).status_code == 404


def test_clone_fills_the_form_with_the_runs_config_and_set(client_alice, user, problem_set):
    source = create_run(user, "sweep a", problem_set, TINY_OVERRIDES | {"ppo": {"kl_coef": 0.123}})
    form = client_alice.get(f"/runs/new?clone={source.pk}").context["form"]
    assert form.initial["ppo.kl_coef"] == 0.123 and form.initial["train.steps"] == 3
    assert form.initial["problem_set"] == problem_set.pk and form.initial["name"] == "sweep a (clone)"
    html = client_alice.get(f"/runs/new?clone={source.pk}").content.decode()
    assert f'data-preset="run-{source.pk}"' in html


def test_clone_of_another_users_run_is_ignored(client, other_user, run):
    client.force_login(other_user)
    form = client.get(f"/runs/new?clone={run.pk}").context["form"]
    assert form.initial["name"] == "cpu-demo run"


def test_durations_read_as_on_the_run_page():
    from webapp.runs.queries import duration_text

    assert [duration_text(s) for s in (42, 185, 5400, None)] == ["42 s", "3 min 5 s", "1.5 h", ""]
