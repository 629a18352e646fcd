"""A pending probe says where it stands and what it waits for (the API, the set page), and a probe
started beside a run on the same host keeps to half the cores."""
import socket
from datetime import timedelta

import pytest
from django.utils import timezone

from webapp.core import queueing
from webapp.probes import services as probes
from webapp.problems.models import Probe
from webapp.runs.models import Run

from tests.factories import make_run, make_user

from tests.webapp.problems.conftest import ECHO, GOOD

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("stub_dirs")]


@pytest.fixture(autouse=True)
def nothing_published(monkeypatch):
    monkeypatch.setattr(probes, "publish_probe", lambda pk: True)


def _running_probe(ps, user, done, total, seconds):
    probe = probes.request_probe(ps, user, "models/tiny", None, 2)
    Probe.objects.filter(pk=probe.pk).update(status="running", done=done, total=total,
                                             started=timezone.now() - timedelta(seconds=seconds))
    probe.refresh_from_db()
    return probe


def test_a_probe_behind_a_running_probe_names_it_with_its_progress_and_time_left(client_alice, make_set, user):
    first = _running_probe(make_set(GOOD, ECHO, name="one"), user, done=3, total=9, seconds=30)  # 10 s a problem
    ps = make_set(GOOD, name="two")
    waiting = probes.request_probe(ps, user, "models/tiny", None, 2)
    body = client_alice.get(f"/api/problem-sets/{ps.pk}?results=false").json()["probe"]
    assert body["queue"]["queue"] == "gpu_short" and body["queue"]["position"] == 1
    assert body["progress_text"] == (f"1st in line on the short-job lane of the gpu workers; waiting for probe "
                                     f"#{first.pk} (3/9 problems, ~1 min left) to end…")
    assert waiting.queue_place()["waiting_for"][0]["id"] == first.pk


def test_probes_wait_in_the_order_they_were_asked_for_and_not_behind_queued_runs(make_set, user):
    run = make_run(user, "queued first", make_set(GOOD, name="trained"))
    first, second = (probes.request_probe(make_set(GOOD, name=n), user, "models/tiny", None, 2) for n in "ab")
    assert (first.queue_place()["position"], second.queue_place()["position"]) == (1, 2)
    assert second.queue_place()["text"].startswith("2nd in line on the short-job lane")
    assert queueing.place(run)["position"] == 1  # nor the run behind the probes: each queue has its own line


def test_a_probe_that_nothing_takes_while_a_run_holds_the_gpu_workers_says_so(make_set, user):
    run = make_run(user, "long", make_set(GOOD, name="trained"))
    Run.objects.filter(pk=run.pk).update(status="running", step=40, steps=200, started=timezone.now())
    probe = probes.request_probe(make_set(GOOD, name="probed"), user, "models/tiny", None, 2)
    assert probe.queue_place()["busy_elsewhere"][0]["id"] == run.pk
    assert probe.progress_text.startswith(
        f"1st in line on the short-job lane of the gpu workers; waiting for a worker to take it (the gpu workers "
        f"are busy with run #{run.pk} (step 40/200, ~")
    Probe.objects.filter(pk=probe.pk).update(created=timezone.now() - timedelta(minutes=2))
    probe.refresh_from_db()
    assert "none has for 2 min: is the short-job worker (`make run` starts one; compose: the worker-gpu-short " \
           "service) or an idle gpu worker running?" in probe.progress_text


def test_another_users_probe_is_not_named(make_set, user):
    bob = make_user("bob")
    _running_probe(make_set(GOOD, owner=bob, name="bob's"), bob, done=1, total=4, seconds=120)
    probe = probes.request_probe(make_set(GOOD, name="mine"), user, "models/tiny", None, 2)
    assert probe.queue_place()["text"] == ("1st in line on the short-job lane of the gpu workers; waiting for "
                                           "another user's probe (~6 min left) to end")


def test_the_set_page_shows_the_place_and_a_running_probe_has_none(client_alice, make_set, user):
    ps = make_set(GOOD)
    client_alice.post(f"/problem-sets/{ps.pk}/probe", {"model": "models/tiny", "samples": 2})
    page = client_alice.get(f"/problem-sets/{ps.pk}/").content.decode()
    assert "1st in line on the short-job lane of the gpu workers; waiting for a worker to take it…" in page
    Probe.objects.update(status="running", done=1, total=2)
    body = client_alice.get(f"/api/problem-sets/{ps.pk}?results=false").json()["probe"]
    assert body["queue"] is None and body["progress_text"] == "1 of 2 problems probed…"


def test_a_probe_beside_a_run_on_this_host_keeps_to_half_the_cores(make_set, user, monkeypatch, tmp_path):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    probe = probes.request_probe(make_set(GOOD), user, "models/tiny", None, 2)
    resolved = probes.resolve_model(probe.model, user)
    assert "--threads" not in probes.probe_command(probe, resolved, tmp_path)
    run = make_run(user, "long", make_set(GOOD, name="trained"))
    Run.objects.filter(pk=run.pk).update(status="running", worker_host="another-host", worker_pid=1)
    assert "--threads" not in probes.probe_command(probe, resolved, tmp_path)  # another host's CPU
    monkeypatch.setattr(queueing.os, "sched_getaffinity", lambda pid: {0})
    Run.objects.filter(pk=run.pk).update(worker_host=socket.gethostname())
    command = probes.probe_command(probe, resolved, tmp_path)
    assert command[command.index("--threads") + 1] == "1"  # one core: still one thread, never zero
    Run.objects.filter(pk=run.pk).update(worker_host=socket.gethostname())
    monkeypatch.setattr(queueing.os, "sched_getaffinity", lambda pid: set(range(8)))
    command = probes.probe_command(probe, resolved, tmp_path)
    assert command[command.index("--threads") + 1] == "4"
    monkeypatch.setenv("OMP_NUM_THREADS", "2")  # pinned for the whole worker: left alone
    assert "--threads" not in probes.probe_command(probe, resolved, tmp_path)
