"""The run page's reward integrity: flag counts from the step metrics, the latest flagged candidates,
badges with their meaning in the candidate viewer, and its filter by flag."""
import json
import re
from urllib.parse import quote

import pytest
from django.db import connection
from django.utils.html import escape

from sandbox.flags import FLAGS, VOCABULARY
from webapp.runs.services import create_run, ingest_event

from tests.factories import (PENALIZE, TINY_OVERRIDES, flagged_by_step, flagged_events, ingest, problem_event,
                             step_event)


@pytest.fixture
def flagged_run(user, problem_set):
    """Two steps of HumanEval/0 whose candidates carry FLAGGED, in a run that penalizes PENALIZE."""
    run = create_run(user, "flagged run", problem_set, TINY_OVERRIDES | {"reward": {"penalize_flags": PENALIZE}})
    run.claim(host="h", pid=1)
    ingest(run, flagged_events(1, flagged_by_step(1)) + flagged_events(2, flagged_by_step(2)))
    return run


def _row_html(html, name):
    """The cells of the panel's row for flag ``name``."""
    match = re.search(rf'<tr data-flag="{name}"[^>]*>(.*?)</tr>', html, re.S)
    assert match, f"no row for {name}"
    return match.group(1)


def _row(html, name):
    return re.sub(r"<[^>]+>", " ", _row_html(html, name))


def _candidates(client, run, query=""):
    r = client.get(f"/runs/{run.pk}/problems/{quote('HumanEval/0', safe='')}/candidates{query}")
    assert r.status_code == 200
    return r.content.decode()


def _listed(html):
    return [(int(s), int(i)) for s, i in re.findall(r'class="candidate" data-step="(\d+)" data-index="(\d+)"', html)]


def test_the_integrity_panel_counts_each_flag_from_the_stored_step_metrics(client_alice, flagged_run):
    html = client_alice.get(f"/runs/{flagged_run.pk}/").content.decode()
    assert "Reward integrity" in html and "js/run_integrity.js" in html
    # newest step (2): 0 spoofed, 1 broad_except, of 3 candidates; all steps: 2 and 2
    assert _row(html, "spoofed_output").split()[-4:] == ["0", "of", "3", "2"]
    assert _row(html, "broad_except").split()[-4:] == ["1", "of", "3", "2"]
    assert _row(html, "patches_runtime").split()[-4:] == ["0", "of", "3", "0"]
    assert "step 2" in html
    series = json.loads(re.search(r'<script id="integrity-series" type="application/json">(.*?)</script>',
                                  html, re.S).group(1))
    assert series["steps"] == [1, 2] and series["candidates"] == [3, 3]
    assert series["counts"]["spoofed_output"] == [2, 0] and series["counts"]["broad_except"] == [1, 1]
    assert list(series["counts"]) == list(VOCABULARY)


def test_every_flag_row_explains_the_flag_and_marks_the_ones_the_run_penalizes(client_alice, flagged_run):
    html = client_alice.get(f"/runs/{flagged_run.pk}/").content.decode()
    for name, meaning in FLAGS.items():
        assert escape(meaning) in _row_html(html, name)
    assert "flag-penalized" in _row_html(html, "spoofed_output") and "penalized" in _row(html, "spoofed_output")
    assert "flag-penalized" not in _row_html(html, "broad_except")
    assert "penalized by this run (total reward 0): <code>spoofed_output</code>" in html


def test_the_panel_lists_the_latest_flagged_candidates_newest_first_linking_to_their_problem(client_alice,
                                                                                            flagged_run):
    html = client_alice.get(f"/runs/{flagged_run.pk}/").content.decode()
    latest = re.search(r'<table class="table small" id="integrity-latest">(.*?)</table>', html, re.S).group(1)
    links = re.findall(r'data-open-problem="([^"]+)" data-flag="([^"]+)" data-step="(\d+)" data-index="(\d+)"', latest)
    assert links == [("HumanEval/0", "broad_except", "2", "1"), ("HumanEval/0", "spoofed_output", "1", "0"),
                     ("HumanEval/0", "spoofed_output", "1", "2")]
    assert latest.count("flag-penalized") == 2  # the two candidates carrying spoofed_output


def test_the_latest_flagged_candidates_are_the_same_without_json_containment(client_alice, flagged_run, monkeypatch):
    from webapp.runs.integrity import latest_flagged

    expected = [(c["step"], c["index"]) for c in latest_flagged(flagged_run)]
    monkeypatch.setattr(connection.features, "supports_json_field_contains", False)  # SQLite's case
    assert [(c["step"], c["index"]) for c in latest_flagged(flagged_run)] == expected == [(2, 1), (1, 0), (1, 2)]
    assert [(c["step"], c["index"]) for c in latest_flagged(flagged_run, limit=2)] == [(2, 1), (1, 0)]


def test_a_run_without_flags_says_so_and_a_trainer_from_before_them_is_named(client_alice, run):
    run.claim(host="h", pid=1)
    quiet = step_event(1)
    quiet["metrics"] |= {f"flags/{name}": 0 for name in VOCABULARY} | {"candidates": 2}
    ingest(run, [quiet, problem_event(1)])
    html = client_alice.get(f"/runs/{run.pk}/").content.decode()
    assert "No candidate carried a flag in 1 step." in html and "integrity-unreported" not in html
    assert "no flag is penalized" in html

    old = create_run(run.owner, "old trainer", run.problem_set, TINY_OVERRIDES)
    old.claim(host="h", pid=1)
    ingest(old, [step_event(1), problem_event(1)])  # no flags/<name> metrics at all
    html = client_alice.get(f"/runs/{old.pk}/").content.decode()
    assert 'id="integrity-unreported"' in html and "does not report flags" in html
    assert _row(html, "spoofed_output").split()[-2:] == ["—", "—"]


def test_the_integrity_fragment_is_the_panels_tables_and_only_for_the_owner(client, client_alice, other_user,
                                                                           flagged_run):
    html = client_alice.get(f"/runs/{flagged_run.pk}/integrity").content.decode()
    assert 'id="integrity-flags"' in html and 'id="integrity-latest"' in html and "<section" not in html
    client.force_login(other_user)
    assert client.get(f"/runs/{flagged_run.pk}/integrity").status_code == 404


def test_the_candidate_viewer_badges_each_flag_with_its_explanation(client_alice, flagged_run):
    html = _candidates(client_alice, flagged_run, "?step=1")
    both = html.split('data-step="1" data-index="2"')[1]
    summary = both.split("</summary>")[0]
    assert re.findall(r'data-badge="([^"]+)"', summary) == ["spoofed_output", "broad_except"]  # vocabulary order
    assert f'title="broad_except: {escape(FLAGS["broad_except"])}"' in summary
    assert "⚑ spoofed_output · penalized" in summary  # the run penalizes it: marked, with why in its title
    assert "reward.penalize_flags set the total reward to 0" in summary
    notes = re.search(r'<ul class="flag-notes small">(.*?)</ul>', both, re.S).group(1)
    assert escape(FLAGS["spoofed_output"]) in notes and escape(FLAGS["broad_except"]) in notes
    assert notes.count("<strong>Penalized</strong>") == 1
    unflagged = html.split('data-step="1" data-index="1"')[1].split("</details>")[0]
    assert "flag-badge" not in unflagged and "flag-notes" not in unflagged


def test_the_candidate_viewer_filters_by_flag_and_offers_the_flags_its_candidates_carry(client_alice, flagged_run):
    html = _candidates(client_alice, flagged_run)
    assert len(_listed(html)) == 6
    offered = re.findall(r'<a href="#" data-flag="([^"]*)"[^>]*>([^<]+)</a>', html)
    assert offered == [("", "any"), ("spoofed_output", "spoofed_output (2)"), ("broad_except", "broad_except (2)")]

    html = _candidates(client_alice, flagged_run, "?flag=broad_except")
    assert _listed(html) == [(2, 1), (1, 2)]
    assert "2 candidates flagged <code>broad_except</code>" in html
    assert re.search(r'data-flag="broad_except"[^>]*class="active"', html)

    html = _candidates(client_alice, flagged_run, "?flag=spoofed_output&status=failed")
    assert _listed(html) == [(1, 2)]  # (1, 0) passed
    html = _candidates(client_alice, flagged_run, "?flag=patches_runtime")
    assert _listed(html) == [] and "No candidates flagged <code>patches_runtime</code>" in html
    assert 'data-flag="patches_runtime"' in html  # the chosen flag stays offered, at 0, to switch back from


def test_the_viewer_refuses_an_unknown_flag(client_alice, flagged_run):
    r = client_alice.get(f"/runs/{flagged_run.pk}/problems/{quote('HumanEval/0', safe='')}/candidates?flag=cheating")
    assert r.status_code == 404


def test_penalized_flags_are_stored_and_served_by_the_api(client_alice, flagged_run):
    r = client_alice.get(f"/api/runs/{flagged_run.pk}/problems/{quote('HumanEval/0', safe='')}/candidates?step=1")
    assert [(c["index"], c["penalized_flags"], c["reward"]) for c in r.json()] == [
        (0, ["spoofed_output"], 0.0), (1, [], 0.3), (2, ["spoofed_output"], 0.0)]


def test_odd_penalized_flags_in_an_event_are_dropped(run):
    from webapp.runs.models import Candidate

    event = problem_event(1, statuses=("failed", "failed"))
    event["candidates"][0]["penalized_flags"] = "spoofed_output"
    event["candidates"][1]["penalized_flags"] = ["broad_except", 3, None]
    ingest_event(run, event, seq=0)
    assert [c.penalized_flags for c in Candidate.objects.filter(run=run).order_by("index")] == [[], ["broad_except"]]
