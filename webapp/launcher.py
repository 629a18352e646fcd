"""`make run`: one command from a fresh clone to a running Crucible.

Starts (or reuses) the embedded Redis, migrates, creates the local admin on first start, loads the
demo problem set, builds the tiny CPU model, then runs the Celery workers (queues `gpu` and `sandbox`)
and daphne as children. Ctrl-C (or SIGTERM) stops every child process group, then Redis.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _say(message: str) -> None:
    print(f"[crucible] {message}", flush=True)


def _manage(*args: str, env: dict) -> None:
    subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, check=True)


def prepare(env: dict) -> None:
    """Everything before the servers start; idempotent, so every `make run` can call it."""
    _manage("migrate", "--noinput", "-v", "0", env=env)
    _manage("ensure_admin", env=env)
    from webapp import env as envmod

    data_dir = envmod.data_dir()
    model_dir = data_dir / "models" / "tiny"
    demo = ROOT / "data" / "demo" / "problems.jsonl"
    if (ROOT / "training" / "tiny_model.py").exists() and not (model_dir / "config.json").exists():
        _say(f"Building the tiny CPU demo model into {model_dir} (once; about a minute)...")
        subprocess.run([sys.executable, "-m", "training", "tiny-model", "--out", str(model_dir),
                        "--warmup-problems", str(demo)], cwd=ROOT, env=env, check=True)
    if demo.exists():
        _manage("load_demo", env=env)


def start_children(env: dict, port: int) -> list[tuple[str, subprocess.Popen]]:
    from webapp import env as envmod

    gpu_workers = os.environ.get("CRUCIBLE_GPU_WORKERS", "1")
    celery = [sys.executable, "-m", "celery", "-A", "webapp", "worker", "--loglevel", "INFO",
              "--prefetch-multiplier", "1", "--without-gossip", "--without-mingle"]
    commands = {
        "worker-gpu": celery + ["-Q", "gpu", "-c", gpu_workers, "-n", "gpu@%h"],
        # -B: the embedded beat (periodic lost-run check, settings.CELERY_BEAT_SCHEDULE).
        "worker-sandbox": celery + ["-Q", "sandbox", "-c", "2", "-n", "sandbox@%h", "-B",
                                    "-s", str(envmod.data_dir() / "celerybeat-schedule")],
        "web": [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "webapp.asgi:application"],
    }
    children = []
    for name, command in commands.items():
        # Own session per child: Ctrl-C reaches only us, and we stop each child's whole group.
        children.append((name, subprocess.Popen(command, cwd=ROOT, env=env, start_new_session=True)))
    return children


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


def main() -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings.local")
    sys.path.insert(0, str(ROOT))
    from webapp import env as envmod
    from webapp.embedded_redis import stop_embedded_redis

    try:
        port = envmod.get_int("PORT", 8000, maximum=65535)
        data_dir = envmod.data_dir()
        redis_url = envmod.redis_url(data_dir)  # starts the embedded server when REDIS_URL is unset
    except (envmod.ConfigurationError, RuntimeError) as exc:
        _say(f"error: {exc}")
        return 2
    env = dict(os.environ, REDIS_URL=redis_url, PYTHONUNBUFFERED="1")
    _say(f"data directory: {data_dir}")
    _say(f"redis: {redis_url}")
    children: list = []
    stopping = False

    def on_signal(signum, frame):
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        prepare(env)
        if stopping:
            return 130
        children = start_children(env, port)
        _say(f"Crucible is up: http://127.0.0.1:{port}/  (Ctrl-C stops everything)")
        password_file = data_dir / "admin-password.txt"
        if password_file.exists():
            _say(f"log in as admin; the password is in {password_file}")
        while not stopping:
            for name, proc in children:
                if proc.poll() is not None:
                    _say(f"{name} exited with status {proc.returncode}; stopping")
                    stopping = True
            time.sleep(0.5)
    except subprocess.CalledProcessError as exc:
        _say(f"error: {' '.join(map(str, exc.cmd))} failed with status {exc.returncode}")
        return 1
    finally:
        _say("stopping...")
        stop_children(children)
        stop_embedded_redis()
        _say("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
