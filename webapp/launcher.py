"""`make run`: one command from a fresh clone to a running Crucible.

Starts (or reuses) the embedded Redis, migrates, creates the local admin on first start, loads the
demo problem set, builds the tiny CPU Qwen3 model, then runs the Celery workers (queues `gpu` and
`sandbox`) and daphne as children (and builds the tiny Qwen3.5 model beside them, once), and keeps them up: a child that exits, or the embedded Redis, is restarted
with a message (at most ``MAX_RESTARTS`` times in ``RESTART_WINDOW_S`` per service; past that the
app stops, since something is broken for good). Ctrl-C (or SIGTERM) stops every child process
group, then Redis; while the app still prepares (the demo model's build takes a minute or more) it ends
the build at once and exits with 128 + the signal's number, saying so.

The terminal stays quiet (webapp.console): one screen saying where the app listens, where the admin
password and the services' logs are and how to stop it, then only warnings, errors and run state
changes. Every line of every service is in DATA_DIR/logs/<service>.log; ``make run VERBOSE=1``
(``CRUCIBLE_VERBOSE=1``) prints them all here as well.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import Callable

from webapp.console import ServiceOutput

ROOT = Path(__file__).resolve().parent.parent


_print_lock = threading.Lock()  # the launcher's lines and the services' echoed lines never interleave


def _write(line: str) -> None:
    with _print_lock:
        print(line, flush=True)


def _say(message: str) -> None:
    _write(f"[crucible] {message}")


def _manage(*args: str, env: dict) -> None:
    subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, check=True)


def prepare(env: dict) -> dict[str, list[str]]:
    """Everything before the servers start; idempotent, so every `make run` can call it. -> the model
    builds to run beside the servers (``BACKGROUND_MODELS`` not built yet)."""
    _manage("migrate", "--noinput", "-v", "0", env=env)
    _manage("ensure_admin", env=env)
    from webapp import env as envmod

    models_dir = envmod.data_dir() / "models"
    demo = ROOT / "data" / "demo" / "problems.jsonl"
    later: dict[str, list[str]] = {}
    if (ROOT / "training" / "tiny_model.py").exists():
        builds = missing_model_builds(models_dir, demo)
        now = {name: command for name, command in builds.items() if name not in BACKGROUND_MODELS}
        later = {name: command for name, command in builds.items() if name in BACKGROUND_MODELS}
        if now:
            _say(f"Building the tiny CPU demo model {', '.join(now)} into {models_dir} (once; about a minute)...")
            run_all(now, env)
    if demo.exists():
        _manage("load_demo", env=env)
    return later


# The CPU demo's models, built under $CRUCIBLE_DATA_DIR/models/ on first start (name -> tiny-model --arch);
# the presets name them models/<name>.
DEMO_MODELS = {"tiny": "qwen3", "tiny-qwen3_5": "qwen3_5"}
# Built beside the running app rather than before it: its warm start takes a few minutes on 2 cores
# (the linear-attention layers run transformers' PyTorch fallback), and the first demo needs only
# models/tiny. Its preset is refused, naming the installed models, until the build is done.
BACKGROUND_MODELS = frozenset({"tiny-qwen3_5"})


def missing_model_builds(models_dir: Path, warmup_problems: Path) -> dict[str, list[str]]:
    """The ``tiny-model`` command of each demo model not built yet. A build writes crucible_tiny.json
    last, so a build that was interrupted (config.json but no weights) is built again."""
    return {name: [sys.executable, "-m", "training", "tiny-model", "--arch", arch, "--out", str(models_dir / name),
                   "--warmup-problems", str(warmup_problems)]
            for name, arch in DEMO_MODELS.items() if not (models_dir / name / "crucible_tiny.json").exists()}


def run_all(commands: dict[str, list[str]], env: dict) -> None:
    """Run the commands side by side and wait for every one; then ``CalledProcessError`` for the first
    (in order) that failed. Each build uses one thread, so two fit the 2-core machine the demo targets.
    Each runs in a process group of its own: on the way out of an error (or of ``Stopped``) the group is
    killed, the build's own children with it, and nothing is left behind."""
    procs: dict[str, subprocess.Popen] = {}
    try:
        for name, command in commands.items():
            procs[name] = subprocess.Popen(command, cwd=ROOT, env=env, start_new_session=True)
        codes = {name: proc.wait() for name, proc in procs.items()}
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)  # a build cut short is built again next time
                except ProcessLookupError:
                    pass
                proc.wait()
    failed = next((name for name, code in codes.items() if code != 0), None)
    if failed is not None:
        raise subprocess.CalledProcessError(codes[failed], commands[failed])


def child_commands(port: int) -> dict[str, list[str]]:
    from webapp import env as envmod

    gpu_workers = str(envmod.read("CRUCIBLE_GPU_WORKERS"))
    short_workers = envmod.read("CRUCIBLE_GPU_SHORT_WORKERS")
    celery = [sys.executable, "-m", "celery", "-A", "webapp", "worker", "--loglevel", "INFO",
              "--prefetch-multiplier", "1", "--without-gossip", "--without-mingle"]
    # Queue contract (webapp.core.queueing): a gpu worker takes runs, and short jobs while it is idle; the
    # short-job worker takes only short jobs (probes, evaluations), so that none waits behind a run.
    short = {"worker-gpu-short": celery + ["-Q", "gpu_short", "-c", str(short_workers), "-n", "gpu_short@%h"]}
    return {
        "worker-gpu": celery + ["-Q", "gpu,gpu_short", "-c", gpu_workers, "-n", "gpu@%h"],
        **(short if short_workers else {}),
        # -B: the embedded beat (periodic lost-run check, settings.CELERY_BEAT_SCHEDULE).
        "worker-sandbox": celery + ["-Q", "sandbox", "-c", "2", "-n", "sandbox@%h", "-B",
                                    "-s", str(envmod.data_dir() / "celerybeat-schedule")],
        "web": [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "webapp.asgi:application"],
    }


def start_child(command: list[str], env: dict) -> subprocess.Popen:
    # Own session per child: Ctrl-C reaches only us, and we stop each child's whole group.
    return subprocess.Popen(command, cwd=ROOT, env=env, start_new_session=True)


def starter(output: ServiceOutput | None) -> Callable[[str, list[str], dict], subprocess.Popen]:
    """How to start a named service: its output through ``output`` (log file, quiet terminal), or,
    without one, straight to this terminal."""
    if output is None:
        return lambda name, command, env: start_child(command, env)
    return lambda name, command, env: output.start(name, command, cwd=ROOT, env=env)


def stop_children(children: list[tuple[str, subprocess.Popen]]) -> None:
    for _, proc in children:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + 15
    for _, proc in children:
        try:
            proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    for _, proc in children:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # stragglers and grandchildren alike
        except ProcessLookupError:
            pass


class BackgroundBuilds:
    """Model builds running beside the app; each says, once, when it is done or has failed."""

    def __init__(self, commands: dict[str, list[str]], env: dict, say: Callable[[str], None] = _say,
                 output: ServiceOutput | None = None):
        self.say, self.output = say, output
        start = starter(output)
        self.procs = {name: start(f"build-{name}", command, env) for name, command in commands.items()}
        for name in self.procs:
            say(f"building models/{name} in the background (once; a few minutes): its preset works when it is done")

    def check(self) -> None:
        for name, proc in list(self.procs.items()):
            if proc.poll() is None:
                continue
            del self.procs[name]
            if proc.returncode == 0:
                self.say(f"models/{name} is built")
            else:
                log = f" (its log: {self.output.log_path(f'build-{name}')})" if self.output else ""
                self.say(f"building models/{name} failed (status {proc.returncode}){log}; the next `make run` "
                         "tries again")

    def stop(self) -> None:
        stop_children(list(self.procs.items()))


class Stopped(Exception):
    """SIGINT or SIGTERM while the app prepares (migrations, the demo model's build): raised from the
    signal handler, so that a build of a minute or more is ended at once rather than waited for."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


RESTART_WINDOW_S = 60.0
MAX_RESTARTS = 5  # per service within RESTART_WINDOW_S; a service dying faster is broken for good


class Services:
    """The app's child processes (and the embedded Redis, when it is ours), kept running.

    ``check()`` is one pass of the watch loop: each service found dead is restarted, with a message,
    unless it was restarted ``MAX_RESTARTS`` times within ``RESTART_WINDOW_S``; then ``check()``
    returns why the app must stop. Redis is checked first, so that the workers restarted after it
    find it up. A dead child's process group is sent SIGTERM before the restart: a pool process of
    a dead worker main process stops its run (which then resumes by itself), never supervising it
    beside the new worker.
    """

    def __init__(self, commands: dict[str, list[str]], env: dict, *, redis_exited: Callable[[], bool] = lambda: False,
                 restart_redis: Callable[[], object] = lambda: None, say: Callable[[str], None] = _say,
                 clock: Callable[[], float] = time.monotonic, output: ServiceOutput | None = None):
        self.commands, self.env = commands, env
        self.output, self._start = output, starter(output)
        self.redis_exited, self.restart_redis = redis_exited, restart_redis
        self.say, self.clock = say, clock
        self.children: dict[str, subprocess.Popen] = {}
        self._restarts: dict[str, deque[float]] = {}

    def start(self) -> None:
        for name, command in self.commands.items():
            self.children[name] = self._start(name, command, self.env)

    def _may_restart(self, name: str) -> bool:
        times = self._restarts.setdefault(name, deque())
        now = self.clock()
        while times and now - times[0] > RESTART_WINDOW_S:
            times.popleft()
        if len(times) >= MAX_RESTARTS:
            return False
        times.append(now)
        return True

    def check(self) -> str | None:
        """Restart what died; the reason to stop the app when a service keeps dying, else None."""
        if self.redis_exited():
            if not self._may_restart("redis"):
                return f"the embedded Redis died {MAX_RESTARTS} times within {RESTART_WINDOW_S:.0f} s"
            self.say("the embedded Redis died; restarting it")
            try:
                self.restart_redis()
            except RuntimeError as exc:
                return f"the embedded Redis could not be restarted: {exc}"
        for name, proc in self.children.items():
            if proc.poll() is None:
                continue
            if not self._may_restart(name):
                log = f"; its log: {self.output.log_path(name)}" if self.output else ""
                return f"{name} exited {MAX_RESTARTS} times within {RESTART_WINDOW_S:.0f} s (last status " \
                       f"{proc.returncode}{log})"
            log = f" (its log: {self.output.log_path(name)})" if self.output else ""
            self.say(f"{name} exited with status {proc.returncode}; restarting it{log}")
            try:
                os.killpg(proc.pid, signal.SIGTERM)  # what is left of it (a dead worker's pool processes)
            except ProcessLookupError:
                pass
            self.children[name] = self._start(name, self.commands[name], self.env)
        return None

    def stop(self) -> None:
        stop_children(list(self.children.items()))


def ready_screen(port: int, data_dir: Path, output: ServiceOutput, services: list[str], verbose: bool) -> list[str]:
    """What matters once the services start, in one screen (the lines before it scroll away)."""
    lines = ["", f"Crucible is up: http://127.0.0.1:{port}/  (the first page takes a few seconds more)"]
    password_file = data_dir / "admin-password.txt"
    if password_file.exists():
        lines.append(f"log in as admin; the password is in {password_file}")
    lines.append(f"service logs: {output.log_dir}/{{{','.join(services)}}}.log")
    lines.append("every service line is printed here too (VERBOSE=1)" if verbose else
                 "from here on: warnings, errors and run state changes only (make run VERBOSE=1 prints everything)")
    lines += ["stop: Ctrl-C (stops every service, then Redis)", ""]
    return lines


def main() -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings.local")
    sys.path.insert(0, str(ROOT))
    from webapp import env as envmod
    from webapp.embedded_redis import ensure_embedded_redis, owned_redis_exited, stop_embedded_redis

    try:
        port = envmod.read("PORT")
        envmod.read("CRUCIBLE_GPU_WORKERS")  # a bad value stops here, before anything starts
        verbose = envmod.read("CRUCIBLE_VERBOSE")
        data_dir = envmod.data_dir()
        redis_url = envmod.redis_url(data_dir)  # starts the embedded server when REDIS_URL is unset
    except (envmod.ConfigurationError, RuntimeError) as exc:
        _say(f"error: {exc}")
        return 2
    env = dict(os.environ, REDIS_URL=redis_url, PYTHONUNBUFFERED="1")
    _say(f"data directory: {data_dir}")
    _say(f"redis: {redis_url}")
    services = Services({}, env)
    builds = BackgroundBuilds({}, env)
    stopping = 0
    preparing = True

    def on_signal(signum, frame):
        nonlocal stopping
        stopping = signum
        if preparing:
            raise Stopped(signum)

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        try:
            later = prepare(env)
        finally:
            preparing = False
        output = ServiceOutput(data_dir / "logs", verbose=verbose, write=_write)
        commands = child_commands(port)
        services = Services(commands, env, redis_exited=owned_redis_exited,
                            restart_redis=lambda: ensure_embedded_redis(data_dir), output=output)
        services.start()
        builds = BackgroundBuilds(later, env, output=output)
        for line in ready_screen(port, data_dir, output, list(commands), verbose):
            _say(line)
        while not stopping:
            builds.check()
            reason = services.check()
            if reason:
                _say(f"{reason}; stopping")
                return 1
            time.sleep(0.5)
    except subprocess.CalledProcessError as exc:
        _say(f"error: {' '.join(map(str, exc.cmd))} failed with status {exc.returncode}")
        return 1
    except Stopped as exc:
        _say(f"{exc} while preparing: stopped before the app started (a demo model build in progress was "
             "ended; the next `make run` builds it again)")
        return 128 + exc.signum
    finally:
        _say("stopping...")
        builds.stop()
        services.stop()
        stop_embedded_redis()
        _say("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
