"""A probe queued while a run holds the gpu worker starts at once on the short-job worker, and without
one it waits for the run and says so: real Celery worker processes (consuming the queues as `make run`
starts them), Redis, the database, a scripted run (tests/webapp/fake_trainer.py) and the tiny model."""
from __future__ import annotations

import json
import os
import shutil
import sys
import time
from contextlib import contextmanager

import pytest

from webapp.probes import services as probes
from webapp.problems.models import Probe
from webapp.problems.services import create_problem_set
from webapp.runs import services as run_services
from webapp.runs.models import Run

from tests.factories import TINY_OVERRIDES, jsonl, make_problem_set
from tests.processes import spawn, stop
from tests.webapp.conftest import wait_for
from tests.webapp.problems.conftest import upload_file

pytestmark = pytest.mark.e2e

GPU_WORKER = ("gpu,gpu_short", "gpu")  # queues, node name: as webapp/launcher.py starts them
SHORT_WORKER = ("gpu_short", "gpu_short")
FREE = {"id": "free", "kind": "function", "prompt": "def f():\n    return 1\n# ", "entry_point": "f",
        "tests": ["assert f() == 1"], "split": "train"}


@pytest.fixture
def env(service_env, transactional_db, installed_demo_models):
    """The workers' environment: their runs start the scripted trainer."""
    return dict(service_env, CRUCIBLE_TEST_TRAINER_MODULE="tests.webapp.fake_trainer")


@contextmanager
def workers(env, tmp_path, *specs):
    """One real worker process (concurrency 1, prefetch 1) per ``(queues, name)``, each answering a ping."""
    from webapp.celery import app

    app.control.purge()
    procs, names = [], []
    try:
        for queues, name in specs:
            node = f"{name}-{os.getpid()}-{time.monotonic_ns()}@localhost"
            procs.append(spawn([sys.executable, "-m", "celery", "-A", "webapp", "worker", "-Q", queues, "-c", "1",
                                "-n", node, "--prefetch-multiplier", "1", "--without-gossip", "--without-mingle",
                                "-l", "INFO"], env, tmp_path / f"{name}.log"))
            names.append(node)
        deadline = time.monotonic() + 90
        while set(names) - {n for reply in app.control.ping(destination=names, timeout=0.5) for n in reply}:
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                raise RuntimeError("workers did not answer: " + "\n".join(
                    (tmp_path / f"{name}.log").read_text()[-2000:] for _, name in specs))
        yield
    finally:
        for proc in procs:
            stop(proc)


@pytest.fixture
def scripted_dirs():
    """Run dirs this test scripted, removed after it: run ids start again at 1 in the next session's test
    database, and a later run #1 reusing the dir would follow this script (hang) instead of its own."""
    dirs = []
    yield dirs
    for directory in dirs:
        shutil.rmtree(directory, ignore_errors=True)


def running_run(user, monkeypatch, scripted_dirs) -> Run:
    """A run that a gpu worker takes and holds (its trainer steps twice, then works on until cancelled)."""
    with monkeypatch.context() as m:
        m.setattr(run_services, "enqueue_run", lambda run: None)
        run = run_services.create_run(user, "long", make_problem_set(user), TINY_OVERRIDES)
    scripted_dirs.append(run.path)
    (run.path / "scripted.json").write_text(json.dumps({"steps": 2, "then": "hang"}))
    run_services.enqueue_run(run)
    wait_for(lambda: Run.objects.get(pk=run.pk).step == 2, 90, "the run holds the gpu worker", interval=0.2)
    return Run.objects.get(pk=run.pk)


def queued_probe(user, monkeypatch) -> Probe:
    """A probe of one always-passing problem, one short sample (seconds of work on the tiny model)."""
    ps, errors = create_problem_set(user, "probed", upload_file(jsonl(FREE)), validate=False)
    assert ps is not None, errors
    with monkeypatch.context() as m:  # published below, once its sampling is cut short
        m.setattr(probes, "publish_probe", lambda pk: True)
        probe = probes.request_probe(ps, user, "models/tiny", None, 1)
    Probe.objects.filter(pk=probe.pk).update(config={**probe.config, "sampling": {
        **probe.config["sampling"], "stop": ["\n"], "max_new_tokens": 8}})
    assert probes.publish_probe(probe.pk)
    return probe


def finished(probe: Probe) -> Probe:
    wait_for(lambda: probe.refresh_from_db() or probe.status in ("done", "failed"), 300, "the probe ended",
             interval=0.5)
    assert probe.status == "done", probe.error
    return probe


def test_a_probe_queued_behind_a_run_starts_on_the_short_job_worker_while_the_run_goes_on(
        env, user, tmp_path, monkeypatch, scripted_dirs):
    with workers(env, tmp_path, GPU_WORKER, SHORT_WORKER):
        run = running_run(user, monkeypatch, scripted_dirs)
        probe = finished(queued_probe(user, monkeypatch))
        run.refresh_from_db()
        assert run.status == "running" and run.finished is None, "the probe ran only after the run"
        assert probe.worker_pid != run.worker_pid
        waited = (probe.started - probe.created).total_seconds()
        print(f"\nprobe waited {waited:.1f} s beside run #{run.pk} (short-job worker)")
        run_services.cancel_run(run)
        wait_for(lambda: Run.objects.get(pk=run.pk).is_finished, 60, "the run cancelled")


def test_without_a_short_job_worker_a_probe_waits_for_the_run_and_says_what_it_waits_for(
        env, user, tmp_path, monkeypatch, scripted_dirs):
    with workers(env, tmp_path, GPU_WORKER):
        run = running_run(user, monkeypatch, scripted_dirs)
        probe = queued_probe(user, monkeypatch)
        time.sleep(5)  # ample for an idle worker to take it; the busy gpu worker prefetches nothing
        probe.refresh_from_db()
        assert probe.status == "pending"
        assert probe.progress_text.startswith(
            "1st in line on the short-job lane of the gpu workers; waiting for a worker to take it (the gpu "
            f"workers are busy with run #{run.pk} (step 2/")
        run_services.cancel_run(run)
        finished(probe)
        run.refresh_from_db()
        assert run.finished <= probe.started  # the gpu worker took it once the run had ended
        print(f"\nprobe waited {(probe.started - probe.created).total_seconds():.1f} s: until the run ended")
