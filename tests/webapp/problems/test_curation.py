"""What a user changes of a stored set: a seeded held-out share for a set that brings no held-out problems
(at upload and on the set's page), and problems excluded from runs (kept in the set, marked)."""
import json
from pathlib import Path

import pytest

from webapp.problems import services
from webapp.problems.curation import heldout_ids
from webapp.problems.models import Problem, ProblemSet
from webapp.runs.forms import set_warnings
from webapp.runs.models import Run

from tests.factories import (TINY_OVERRIDES, fail_validation, install_model_stub, jsonl, make_problem_set,
                             problem_lines)

from .conftest import upload_file


@pytest.fixture(autouse=True)
def runs_dir(settings, tmp_path):
    """Runs launched here name models/tiny: a stub of it under a data dir of the test's own (the test data
    dir holds the real demo models only after a test that builds them has run)."""
    settings.RUNS_DIR = tmp_path / "runs"
    settings.MODELS_DIR = tmp_path / "models"
    install_model_stub(settings.MODELS_DIR / "tiny")


def _upload(client, data: bytes, **fields):
    return client.post("/api/problem-sets", {"file": upload_file(data, "humaneval.jsonl"), **fields})


def _splits(ps: ProblemSet) -> dict[str, str]:
    return {p.problem_id: p.split for p in ps.problems.all()}


def _run_problems(client, ps: ProblemSet) -> list[dict]:
    r = client.post("/api/runs", {"name": "after", "problem_set": ps.pk, "config": TINY_OVERRIDES},
                    content_type="application/json")
    assert r.status_code == 201, r.content
    path = Path(Run.objects.get(pk=r.json()["id"]).run_dir) / "problems.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_an_upload_without_held_out_problems_takes_a_seeded_share(client_alice):
    r = _upload(client_alice, problem_lines(8, 0), heldout_share="0.25", heldout_seed="3")
    assert r.status_code == 201 and r.json()["heldout_share"] == 0.25
    ps = ProblemSet.objects.get(pk=r.json()["id"])
    assert (ps.train_count, ps.heldout_count, ps.heldout_seed) == (6, 2, 3)
    chosen = {pid for pid, split in _splits(ps).items() if split == "heldout"}
    assert chosen == heldout_ids(_splits(ps), 0.25, 3)
    assert all(p.data["split"] == p.split for p in ps.problems.all())  # what a run's problems.jsonl says
    again = ProblemSet.objects.get(pk=_upload(client_alice, problem_lines(8, 0), heldout_share="0.25",
                                              heldout_seed="3").json()["id"])
    assert _splits(again) == _splits(ps)  # deterministic: same file, share and seed
    detail = client_alice.get(f"/api/problem-sets/{ps.pk}").json()
    assert detail["splits"] == {"train": 6, "heldout": 2} and detail["heldout_share"] == 0.25


def test_the_choice_depends_on_the_seed_and_not_on_the_order():
    ids = [f"p{i}" for i in range(40)]
    assert heldout_ids(ids, 0.2, 0) == heldout_ids(reversed(ids), 0.2, 0)
    assert len(heldout_ids(ids, 0.2, 0)) == 8 and heldout_ids(ids, 0.2, 0) != heldout_ids(ids, 0.2, 1)
    assert len(heldout_ids(ids[:3], 0.05, 0)) == 1 and len(heldout_ids(ids[:2], 0.9, 0)) == 1  # never none, never all


def test_a_file_with_its_own_held_out_split_keeps_it(client_alice):
    r = _upload(client_alice, problem_lines(3, 1), heldout_share="0.5")
    assert r.status_code == 201 and r.json()["heldout_share"] is None
    ps = ProblemSet.objects.get(pk=r.json()["id"])
    assert (ps.train_count, ps.heldout_count) == (3, 1)
    r = client_alice.post(f"/api/problem-sets/{ps.pk}/heldout", {"share": 0.5}, content_type="application/json")
    assert r.status_code == 409 and "brings its own held-out split" in r.json()["detail"]
    assert 'id="heldout-form"' not in client_alice.get(f"/problem-sets/{ps.pk}/").content.decode()


def test_a_file_whose_held_out_problems_are_all_excluded_still_brings_its_split_and_says_so(client_alice):
    lines = [json.loads(line) for line in problem_lines(3, 1).splitlines()]
    lines[-1]["excluded"] = True  # an export of a set whose one held-out problem the user excluded
    r = _upload(client_alice, jsonl(*lines))
    ps = ProblemSet.objects.get(pk=r.json()["id"])
    assert (ps.train_count, ps.heldout_count, ps.excluded_count) == (3, 0, 1)
    assert 'id="heldout-form"' not in client_alice.get(f"/problem-sets/{ps.pk}/").content.decode()
    r = client_alice.post(f"/api/problem-sets/{ps.pk}/heldout", {"share": 0.5}, content_type="application/json")
    assert r.status_code == 409
    assert ("brings its own held-out split (1 problems, 1 of them excluded: include them again to evaluate on them)"
            in r.json()["detail"])


def test_a_share_out_of_range_is_refused_naming_the_range(client_alice, user):
    r = _upload(client_alice, problem_lines(4, 0), heldout_share="0.95")
    assert r.status_code == 400 and "between 0 and 0.9" in r.json()["detail"]
    ps = make_problem_set(user, "scratch", problem_lines(4, 0))
    r = client_alice.post(f"/api/problem-sets/{ps.pk}/heldout", {"share": -0.1}, content_type="application/json")
    assert r.status_code == 400 and "between 0 and 0.9" in r.json()["detail"]


def test_the_upload_form_takes_a_held_out_share(client_alice):
    r = client_alice.post("/problem-sets/", {"file": upload_file(problem_lines(10, 0)), "format": "auto",
                                             "heldout_share": "0.2", "heldout_seed": "7"})
    ps = ProblemSet.objects.get()
    assert r.status_code == 302 and (ps.heldout_count, ps.heldout_share, ps.heldout_seed) == (2, 0.2, 7)
    r = client_alice.post("/problem-sets/", {"file": upload_file(problem_lines(3, 1)), "format": "auto",
                                             "heldout_share": "0.2"}, follow=True)
    assert "brings its own held-out split (1 problems): the held-out share was not applied" in r.content.decode()


def test_the_set_page_chooses_a_share_and_runs_launched_afterwards_use_it(client_alice, user):
    ps = make_problem_set(user, "humaneval", problem_lines(8, 0))
    html = client_alice.get(f"/problem-sets/{ps.pk}/").content.decode()
    assert 'id="heldout-form"' in html and "runs need held-out problems" in html
    assert "no held-out problems" in set_warnings(ps, None, short=True)[0]
    r = client_alice.post(f"/problem-sets/{ps.pk}/heldout", {"share": "0.25", "seed": "1"}, follow=True)
    assert "2 problems held out, 6 to train on (seed 1)" in r.content.decode()
    ps.refresh_from_db()
    assert (ps.train_count, ps.heldout_count) == (6, 2) and not set_warnings(ps, None, short=True)
    heldout = {p["id"] for p in _run_problems(client_alice, ps) if p["split"] == "heldout"}
    assert heldout == heldout_ids(_splits(ps), 0.25, 1)
    client_alice.post(f"/problem-sets/{ps.pk}/heldout", {"share": "0", "seed": "0"})  # back to the file's: all train
    ps.refresh_from_db()
    assert (ps.train_count, ps.heldout_count, ps.heldout_share) == (8, 0, None)


def test_a_problem_that_fails_validation_can_be_excluded_and_runs_skip_it(client_alice, user):
    ps = make_problem_set(user, "with a broken one", problem_lines(4, 1))
    broken = fail_validation(ps, "add-2")
    assert broken.problem_set.validation_badge == ("warning", "1 failing")
    html = client_alice.get(f"/problem-sets/{ps.pk}/").content.decode()
    assert "Exclude it from runs with the Exclude button in its row below (it stays in the set)" in html
    assert "Fix or remove" not in html
    assert html.count('class="exclude-form"') == 1  # offered on the failing row only
    assert "1 failing validation" in set_warnings(ps, None, short=True)

    page = client_alice.get(f"/problem-sets/{ps.pk}/problems/{broken.pk}/").content.decode()
    assert "used by runs, though it fails validation" in page and ">Exclude</button>" in page
    r = client_alice.post(f"/problem-sets/{ps.pk}/problems/{broken.pk}/exclude", {"excluded": "1"}, follow=True)
    assert "add-2 is excluded: runs launched from now on skip it (it stays in the set)." in r.content.decode()
    ps.refresh_from_db()
    broken.refresh_from_db()
    assert broken.excluded and ps.problem_count == 5 and (ps.train_count, ps.excluded_count) == (3, 1)
    html = r.content.decode()
    assert 'id="validation-warning"' not in html and "The 1 failing problem is excluded from runs." in html
    assert '<tr data-problem="add-2" class="excluded">' in html and 'id="count-excluded">1' in html
    assert not set_warnings(ps, None, short=True)
    assert ps.validation_badge == ("done", "done") and ps.validation_text.endswith("(1 excluded from runs)")
    assert "add-2" not in {p["id"] for p in _run_problems(client_alice, ps)}
    page = client_alice.get(f"/problem-sets/{ps.pk}/problems/{broken.pk}/").content.decode()
    assert "runs launched since skip it" in page and ">Include</button>" in page
    exported = client_alice.get(f"/problem-sets/{ps.pk}/export.jsonl")
    assert "add-2" in {json.loads(line)["id"] for line in b"".join(exported.streaming_content).splitlines()}

    client_alice.post(f"/problem-sets/{ps.pk}/problems/{broken.pk}/exclude", {"excluded": "0"})
    ps.refresh_from_db()
    assert (ps.train_count, ps.excluded_count) == (4, 0)
    assert "1 failing validation" in set_warnings(ps, None, short=True)


def test_the_api_excludes_by_uploaded_id_and_reports_it(client_alice, user):
    ps = make_problem_set(user, "api", problem_lines(3, 1))
    fail_validation(ps, "HumanEval/0")
    r = client_alice.post(f"/api/problem-sets/{ps.pk}/problems/HumanEval%2F0/exclude", {"excluded": True},
                          content_type="application/json")
    assert r.status_code == 200 and r.json()["excluded"] == 1 and r.json()["splits"] == {"train": 2, "heldout": 1}
    rows = {row["problem_id"]: row["excluded"] for row in
            client_alice.get(f"/api/problem-sets/{ps.pk}").json()["validation"]["results"]}
    assert rows == {"HumanEval/0": True, "add-1": False, "add-2": False, "add-3": False}
    assert client_alice.post(f"/api/problem-sets/{ps.pk}/problems/nope/exclude", {},
                             content_type="application/json").status_code == 404


def test_another_users_set_cannot_be_changed(client, user, other_user):
    ps = make_problem_set(user, "alice's", problem_lines(4, 0))
    problem = ps.problems.first()
    client.force_login(other_user)
    assert client.post(f"/problem-sets/{ps.pk}/heldout", {"share": "0.5", "seed": "0"}).status_code == 404
    assert client.post(f"/problem-sets/{ps.pk}/problems/{problem.pk}/exclude", {"excluded": "1"}).status_code == 404
    assert client.post(f"/api/problem-sets/{ps.pk}/heldout", {"share": 0.5},
                       content_type="application/json").status_code == 404
    assert not Problem.objects.filter(excluded=True).exists() and ProblemSet.objects.get().heldout_count == 0


def test_the_upload_form_offers_the_share_and_says_what_is_wrong_with_it(client_alice):
    html = client_alice.get("/problem-sets/").content.decode()
    assert 'name="heldout_share"' in html and 'name="heldout_seed"' in html
    r = client_alice.post("/problem-sets/", {"file": upload_file(problem_lines(4, 0)), "format": "auto",
                                             "heldout_share": "0.95"})
    assert r.status_code == 400 and not ProblemSet.objects.exists()
    assert 'id="heldout-errors">Held-out share: Ensure this value is less than or equal to 0.9.' in r.content.decode()


def _export(client, ps: ProblemSet, api: bool = False) -> bytes:
    url = f"/api/problem-sets/{ps.pk}/export" if api else f"/problem-sets/{ps.pk}/export.jsonl"
    r = client.get(url)
    assert r.status_code == 200
    return b"".join(r.streaming_content)


@pytest.mark.parametrize("background", [False, True], ids=["in the request", "by the import task"])
def test_an_exported_set_uploaded_again_keeps_its_excluded_problems_excluded(client_alice, user, settings, tmp_path,
                                                                            background):
    ps = make_problem_set(user, "curated", problem_lines(4, 2))
    broken = fail_validation(ps, "add-2")
    client_alice.post(f"/problem-sets/{ps.pk}/problems/{broken.pk}/exclude", {"excluded": "1"})
    heldout = ps.problems.get(problem_id="add-5")  # a held-out one too: it leaves the held-out count
    client_alice.post(f"/problem-sets/{ps.pk}/problems/{heldout.pk}/exclude", {"excluded": "1"})
    exported = _export(client_alice, ps)
    assert _export(client_alice, ps, api=True) == exported
    lines = {p["id"]: p for p in map(json.loads, exported.splitlines())}
    assert len(lines) == 6 and lines["add-2"]["excluded"] is True and lines["add-5"]["excluded"] is True
    assert all("excluded" not in p for pid, p in lines.items() if pid not in ("add-2", "add-5"))

    if background:
        settings.UPLOAD_INLINE_BYTES, settings.MEDIA_ROOT = 64, tmp_path / "uploads"
    r = client_alice.post("/api/problem-sets", {"name": "again", "file": upload_file(exported, "curated.jsonl")})
    assert r.status_code == (202 if background else 201), r.content
    if background:
        services.import_problem_set(r.json()["id"])
    again = ProblemSet.objects.get(pk=r.json()["id"])
    assert (again.problem_count, again.train_count, again.heldout_count, again.excluded_count) == (6, 3, 1, 2)
    assert set(again.problems.filter(excluded=True).values_list("problem_id", flat=True)) == {"add-2", "add-5"}
    assert all("excluded" not in p.data for p in again.problems.all())  # the row's column says it, once
    detail = client_alice.get(f"/api/problem-sets/{again.pk}").json()
    assert detail["excluded"] == 2 and detail["splits"] == {"train": 3, "heldout": 1}

    fail_validation(again, "add-2")  # failing, but excluded: no warning, as after the Exclude button
    again.refresh_from_db()
    assert again.validation_badge == ("done", "done") and not set_warnings(again, None, short=True)
    assert {p["id"] for p in _run_problems(client_alice, again)} == {"HumanEval/0", "add-1", "add-3", "add-4"}
    assert all("excluded" not in p for p in _run_problems(client_alice, again))
    assert _export(client_alice, again) == exported  # and round and round

    client_alice.post(f"/problem-sets/{again.pk}/problems/{again.problems.get(problem_id='add-2').pk}/exclude",
                      {"excluded": "0"})
    again.refresh_from_db()
    assert (again.train_count, again.excluded_count) == (4, 1)
    assert "excluded" not in json.loads(_export(client_alice, again).splitlines()[2])


def test_an_excluded_field_that_is_not_a_boolean_is_refused_on_its_line(client_alice):
    good = [json.loads(line) for line in problem_lines(3, 0).splitlines()]
    lines = [good[0], {**good[1], "excluded": "yes"}, {**good[2], "excluded": 1}, {**good[2], "id": "x", "excluded": True}]
    r = client_alice.post("/api/problem-sets", {"file": upload_file(jsonl(*lines))})
    assert r.status_code == 201, r.content
    errors = r.json()["errors"]
    assert [(e["line"], e["field"]) for e in errors] == [(2, "excluded"), (3, "excluded")]
    assert "'yes' must be true or false" in errors[0]["message"] and "1 must be true or false" in errors[1]["message"]
    ps = ProblemSet.objects.get(pk=r.json()["id"])
    assert (ps.problem_count, ps.train_count, ps.excluded_count) == (2, 1, 1)
