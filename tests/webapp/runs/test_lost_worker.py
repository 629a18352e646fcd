"""A gpu worker process killed mid-run, with real Celery worker processes and a scripted trainer."""
import json
import os
import signal

import pytest

from webapp.runs.models import Run, RunEvent

from tests.factories import TINY_OVERRIDES, make_problem_set
from tests.webapp.conftest import wait_for


@pytest.fixture
def service_env(service_env):
    # The worker's supervisor starts the fake trainer (tests/webapp/fake_trainer.py), scripted per run.
    return dict(service_env, CRUCIBLE_TEST_TRAINER_MODULE="tests.webapp.fake_trainer")


@pytest.mark.e2e
def test_a_killed_gpu_worker_process_loses_none_of_its_trainers_last_words(celery_worker, user, monkeypatch,
                                                                            tmp_path):
    from webapp.runs import services

    monkeypatch.setattr(services, "enqueue_run", lambda run: None)
    run = services.create_run(user, "lost worker", make_problem_set(user), TINY_OVERRIDES)
    # The trainer takes 2 s to save the checkpoint it makes on SIGTERM: long after its worker died.
    (run.path / "scripted.json").write_text(json.dumps({"steps": 2, "then": "hang", "save_s": 2}))
    monkeypatch.undo()
    services.enqueue_run(run)
    wait_for(lambda: Run.objects.get(pk=run.pk).step == 2, timeout=60, what="step 2 stored")
    run.refresh_from_db()

    os.kill(run.worker_pid, signal.SIGKILL)  # the pool process supervising the run

    try:
        wait_for(lambda: Run.objects.get(pk=run.pk).is_finished, timeout=60, what="a verdict")
    except AssertionError:
        raise AssertionError((tmp_path / "worker.log").read_text()[-4000:]) from None
    run.refresh_from_db()
    assert list(run.checkpoints.values_list("path", flat=True)) == ["checkpoints/last"]
    assert run.status == "failed" and "died" in run.error and "last checkpoint is step 2" in run.error
    lines = (run.path / "events.jsonl").read_text().splitlines()
    assert [e.kind for e in RunEvent.objects.filter(run=run)] == [json.loads(line)["event"] for line in lines]
    assert lines and json.loads(lines[-1])["event"] == "done"
