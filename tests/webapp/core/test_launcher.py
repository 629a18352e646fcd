"""`make run`'s process manager keeps its services up: dead children and the embedded Redis come back."""
import os
import signal
import sys
import time

import pytest

from webapp import embedded_redis
from webapp.launcher import MAX_RESTARTS, RESTART_WINDOW_S, Services

from tests.webapp.conftest import wait_for

SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]


@pytest.fixture
def services():
    said, now = [], [0.0]
    s = Services({"worker-gpu": SLEEPER, "web": SLEEPER}, dict(os.environ), say=said.append, clock=lambda: now[0])
    s.said, s.now = said, now
    s.start()
    yield s
    s.stop()


def kill(proc):
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()


def test_a_killed_child_is_restarted_with_a_message_and_the_others_keep_running(services):
    worker, web = services.children["worker-gpu"], services.children["web"]
    kill(worker)
    assert services.check() is None
    assert services.children["worker-gpu"].pid != worker.pid and services.children["worker-gpu"].poll() is None
    assert services.children["web"] is web and web.poll() is None
    assert services.said == [f"worker-gpu exited with status {-signal.SIGKILL}; restarting it"]


def test_a_child_that_keeps_dying_stops_the_app_after_a_bounded_number_of_restarts(services):
    for _ in range(MAX_RESTARTS):
        kill(services.children["web"])
        assert services.check() is None
    kill(services.children["web"])
    assert "web exited 5 times" in services.check()
    services.now[0] += RESTART_WINDOW_S + 1  # an old burst no longer counts
    assert services.check() is None and services.children["web"].poll() is None


def test_what_is_left_of_a_dead_child_is_stopped_before_its_restart(services, tmp_path):
    # A worker main process killed outright leaves its pool processes (same process group) behind.
    pidfile = tmp_path / "pool.pid"
    code = (f"import os, subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', 'import time; "
            f"time.sleep(120)']); open({str(pidfile)!r}, 'w').write(str(p.pid)); time.sleep(120)")
    services.commands["worker-gpu"] = [sys.executable, "-c", code]
    kill(services.children["worker-gpu"])
    services.check()  # the restarted one is the pool-leaving kind
    wait_for(pidfile.exists, 10, "the pid file")
    wait_for(lambda: pidfile.read_text().strip() != "", 10, "a pid in the pid file")
    pool = int(pidfile.read_text())
    kill(services.children["worker-gpu"])
    services.check()
    wait_for(lambda: not alive(pool), 10, "the pool's end")


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.e2e  # starts (and restarts) a redis-server of its own
def test_a_dead_embedded_redis_is_restarted_on_the_same_url(tmp_path):
    url = embedded_redis.ensure_embedded_redis(tmp_path)
    said = []
    s = Services({}, dict(os.environ), redis_exited=embedded_redis.owned_redis_exited,
                 restart_redis=lambda: said.append(embedded_redis.ensure_embedded_redis(tmp_path)), say=said.append)
    try:
        assert s.check() is None and said == []
        kill(embedded_redis._owned)
        assert s.check() is None
        assert said == ["the embedded Redis died; restarting it", url]
        assert embedded_redis._ping_unix(tmp_path / "redis" / "redis.sock")
    finally:
        embedded_redis.stop_embedded_redis()


def test_first_start_builds_both_tiny_models_and_a_later_start_only_what_is_missing(tmp_path):
    from webapp.launcher import missing_model_builds

    demo = tmp_path / "problems.jsonl"
    builds = missing_model_builds(tmp_path / "models", demo)
    assert list(builds) == ["tiny", "tiny-qwen3_5"]
    assert builds["tiny-qwen3_5"][1:] == ["-m", "training", "tiny-model", "--arch", "qwen3_5", "--out",
                                          str(tmp_path / "models" / "tiny-qwen3_5"), "--warmup-problems", str(demo)]
    (tmp_path / "models" / "tiny").mkdir(parents=True)
    (tmp_path / "models" / "tiny" / "crucible_tiny.json").write_text("{}")
    (tmp_path / "models" / "tiny-qwen3_5").mkdir()
    (tmp_path / "models" / "tiny-qwen3_5" / "config.json").write_text("{}")  # an interrupted build
    assert list(missing_model_builds(tmp_path / "models", demo)) == ["tiny-qwen3_5"]


def test_the_builds_run_side_by_side_and_a_failure_is_raised_after_all_ended(tmp_path):
    import subprocess

    from webapp.launcher import run_all

    # Each waits for the other's file: run one after the other, they would never finish.
    def meet(mine, theirs, code=0):
        return [sys.executable, "-c", f"import os, sys, time\nopen({str(tmp_path / mine)!r}, 'w').close()\n"
                f"deadline = time.monotonic() + 30\nwhile not os.path.exists({str(tmp_path / theirs)!r}):\n"
                f"    assert time.monotonic() < deadline, 'ran alone'\n    time.sleep(0.02)\nsys.exit({code})"]

    run_all({"a": meet("a", "b"), "b": meet("b", "a")}, dict(os.environ))
    for f in ("a", "b"):
        (tmp_path / f).unlink()
    with pytest.raises(subprocess.CalledProcessError) as failed:
        run_all({"a": meet("a", "b", code=3), "b": meet("b", "a")}, dict(os.environ))
    assert failed.value.returncode == 3 and failed.value.cmd[0] == sys.executable


def test_the_qwen3_5_model_is_built_beside_the_running_app_and_says_when_it_is_done(tmp_path):
    import sys

    from webapp.launcher import BACKGROUND_MODELS, BackgroundBuilds, missing_model_builds

    builds = missing_model_builds(tmp_path / "models", tmp_path / "demo.jsonl")
    assert {name for name in builds if name not in BACKGROUND_MODELS} == {"tiny"}  # the only one before start
    said = []
    background = BackgroundBuilds({"tiny-qwen3_5": [sys.executable, "-c", "pass"],
                                   "broken": [sys.executable, "-c", "raise SystemExit(3)"]}, dict(os.environ),
                                  say=said.append)
    deadline = time.monotonic() + 30
    while background.procs and time.monotonic() < deadline:
        background.check()
        time.sleep(0.05)
    assert not background.procs
    assert "models/tiny-qwen3_5 is built" in said
    assert any("models/broken failed (status 3)" in line for line in said)


# `make run` with the real prepare() up to the model build, whose command is a slow stand-in that starts a
# child of its own (as a build's warm-up may) and writes both pids.
SLOW_BUILD_LAUNCHER = """
import sys
import webapp.launcher as launcher

BUILD = '''
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
open(sys.argv[1] + ".tmp", "w").write(f"{os.getpid()} {child.pid}")
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(600)
'''
launcher._manage = lambda *args, **kw: None
launcher.missing_model_builds = lambda models, demo: {"tiny": [sys.executable, "-c", BUILD, sys.argv[1]]}
sys.exit(launcher.main())
"""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_while_the_demo_model_builds_ends_the_build_and_the_launcher_at_once(tmp_path, signum):
    import subprocess

    from webapp.launcher import ROOT

    pids = tmp_path / "build.pids"
    env = dict(os.environ, CRUCIBLE_DATA_DIR=str(tmp_path / "data"), PYTHONPATH=str(ROOT),
               REDIS_URL=os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0")
    log = tmp_path / "launcher.log"  # a file, not a pipe: the build's processes inherit it
    with log.open("w") as out:
        launcher = subprocess.Popen([sys.executable, "-c", SLOW_BUILD_LAUNCHER, str(pids)], cwd=ROOT, env=env,
                                    stdout=out, stderr=subprocess.STDOUT)
    build = child = None
    try:
        wait_for(pids.exists, 60, "the build's start")
        build, child = map(int, pids.read_text().split())
        launcher.send_signal(signum)
        # the handler raises at once and the build's process group is SIGKILLed; no service was started yet,
        # so there is nothing else to stop: seconds, where the build would have run for 600
        launcher.wait(30)
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
        for pid in (build, child):
            if pid and alive(pid):
                os.kill(pid, signal.SIGKILL)
    said = log.read_text()
    assert launcher.returncode == 128 + signum, said
    assert f"{signal.Signals(signum).name} while preparing: stopped before the app started" in said
    wait_for(lambda: not alive(build) and not alive(child), 10, "the build and its child to be gone")
