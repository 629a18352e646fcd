"""Sandbox service replicas for tests: `python -m sandbox serve` in separate processes on loopback."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import urllib.request
from dataclasses import dataclass
from typing import Iterator

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOKEN = "test-token-" + "x" * 20


@dataclass
class Replica:
    """One started replica."""

    url: str
    """Where it listens (http://127.0.0.1:PORT)."""
    proc: subprocess.Popen
    """Its process (kill it to simulate a dead machine)."""

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=30)

    def health(self) -> dict:
        with urllib.request.urlopen(self.url + "/healthz", timeout=10) as resp:
            return json.loads(resp.read())


def start_replica(*args: str, workers: int = 1, token: str = TOKEN, host: str = "127.0.0.1",
                  port: int = 0) -> Replica:
    env = dict(os.environ, CRUCIBLE_SANDBOX_TOKEN=token)
    proc = subprocess.Popen([sys.executable, "-m", "sandbox", "serve", "--host", host, "--port", str(port),
                             "--workers", str(workers), *args], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    line = proc.stdout.readline()
    if not line:
        proc.wait(timeout=30)
        raise RuntimeError(f"sandbox serve exited with {proc.returncode} before listening")
    return Replica(json.loads(line)["serving"], proc)


@contextlib.contextmanager
def replicas(n: int, *args: str, workers: int = 1, hosts: list[str] | None = None,
             port: int = 0, token: str = TOKEN) -> Iterator[list[Replica]]:
    """`n` replicas on loopback; with `hosts`, replica k listens on hosts[k] (127.0.0.x) at `port`."""
    started: list[Replica] = []
    try:
        for k in range(n):
            host = hosts[k] if hosts else "127.0.0.1"
            started.append(start_replica(*args, workers=workers, host=host, port=port, token=token))
        yield started
    finally:
        for r in started:
            if r.proc.poll() is None:
                r.proc.terminate()
                try:
                    r.proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    r.kill()
            r.proc.stdout.close()
