"""`?flag=NAME` on the candidates API: only candidates whose result carries the flag; unknown names are a 400."""
from urllib.parse import quote

import pytest
from django.db import connection

from sandbox.flags import VOCABULARY

from tests.factories import flagged_by_step, flagged_events, form_data, ingest, problem_event, step_event


@pytest.fixture
def flagged_run(run):
    """Two steps of HumanEval/0, three candidates each; FLAGGED says which carry which flags."""
    ingest(run, flagged_events(1, flagged_by_step(1), penalize=()) + flagged_events(2, flagged_by_step(2), penalize=()))
    return run


def _url(run, query=""):
    return f"/api/runs/{run.pk}/problems/{quote('HumanEval/0', safe='')}/candidates{query}"


def _picked(response):
    assert response.status_code == 200, response.content
    return [(c["step"], c["index"], c["result"]["flags"]) for c in response.json()]


def test_flag_keeps_only_the_candidates_that_carry_it(client_alice, flagged_run):
    assert _picked(client_alice.get(_url(flagged_run, "?flag=spoofed_output"))) == [
        (1, 0, ["spoofed_output"]), (1, 2, ["spoofed_output", "broad_except"])]
    assert _picked(client_alice.get(_url(flagged_run, "?flag=broad_except"))) == [
        (2, 1, ["broad_except"]), (1, 2, ["spoofed_output", "broad_except"])]
    assert _picked(client_alice.get(_url(flagged_run, "?flag=patches_runtime"))) == []
    assert len(_picked(client_alice.get(_url(flagged_run)))) == 6


def test_flag_combines_with_status_and_step(client_alice, flagged_run):
    assert _picked(client_alice.get(_url(flagged_run, "?flag=spoofed_output&status=failed"))) == [
        (1, 2, ["spoofed_output", "broad_except"])]
    assert _picked(client_alice.get(_url(flagged_run, "?flag=broad_except&step=2"))) == [(2, 1, ["broad_except"])]


def test_flag_filters_the_same_without_json_containment_in_the_database(client_alice, flagged_run, monkeypatch):
    monkeypatch.setattr(connection.features, "supports_json_field_contains", False)  # SQLite's case
    assert _picked(client_alice.get(_url(flagged_run, "?flag=spoofed_output&status=failed"))) == [
        (1, 2, ["spoofed_output", "broad_except"])]


def test_an_unknown_flag_is_a_400_that_lists_the_valid_ones(client_alice, flagged_run):
    r = client_alice.get(_url(flagged_run, "?flag=cheating"))
    assert r.status_code == 400 and r.json()["field"] == "flag"
    assert "'cheating'" in r.json()["detail"] and all(name in r.json()["detail"] for name in VOCABULARY)


def test_results_without_flags_never_match_a_flag(client_alice, run):
    ingest(run, [step_event(1), problem_event(1)])  # results from before flags
    assert _picked(client_alice.get(_url(run, "?flag=broad_except"))) == []


def test_another_users_run_is_still_not_found_with_a_bad_flag(client, other_user, flagged_run):
    client.force_login(other_user)
    assert client.get(_url(flagged_run, "?flag=cheating")).status_code == 404


def test_the_new_run_form_takes_penalize_flags_as_a_list(client_alice, problem_set):
    from webapp.runs.models import Run

    r = client_alice.post("/runs/new", form_data(problem_set, **{"reward.penalize_flags": '["cheating"]'}))
    assert r.status_code == 200 and "must be one of exit_before_tests" in r.content.decode()
    client_alice.post("/runs/new", form_data(problem_set, **{"reward.penalize_flags": '["broad_except"]'}))
    assert Run.objects.get().config["reward"]["penalize_flags"] == ["broad_except"]
    client_alice.post("/runs/new", form_data(problem_set, name="no flags", **{"reward.penalize_flags": ""}))
    assert Run.objects.get(name="no flags").config["reward"]["penalize_flags"] == []
