"""The supervisor with a real child process (a scripted trainer CLI) and the real follower/ingest."""
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from webapp.runs.models import Run, RunEvent, StepMetric
from webapp.runs.services import cancel_run
from webapp.core.trainer_process import pid_alive, trainer_env
from webapp.runs.supervisor import fail_lost_runs, supervise_run, trainer_command

from tests.factories import ROOT, TINY_OVERRIDES, step_event, write_events
from tests.webapp.conftest import wait_for

pytestmark = pytest.mark.e2e  # the supervisor starts (scripted) trainer subprocesses


@pytest.fixture(autouse=True)
def scripted(settings):
    settings.CRUCIBLE_TRAINER_MODULE = "tests.webapp.fake_trainer"


def script(run, **kw):
    (run.path / "scripted.json").write_text(json.dumps(kw))


def test_a_finishing_trainer_makes_the_run_succeed(run):
    script(run, steps=3, then="done")
    supervise_run(run.pk)
    run.refresh_from_db()
    assert run.status == "succeeded" and run.step == 3 and run.trainer_pid is None
    assert list(StepMetric.objects.filter(run=run).values_list("step", flat=True)) == [1, 2, 3]
    assert RunEvent.objects.filter(run=run).last().kind == "done"


def test_a_crashing_trainer_fails_the_run_with_its_last_stderr_lines(run):
    script(run, steps=2, then="crash")
    supervise_run(run.pk)
    run.refresh_from_db()
    assert run.status == "failed"
    assert "exit code 3" in run.error and "CUDA out of memory (scripted)" in run.error
    assert StepMetric.objects.filter(run=run).count() == 2  # what was recorded is kept
    assert "CUDA out of memory" in (run.path / "stderr.log").read_text()


def test_a_redelivered_task_never_starts_a_second_trainer(run):
    script(run, steps=1, then="done")
    supervise_run(run.pk)
    assert "nothing to do" in supervise_run(run.pk)
    assert RunEvent.objects.filter(run=run, kind="start").count() == 1
    # A running run whose supervisor is alive (this very process, seen from another pid) is left alone.
    Run.objects.filter(pk=run.pk).update(status="running", worker_host=__import__("socket").gethostname(),
                                         worker_pid=os.getppid())
    assert "already supervised" in supervise_run(run.pk)


def test_resume_passes_resume_to_the_trainer(run):
    assert "--resume" not in trainer_command(run, resume=False)
    assert trainer_command(run, resume=True)[-1] == "--resume"


def test_multi_gpu_runs_go_through_accelerate_launch(run, settings):
    settings.GPU_COUNT = 4
    command = trainer_command(run, resume=False)
    assert command[1:5] == ["-m", "accelerate.commands.launch", "--num_processes", "4"]


def test_hf_offline_puts_trainers_in_the_hubs_offline_mode(settings, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    settings.HF_OFFLINE = False
    assert "HF_HUB_OFFLINE" not in trainer_env() and "TRANSFORMERS_OFFLINE" not in trainer_env()
    settings.HF_OFFLINE = True
    assert trainer_env()["HF_HUB_OFFLINE"] == trainer_env()["TRANSFORMERS_OFFLINE"] == "1"


@pytest.mark.django_db(transaction=True)
def test_cancel_sends_sigterm_and_the_trainer_checkpoints_and_stops(user, settings, tmp_path):
    from webapp.runs.services import create_run

    from tests.factories import TINY_OVERRIDES, make_problem_set

    run = create_run(user, "to cancel", make_problem_set(user), TINY_OVERRIDES)
    script(run, steps=1, then="hang")
    thread = threading.Thread(target=supervise_run, args=(run.pk,))
    thread.start()
    try:
        wait_for(lambda: (run.path / "pid").exists() and Run.objects.get(pk=run.pk).step == 1)
        assert cancel_run(run) == "cancelling"
    finally:
        thread.join(60)
    run.refresh_from_db()
    assert run.status == "cancelled"
    assert list(run.checkpoints.values_list("path", flat=True)) == ["checkpoints/last"]
    assert not pid_alive(int((run.path / "pid").read_text()))


@pytest.mark.django_db(transaction=True)
def test_a_run_resumed_while_its_cancelled_trainer_exits_is_left_to_the_new_attempt(user, monkeypatch):
    from webapp.runs import services
    from webapp.runs.services import create_run, resume_run

    from tests.factories import TINY_OVERRIDES, make_problem_set

    monkeypatch.setattr(services, "enqueue_run", lambda run: None)  # the new attempt is not started here
    run = create_run(user, "cancel then resume", make_problem_set(user), TINY_OVERRIDES)
    script(run, steps=1, then="hang", linger_s=2)
    outcome = []
    thread = threading.Thread(target=lambda: outcome.append(supervise_run(run.pk)))
    thread.start()
    try:
        wait_for(lambda: (run.path / "pid").exists() and Run.objects.get(pk=run.pk).step == 1)
        cancel_run(run)
        wait_for(lambda: Run.objects.get(pk=run.pk).status == "cancelled")  # `done` ingested, trainer lingering
        resume_run(Run.objects.get(pk=run.pk))
    finally:
        thread.join(60)
    run.refresh_from_db()
    assert run.status == "queued" and run.resume_count == 1 and not run.error
    assert "left to the new attempt" in outcome[0]


def test_a_run_whose_worker_died_is_marked_failed_and_keeps_its_events(run):
    assert run.claim(host=__import__("socket").gethostname(), pid=2 ** 22 + 7)  # no such process
    write_events(run.path / "events.jsonl", [step_event(1), {"event": "done", "status": "cancelled", "error": None}])
    assert fail_lost_runs() == [run.pk]
    run.refresh_from_db()
    assert run.status == "failed" and "died" in run.error
    assert RunEvent.objects.filter(run=run).count() == 2 and run.step == 1


def test_a_lost_runs_message_quotes_the_trainers_last_step_not_an_older_one(run):
    # Issue 31: a run lost at step 126 was told "last trainer stderr: step 107/300 ...": the twenty lines
    # quoted were steps 107..126, the oldest first. Only the last progress line is quoted now.
    assert run.claim(host=socket.gethostname(), pid=2 ** 22 + 7)  # no such process
    write_events(run.path / "events.jsonl", [step_event(step) for step in range(1, 127)])
    (run.path / "stderr.log").write_text("".join(
        f"step {step}/300 | 1.0 s/step | ETA 3m | reward 0.100 | pass 0.000 | kl 0.0000\n"
        + ("UserWarning: something the trainer said once\n" if step == 100 else "") for step in range(1, 127)))
    assert fail_lost_runs() == [run.pk]
    run.refresh_from_db()
    quoted = run.error.split("last trainer stderr:\n", 1)[1].splitlines()
    assert run.step == 126
    assert quoted == ["UserWarning: something the trainer said once",
                      "step 126/300 | 1.0 s/step | ETA 3m | reward 0.100 | pass 0.000 | kl 0.0000"]


def test_the_trainer_dies_with_its_supervisor():
    code = (
        "import os, subprocess, sys, django; django.setup();"
        "from webapp.core.trainer_process import die_with_parent;"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'],"
        " preexec_fn=die_with_parent(os.getpid())); print(p.pid, flush=True); os._exit(0)")
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="webapp.settings.test")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    child = int(out.stdout.split()[0])
    wait_for(lambda: not pid_alive(child), timeout=10)


def test_the_lost_run_check_is_scheduled_on_the_sandbox_queue():
    # The gpu workers are busy supervising: routed there, the check would wait for the runs to end.
    from webapp.celery import app

    app.loader.import_default_modules()
    entry = app.conf.beat_schedule["fail-lost-runs"]
    assert entry["task"] in app.tasks and entry["schedule"] <= 120
    assert app.amqp.router.route({}, entry["task"])["queue"].name == "sandbox"
    assert app.amqp.router.route({}, "runs.supervise")["queue"].name == "gpu"


# ---- a lost supervisor: its trainer's last words are recorded before the verdict -------------------


def orphan_trainer(run, **script_kw):
    """A trainer whose supervisor is gone: a dead worker pid on this host, the trainer got SIGTERM
    (as PR_SET_PDEATHSIG sends it) and is saving its checkpoint."""
    from webapp.runs.supervisor import start_trainer

    script(run, **script_kw)
    assert run.claim(host=socket.gethostname(), pid=2 ** 22 + 7)  # no such process
    proc = start_trainer(run, resume=False)
    Run.objects.filter(pk=run.pk).update(trainer_pid=proc.pid)
    events = run.path / "events.jsonl"
    wait_for(lambda: events.exists() and b'"step"' in events.read_bytes())
    os.kill(proc.pid, signal.SIGTERM)
    run.refresh_from_db()
    return proc


def test_the_sweep_waits_for_a_lost_runs_trainer_and_lists_its_last_checkpoint(run):
    proc = orphan_trainer(run, steps=2, then="hang", save_s=1.0)
    assert fail_lost_runs() == []  # the trainer is still saving: no verdict yet
    assert Run.objects.get(pk=run.pk).status == "running"
    proc.wait(30)
    assert fail_lost_runs() == [run.pk]
    run.refresh_from_db()
    assert run.status == "failed" and "died" in run.error and "last checkpoint is step 2" in run.error
    assert list(run.checkpoints.values_list("path", flat=True)) == ["checkpoints/last"]
    lines = (run.path / "events.jsonl").read_text().splitlines()
    assert RunEvent.objects.filter(run=run).count() == len(lines) and run.events.last().kind == "done"


def test_a_redelivered_task_follows_the_orphaned_trainer_to_its_end(run):
    proc = orphan_trainer(run, steps=2, then="hang", save_s=1.0)
    outcome = supervise_run(run.pk)
    assert proc.poll() is not None or not pid_alive(proc.pid)
    run.refresh_from_db()
    assert "last lines are recorded" in outcome and run.status == "failed"
    assert list(run.checkpoints.values_list("step", flat=True)) == [2]
    assert RunEvent.objects.filter(run=run, kind="start").count() == 1  # no second trainer was started
    proc.wait(5)


def test_a_lost_run_whose_trainer_finished_takes_the_trainers_verdict(run):
    assert run.claim(host=socket.gethostname(), pid=2 ** 22 + 7)
    write_events(run.path / "events.jsonl", [{"event": "start", "config": {}, "model": "m"}, step_event(1),
                                             {"event": "done", "status": "succeeded", "error": None}])
    assert fail_lost_runs() == [run.pk]
    run.refresh_from_db()
    assert run.status == "succeeded" and not run.error


def test_a_pid_reused_by_another_process_is_not_taken_for_the_trainer(run):
    assert run.claim(host=socket.gethostname(), pid=2 ** 22 + 7)
    Run.objects.filter(pk=run.pk).update(trainer_pid=os.getpid())  # alive, but not a trainer of this run
    assert fail_lost_runs() == [run.pk]


def stored_rows(run) -> tuple:
    """Everything the settling of a lost run would write: the run row and its events."""
    return (tuple(Run.objects.filter(pk=run.pk).values().get().items()),
            tuple(RunEvent.objects.filter(run=run).values_list("seq", "kind")))


def test_the_run_page_only_reads_a_lost_run_and_the_sweep_settles_it(client_alice, run):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    assert run.claim(host=socket.gethostname(), pid=2 ** 22 + 7)  # its worker died
    write_events(run.path / "events.jsonl", [step_event(1), {"event": "done", "status": "succeeded", "error": None}])
    before = stored_rows(run)
    with CaptureQueriesContext(connection) as queries:
        assert client_alice.get(f"/runs/{run.pk}/").status_code == 200
    writes = [q["sql"] for q in queries if q["sql"].lstrip().split()[0].upper() in ("INSERT", "UPDATE", "DELETE")]
    assert writes == [] and stored_rows(run) == before

    assert fail_lost_runs() == [run.pk]
    run.refresh_from_db()
    assert run.status == "succeeded" and run.step == 1 and RunEvent.objects.filter(run=run).count() == 2


def test_the_sweep_settles_a_run_whose_worker_on_another_host_stopped_beating(run):
    from webapp.core.trainer_process import STALE_AFTER

    assert run.claim(host="another-host", pid=1)
    write_events(run.path / "events.jsonl", [step_event(1)])
    assert fail_lost_runs() == []  # a fresh heartbeat: its supervisor is at work
    stale = time.time() - STALE_AFTER.total_seconds() - 5
    os.utime(run.path / "events.jsonl", (stale, stale))  # and its trainer has stopped writing
    Run.objects.filter(pk=run.pk).update(heartbeat=timezone.now() - STALE_AFTER - timedelta(seconds=5))
    assert fail_lost_runs() == [run.pk]
    run.refresh_from_db()
    assert run.status == "failed" and "another-host:1" in run.error and "died" in run.error and run.step == 1


# ---- a worker shutdown (a restart): the run resumes by itself --------------------------------------


def test_a_worker_shutdown_records_the_checkpoint_and_the_run_resumes_when_a_gpu_worker_starts(
        run, monkeypatch, django_capture_on_commit_callbacks):
    from webapp.runs import services, supervisor
    from webapp.runs.supervisor import resume_interrupted_runs

    enqueued = []
    monkeypatch.setattr(services, "enqueue_run", lambda r: enqueued.append(r.pk))
    follow = supervisor._follow

    def follow_until_sigterm(run, proc, follower, attempt):
        # What billiard's SIGTERM handler does in a pool process: SystemExit wherever the task is.
        events = run.path / "events.jsonl"
        wait_for(lambda: events.exists() and b'"step"' in events.read_bytes())
        raise SystemExit(-15)

    monkeypatch.setattr(supervisor, "_follow", follow_until_sigterm)
    script(run, steps=1, then="hang", save_s=0.5)
    with pytest.raises(SystemExit):
        supervise_run(run.pk)
    run.refresh_from_db()
    assert run.status == "failed" and run.auto_resume
    assert "resumes automatically" in run.error and "last checkpoint is step 1" in run.error
    assert list(run.checkpoints.values_list("path", flat=True)) == ["checkpoints/last"]
    assert not pid_alive(int((run.path / "pid").read_text()))

    monkeypatch.setattr(supervisor, "_follow", follow)
    with django_capture_on_commit_callbacks(execute=True):
        assert resume_interrupted_runs() == [run.pk]
    assert enqueued == [run.pk]
    run.refresh_from_db()
    assert run.status == "queued" and run.resume_count == 1 and run.auto_resumes == 1 and not run.auto_resume
    assert resume_interrupted_runs() == []  # once


def test_runs_a_shutdown_stopped_together_go_back_in_line_in_their_old_order(user, problem_set, monkeypatch):
    from webapp.core import queueing
    from webapp.runs import services
    from webapp.runs.supervisor import resume_interrupted_runs

    monkeypatch.setattr(services, "enqueue_run", lambda r: None)
    first, second, third = (services.create_run(user, name, problem_set, TINY_OVERRIDES) for name in "abc")
    for minutes, run in ((30, first), (20, second), (10, third)):  # queued in that order, long ago
        Run.objects.filter(pk=run.pk).update(status="failed", auto_resume=True,
                                             queued=timezone.now() - timedelta(minutes=minutes))
    assert resume_interrupted_runs() == [first.pk, second.pk, third.pk]
    assert [queueing.place(Run.objects.get(pk=r.pk))["position"] for r in (first, second, third)] == [1, 2, 3]


def test_a_run_the_user_resumed_by_hand_is_not_resumed_again(run, monkeypatch):
    from webapp.runs import services
    from webapp.runs.supervisor import resume_interrupted_runs

    monkeypatch.setattr(services, "enqueue_run", lambda r: None)
    run.finish("failed", "stopped by a worker shutdown")
    Run.objects.filter(pk=run.pk).update(auto_resume=True)
    services.resume_run(Run.objects.get(pk=run.pk))
    Run.objects.filter(pk=run.pk).update(status="failed")  # and it failed again, on its own
    assert resume_interrupted_runs() == []


@pytest.mark.django_db(transaction=True)
def test_cancel_of_a_trainer_still_loading_its_model_is_immediate_and_ends_cancelled(user):
    from webapp.runs.services import create_run

    from tests.factories import TINY_OVERRIDES, make_problem_set

    run = create_run(user, "cancel while loading", make_problem_set(user), TINY_OVERRIDES)
    script(run, starting_s=600)  # deaf to SIGTERM for ten minutes, like a hub retry loop
    thread = threading.Thread(target=supervise_run, args=(run.pk,))
    thread.start()
    try:
        wait_for(lambda: (run.path / "pid").exists())
        assert cancel_run(run) == "cancelling"
    finally:
        thread.join(60)
    assert not thread.is_alive()
    run.refresh_from_db()
    assert run.status == "cancelled" and "while the trainer was starting" in run.error
    assert not pid_alive(int((run.path / "pid").read_text()))


@pytest.mark.django_db
def test_a_trainer_that_fails_while_cancelling_ends_the_run_cancelled(run):
    from webapp.runs.services import ingest_event

    Run.objects.filter(pk=run.pk).update(status="running")
    cancel_run(run)
    ingest_event(run, {"event": "done", "status": "failed", "error": "OSError: hub unreachable"}, seq=0)
    run.refresh_from_db()
    assert run.status == "cancelled" and "hub unreachable" in run.error


def test_a_sandbox_backend_this_worker_lacks_fails_the_run_before_the_trainer_starts(run, monkeypatch):
    import sandbox.backends

    Run.objects.filter(pk=run.pk).update(config={**run.config, "sandbox": {**run.config["sandbox"],
                                                                            "backend": "docker"}})
    monkeypatch.setattr(sandbox.backends.base.BACKENDS["docker"], "unavailable",
                        classmethod(lambda cls: "no Docker engine answers (scripted)"))
    script(run, steps=1, then="done")
    assert "refused" in supervise_run(run.pk)
    run.refresh_from_db()
    assert run.status == "failed"
    assert run.error.startswith("sandbox.backend: docker is not available on worker ") and "(scripted)" in run.error
    assert not (run.path / "pid").exists()


def test_a_hub_model_on_a_worker_without_network_starts_its_trainer_offline(run, monkeypatch, settings):
    from webapp.runs import model_refs, supervisor

    settings.HF_OFFLINE = False
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    run.config["model"]["name_or_path"] = "Qwen/Qwen3.5-9B"
    monkeypatch.setattr(model_refs, "hub_reachable", lambda: False)
    assert supervisor.hub_unreachable_for(run)
    assert trainer_env(offline=True)["HF_HUB_OFFLINE"] == "1"
    monkeypatch.setattr(model_refs, "hub_reachable", lambda: True)
    assert not supervisor.hub_unreachable_for(run)
    run.config["model"]["name_or_path"] = "models/tiny"
    monkeypatch.setattr(model_refs, "hub_reachable", lambda: False)
    assert not supervisor.hub_unreachable_for(run)
