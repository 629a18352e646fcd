"""Difficulty probes in the web app: the API (tenancy, bounds), the set page, the job through a real
Celery worker, and runs that filter their train problems by the set's latest finished probe."""
import json
import re
from pathlib import Path

import pytest
import yaml

from training.config import ConfigError
from training.difficulty import ProblemDifficulty, summarize
from webapp.probes import services as probes
from webapp.problems.models import Probe, ProblemSet

from tests.factories import finished_run, jsonl
from tests.webapp.conftest import wait_for

from tests.webapp.problems.conftest import ECHO, GOOD, upload_file

MUL = {**GOOD, "id": "mul", "prompt": "def mul(a, b):\n", "entry_point": "mul", "tests": ["assert mul(2, 3) == 6"],
       "reference_solution": "def mul(a, b):\n    return a * b\n"}
NEG = {**GOOD, "id": "neg", "prompt": "def neg(a):\n", "entry_point": "neg", "tests": ["assert neg(2) == -2"],
       "reference_solution": "def neg(a):\n    return -a\n"}


def post_probe(client, ps, **body):
    return client.post(f"/api/problem-sets/{ps.pk}/probe", {"model": "models/tiny", "samples": 4, **body},
                       content_type="application/json")


def finished_probe(ps, user, rows, samples=4) -> Probe:
    """A done probe of ``ps`` whose output file says ``rows`` ({problem_id: passed}), as run_probe leaves it."""
    results = [ProblemDifficulty(pid, samples, passed) for pid, passed in rows.items()]
    probe = Probe.objects.create(problem_set=ps, requested_by=user, model="models/tiny", samples=samples,
                                 status="done", total=len(rows), done=len(rows),
                                 results=[r.to_dict() for r in results], summary=summarize(results))
    out = probe.directory / "probe.jsonl"
    out.parent.mkdir(parents=True)
    out.write_text("".join(json.dumps(r.to_dict()) + "\n" for r in results)
                   + json.dumps({"summary": probe.summary}) + "\n")
    from django.conf import settings
    from django.utils import timezone

    probe.output_path, probe.finished = str(out.relative_to(settings.PROBLEM_SETS_DIR)), timezone.now()
    probe.save()
    return probe


# ---- API ------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_post_probe_queues_a_gpu_job_and_the_set_shows_it(client_alice, make_set, stub_dirs, monkeypatch,
                                                           django_capture_on_commit_callbacks):
    published = []
    monkeypatch.setattr(probes, "publish_probe", lambda pk: published.append(pk) or True)
    ps = make_set(GOOD, ECHO)
    with django_capture_on_commit_callbacks(execute=True):
        r = post_probe(client_alice, ps)
    assert r.status_code == 202, r.content
    body = r.json()
    assert (body["status"], body["model"], body["samples"], body["total"], body["results"]) == (
        "pending", "models/tiny", 4, 2, [])
    assert published == [body["id"]]
    probe = Probe.objects.get(pk=body["id"])
    assert probe.config["sampling"]["max_new_tokens"] == 64  # the CPU demo preset's sampling for its model
    detail = client_alice.get(f"/api/problem-sets/{ps.pk}").json()
    assert detail["probe"]["status"] == "pending" and detail["probe"]["samples"] == 4
    # one probe at a time per set
    r = post_probe(client_alice, ps)
    assert r.status_code == 409 and "already pending" in r.json()["detail"]


def dead_pid() -> int:
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid  # reaped: no process has it (until the kernel reuses it, far later)


def test_a_probe_whose_worker_died_is_failed_and_no_longer_blocks_the_set(client_alice, make_set, user, stub_dirs,
                                                                          monkeypatch):
    import socket
    from datetime import timedelta

    from django.utils import timezone

    from webapp.probes.tasks import sweep

    monkeypatch.setattr(probes, "publish_probe", lambda pk: True)
    ps = make_set(GOOD, ECHO)
    now = timezone.now()
    lost = Probe.objects.create(problem_set=ps, requested_by=user, model="models/tiny", samples=4, status="running",
                                worker_host=socket.gethostname(), worker_pid=dead_pid(), heartbeat=now)
    elsewhere = dict(problem_set=ps, requested_by=user, model="models/tiny", samples=4, status="running",
                     worker_host="gpu-host-2", worker_pid=1234)
    alive = Probe.objects.create(**elsewhere, heartbeat=now)
    stale = Probe.objects.create(**elsewhere, heartbeat=now - timedelta(minutes=10))
    assert not lost.worker_is_alive() and alive.worker_is_alive() and not stale.worker_is_alive()

    sweep()  # the beat task
    for probe in (lost, stale):
        probe.refresh_from_db()
        assert probe.status == "failed" and "died before it finished" in probe.error and probe.finished
    alive.refresh_from_db()
    assert alive.status == "running"  # another host's worker that still beats is left alone
    assert post_probe(client_alice, ps).status_code == 409

    alive.heartbeat = now - timedelta(minutes=10)
    alive.save()
    r = post_probe(client_alice, ps)  # no beat needed: the request itself settles the lost probe
    assert r.status_code == 202, r.content
    alive.refresh_from_db()
    assert alive.status == "failed"


@pytest.mark.django_db
def test_the_set_reports_a_finished_probes_pass_rates(client_alice, make_set, user, stub_dirs):
    ps = make_set(GOOD, ECHO)
    finished_probe(ps, user, {"add": 0, "echo-sum": 3})
    probe = client_alice.get(f"/api/problem-sets/{ps.pk}").json()["probe"]
    assert probe["status"] == "done" and probe["model"] == "models/tiny" and probe["samples"] == 4
    assert [(r["problem_id"], r["solve_rate"], r["pass_rate"]) for r in probe["results"]] == [
        ("add", 0.0, 0.0), ("echo-sum", 0.75, 0.75)]
    assert probe["summary"]["mean_solve_rate"] == 0.375
    assert probe["summary"]["unsolved"] == 1 and probe["reference"] == f"probe:{probe['id']}"
    polled = client_alice.get(f"/api/problem-sets/{ps.pk}?results=false").json()["probe"]
    assert polled["status"] == "done" and polled["results"] == []


@pytest.mark.django_db
def test_the_sets_page_shows_a_finished_probes_mean_solve_rate(client_alice, make_set, user, stub_dirs):
    ps = make_set(GOOD, ECHO)
    finished_probe(ps, user, {"add": 1, "echo-sum": 3})
    page = client_alice.get(f"/problem-sets/{ps.pk}/").content.decode()
    assert '<strong id="probe-mean">0.500</strong>' in page


@pytest.mark.django_db
@pytest.mark.parametrize("body, field, message", [
    ({"samples": 0}, "samples", "must be a whole number from 1 to 64"),
    ({"samples": 65}, "samples", "must be a whole number from 1 to 64"),
    ({"model": "/etc"}, "model", "must be a hub id"),
    ({"model": "models/../../etc"}, "model", "must be a hub id"),
    ({"model": ""}, "model", "is required"),
    ({"adapter": "/tmp/adapter"}, "adapter", "must be an adapter checkpoint of one of your runs"),
])
def test_bad_probe_requests_name_the_field(client_alice, make_set, stub_dirs, body, field, message):
    ps = make_set(GOOD)
    r = post_probe(client_alice, ps, **body)
    assert r.status_code == 400, r.content
    assert r.json()["field"] == field and message in r.json()["detail"]
    assert not Probe.objects.exists()


@pytest.mark.django_db
def test_the_sample_bound_is_the_servers_setting(client_alice, make_set, stub_dirs, settings):
    settings.PROBE_MAX_SAMPLES = 16
    ps = make_set(GOOD)
    assert post_probe(client_alice, ps, samples=17).status_code == 400
    assert post_probe(client_alice, ps, samples=16).status_code == 202


@pytest.mark.django_db
def test_another_users_set_is_not_found_and_their_checkpoint_is_refused_like_a_missing_one(
        client, user, other_user, make_set, stub_dirs):
    from webapp.runs.services import create_run

    alice_set = make_set(GOOD, ECHO)
    bob_set = make_set(GOOD, owner=other_user, name="bob's")
    bob_run = finished_run(create_run(other_user, "bob's run", bob_set, {"train": {"steps": 3}}))
    assert bob_run.checkpoints.filter(step=2, kind="adapter").exists()
    client.force_login(user)
    assert post_probe(client, bob_set).status_code == 404
    assert client.get(f"/api/problem-sets/{bob_set.pk}").status_code == 404
    theirs = post_probe(client, alice_set, model=f"run:{bob_run.pk}/step-2")
    missing = post_probe(client, alice_set, model="run:999999/step-2")
    assert theirs.status_code == missing.status_code == 400
    assert theirs.json() == missing.json() and theirs.json()["field"] == "model"
    adapter = post_probe(client, alice_set, adapter=f"run:{bob_run.pk}/step-2")
    assert adapter.status_code == 400 and adapter.json()["field"] == "adapter"
    assert str(bob_run.path) not in theirs.json()["detail"] + adapter.json()["detail"]
    # bob may probe with his own checkpoint, and then samples with his run's settings
    client.force_login(other_user)
    r = post_probe(client, bob_set, model=f"run:{bob_run.pk}/step-2")
    assert r.status_code == 202, r.content
    assert Probe.objects.get(pk=r.json()["id"]).config["sampling"] == bob_run.config["sampling"]


@pytest.mark.django_db
def test_a_set_still_importing_cannot_be_probed(client_alice, make_set, stub_dirs):
    ps = make_set(GOOD)
    ProblemSet.objects.filter(pk=ps.pk).update(import_status="importing")
    r = post_probe(client_alice, ps)
    assert r.status_code == 409 and "import importing" in r.json()["detail"]


# ---- the set page ---------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_page_offers_the_form_and_shows_a_finished_probe(client_alice, make_set, user, stub_dirs):
    ps = make_set(GOOD, ECHO, MUL)
    page = client_alice.get(f"/problem-sets/{ps.pk}/").content.decode()
    assert 'id="probe-form"' in page and 'value="models/tiny"' in page and "No probe yet" in page
    assert "probe-rate" not in page
    finished_probe(ps, user, {"add": 0, "echo-sum": 4, "mul": 2})
    page = client_alice.get(f"/problem-sets/{ps.pk}/").content.decode()
    assert 'id="probe-histogram"' in page and "vendor/plotly/plotly.min.js" in page
    chart = json.loads(page.split('id="probe-chart" type="application/json">')[1].split("</script>")[0])
    assert chart == {"rates": [0.0, 1.0, 0.5], "samples": 4}
    assert re.findall(r'class="probe-rate">([^<]*)</td>', page) == ["0.00", "1.00", "0.50"]
    unsolved = page.split('id="probe-unsolved"')[1].split("</details>")[0]
    solved = page.split('id="probe-solved"')[1].split("</details>")[0]
    assert ">add<" in unsolved and "echo-sum" not in unsolved and ">echo-sum<" in solved and "mul" not in solved


@pytest.mark.django_db
def test_the_page_form_queues_a_probe_and_refuses_bad_samples(client_alice, make_set, stub_dirs, monkeypatch):
    monkeypatch.setattr(probes, "publish_probe", lambda pk: True)
    ps = make_set(GOOD)
    r = client_alice.post(f"/problem-sets/{ps.pk}/probe", {"model": "models/tiny", "samples": 1000})
    assert r.status_code == 400 and "at most 64" in r.content.decode() and not Probe.objects.exists()
    r = client_alice.post(f"/problem-sets/{ps.pk}/probe", {"model": "/etc/passwd", "samples": 2})
    assert r.status_code == 400 and not Probe.objects.exists()
    r = client_alice.post(f"/problem-sets/{ps.pk}/probe", {"model": "models/tiny", "samples": 2})
    assert r.status_code == 302 and Probe.objects.get().samples == 2
    page = client_alice.get(f"/problem-sets/{ps.pk}/").content.decode()
    assert 'data-status="pending"' in page and "1st in line on the short-job lane" in page and 'id="probe-form"' not in page
    Probe.objects.update(status="done")  # once it has ended, the form offers the same again
    page = client_alice.get(f"/problem-sets/{ps.pk}/").content.decode()
    samples = page.split('id="probe-form"')[1].split('name="samples"')[1].split(">")[0]
    assert 'value="2"' in samples


# ---- runs filter by the latest finished probe --------------------------------------------------------


@pytest.mark.django_db
def test_a_run_with_a_drop_rule_filters_by_the_sets_latest_finished_probe(user, make_set, stub_dirs):
    from webapp.runs.services import create_run

    ps = make_set(GOOD, MUL, NEG, ECHO)
    with pytest.raises(ConfigError) as exc:
        create_run(user, "r", ps, {"difficulty": {"drop_unsolved": True}})
    assert exc.value.field == "difficulty.drop_unsolved" and "no finished difficulty probe" in exc.value.message
    older = finished_probe(ps, user, {"add": 4, "mul": 2, "neg": 4})
    probe = finished_probe(ps, user, {"add": 0, "mul": 4, "neg": 1, "echo-sum": 0})
    run = create_run(user, "filtered", ps, {"difficulty": {"drop_unsolved": True, "drop_solved": True}})
    assert run.config["difficulty"] == {"probe": probe.reference, "drop_unsolved": True, "drop_solved": True}
    trainer = yaml.safe_load((run.path / "run.yaml").read_text())["difficulty"]
    assert trainer["probe"] == str((run.path / "probe.jsonl").resolve())
    assert (run.path / "probe.jsonl").read_text() == probe.output_file.read_text()  # the run's own copy
    # a named probe of the set is taken as named; a path, or a probe of another set, never
    named = create_run(user, "named", ps, {"difficulty": {"probe": older.reference, "drop_solved": True}})
    assert named.config["difficulty"]["probe"] == older.reference
    other = finished_probe(make_set(GOOD, name="other"), user, {"add": 0})
    for bad in (str(probe.output_file), other.reference, "probe:999999"):
        with pytest.raises(ConfigError) as exc:
            create_run(user, "bad", ps, {"difficulty": {"probe": bad, "drop_unsolved": True}})
        assert exc.value.field == "difficulty.probe"
        assert str(stub_dirs) not in exc.value.message
    # rules that would leave no train problem are refused at launch, not when the trainer starts
    finished_probe(ps, user, {"add": 0, "mul": 0, "neg": 4})
    with pytest.raises(ConfigError) as exc:
        create_run(user, "empty", ps, {"difficulty": {"drop_unsolved": True, "drop_solved": True}})
    assert exc.value.field == "difficulty" and "dropping 2 unsolved and 1 solved train problems" in exc.value.message


@pytest.mark.django_db
def test_the_run_form_offers_the_rules_but_never_the_probe_path(client_alice, make_set, stub_dirs):
    page = client_alice.get("/runs/new").content.decode()
    assert 'name="difficulty.drop_unsolved"' in page and 'name="difficulty.drop_solved"' in page
    assert 'name="difficulty.probe"' not in page


def test_the_run_page_says_what_the_filter_dropped():
    from webapp.runs.runtime import runtime_rows

    rows = dict(runtime_rows({"runtime": {"device": "cpu"}, "dropped": {"unsolved": 3, "solved": 1}})["rows"])
    assert rows["difficulty filter"] == "left out 3 never-solved and 1 always-solved problems"


# ---- through a real worker ----------------------------------------------------------------------------


def test_a_probe_runs_on_a_real_worker_and_a_run_filters_by_it(celery_worker, user, installed_demo_models,
                                                                monkeypatch):
    """`problems.probe` on the gpu_short queue runs `python -m training probe` on the tiny model."""
    from django.conf import settings

    from webapp.problems.services import create_problem_set
    from webapp.runs import services as run_services

    # `free` passes and `impossible` fails whatever the model writes (see tests/training/test_probe.py)
    free = {"id": "free", "kind": "function", "prompt": "def f():\n    return 1\n# ", "entry_point": "f",
            "tests": ["assert f() == 1"], "split": "train"}
    impossible = {**free, "id": "impossible", "tests": ["assert f() == 2"]}
    ps, errors = create_problem_set(user, "probed", upload_file(jsonl(free, impossible, GOOD, ECHO)), validate=False)
    assert ps is not None, errors
    publish = probes.publish_probe
    with monkeypatch.context() as m:  # published below, once its sampling cuts completions at line ends
        m.setattr(probes, "publish_probe", lambda pk: True)
        probe = probes.request_probe(ps, user, "models/tiny", None, 3)
    Probe.objects.filter(pk=probe.pk).update(config={**probe.config, "sampling": {
        **probe.config["sampling"], "stop": ["\n", "\r"], "max_new_tokens": 8}})
    assert publish(probe.pk)
    wait_for(lambda: probe.refresh_from_db() or probe.status in ("done", "failed"), 240, "the probe finished",
             interval=0.5)
    assert probe.status == "done", (probe.status, probe.error)
    rates = probe.solve_rates()
    assert list(rates) == ["free", "impossible", "add", "echo-sum"]
    assert rates["free"] == 1.0 and rates["impossible"] == 0.0
    assert probe.done == probe.total == 4 and probe.summary["problems"] == 4
    # the model as the user named it, never the worker's path to it
    assert probe.summary["model"] == "models/tiny" and probe.summary["adapters"] == []
    assert str(settings.MODELS_DIR) not in json.dumps(probe.summary)
    out = Path(settings.PROBLEM_SETS_DIR) / probe.output_path
    assert out.is_file() and out.is_relative_to(Path(settings.PROBLEM_SETS_DIR) / str(ps.pk))

    monkeypatch.setattr(run_services, "enqueue_run", lambda run: True)  # no training here
    run = run_services.create_run(user, "filtered", ps, {"difficulty": {"drop_unsolved": True},
                                                         "train": {"steps": 1}})
    assert run.config["difficulty"]["probe"] == probe.reference
    assert (run.path / "probe.jsonl").read_text() == out.read_text()


@pytest.mark.e2e
@pytest.mark.django_db
def test_a_probe_whose_model_does_not_load_fails_with_the_trainers_message(user, make_set, stub_dirs, monkeypatch):
    monkeypatch.setattr(probes, "publish_probe", lambda pk: True)
    ps = make_set(GOOD)
    probe = probes.request_probe(ps, user, "models/tiny", None, 2)  # a stub directory: nothing to load there
    probe = probes.run_probe(probe.pk)
    assert probe.status == "failed" and probe.finished is not None
    assert "the probe exited (exit code 2)" in probe.error and "error: " in probe.error
    assert "Loading weights" not in probe.error
    assert probes.run_probe(probe.pk).status == "failed"  # a redelivered task leaves a finished probe alone


@pytest.mark.django_db
def test_deleting_a_set_removes_its_probes_and_their_files(client_alice, make_set, user, stub_dirs,
                                                           django_capture_on_commit_callbacks):
    ps = make_set(GOOD)
    probe = finished_probe(ps, user, {"add": 1})
    assert probe.output_file.is_file()
    with django_capture_on_commit_callbacks(execute=True):
        assert client_alice.delete(f"/api/problem-sets/{ps.pk}").status_code == 204
    assert not Probe.objects.exists()
    assert not ps.data_dir.exists()
