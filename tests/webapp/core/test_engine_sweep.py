"""A worker's start ends the vLLM engine processes whose trainer is gone (webapp.celery.end_orphaned_engines),
and only those."""
import os
import subprocess
import sys
import time

from celery import signals

from training.engines.vllm_server import OWNER_ENV, _start_time
from webapp.celery import end_orphaned_engines


def _engine_process(owner: str) -> subprocess.Popen:
    """A stand-in for an engine core: a process whose environment names ``owner`` as its trainer."""
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                            env=dict(os.environ, **{OWNER_ENV: owner}))


def _environ_names_owner(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return OWNER_ENV.encode() in f.read()
    except OSError:
        return False


def test_a_starting_worker_ends_engine_processes_whose_trainer_is_gone_and_no_other():
    gone = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    gone_owner = f"{gone.pid}:{_start_time(gone.pid)}"
    gone.kill()
    gone.wait()
    me = os.getpid()
    orphan, kept = _engine_process(gone_owner), _engine_process(f"{me}:{_start_time(me)}")
    # the same pid with another start time is not that trainer (a reused pid)
    reused = _engine_process(f"{me}:{int(_start_time(me)) + 1}")
    try:
        deadline = time.monotonic() + 30  # the children's interpreters have exec'd: their environment is set
        while not all(_environ_names_owner(p.pid) for p in (orphan, kept, reused)):
            assert time.monotonic() < deadline, "the stand-in processes did not start within 30 s"
            time.sleep(0.05)
        end_orphaned_engines()
        assert orphan.wait(10) == -9 and reused.wait(10) == -9
        assert kept.poll() is None
    finally:
        for proc in (orphan, kept, reused):
            proc.kill()
            proc.wait()


def test_it_runs_when_a_worker_starts():
    assert any(ref() is end_orphaned_engines for _, ref in signals.worker_init.receivers)
