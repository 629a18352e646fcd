"""The engine server's guardian (training/engines/guardian.py) and the sweep of orphaned servers, on a fake
server tree: no vLLM, so every ordering of start, kill and load can be run in seconds.

The fake server stands for ``vllm.entrypoints.openai.api_server``: it "loads" for a moment, then starts an
engine core that starts a worker (as vLLM's EngineCore and Worker). The worker calls setsid (it leaves the
server's process group) and every process ignores SIGTERM: the worst a server tree can do.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from training.engines.guardian import POLL_S, descendants
from training.engines.vllm_server import GRACE_S, end_orphaned_servers

ROOT = Path(__file__).resolve().parents[2]
# After the trainer dies the guardian sees EOF at once (at worst POLL_S later), sends SIGTERM, waits GRACE_S
# for a tree that ignores it, then SIGKILLs; on a loaded machine (the busy loops) starting the guardian's
# interpreter and scheduling its steps takes a few seconds more. Past this bound the tree is leaked.
GONE_WITHIN_S = GRACE_S + 30

FAKE_SERVER = r"""
import os, signal, subprocess, sys, time
token, out, role = sys.argv[1], sys.argv[2], sys.argv[3]
signal.signal(signal.SIGTERM, signal.SIG_IGN)
if role == "server":
    time.sleep(float(sys.argv[4]))  # the model load
    subprocess.Popen([sys.executable, __file__, token, out, "core"])
elif role == "core":
    subprocess.Popen([sys.executable, __file__, token, out, "worker"])
else:
    os.setsid()
open(os.path.join(out, role), "w").write(str(os.getpid()))
while True:
    time.sleep(1)
"""

# The trainer: starts the fake server through the guardian, then dies (SIGKILL, by its own hand, so the
# point is exact) at ``point``: "in-spawn" (a thread kills it while the main thread is in Popen),
# "after-spawn" (the moment spawn returns), "loading" (the server runs, its engine processes not yet),
# "ready" (the whole tree runs). "thread" spawns from a thread that then exits and the trainer lives on.
TRAINER = r"""
import os, signal, sys, threading, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from training.engines.vllm_server import _spawn_guarded
point, fake, token, out, load_s = sys.argv[2:7]
command = [sys.executable, fake, token, out, "server", load_s]
log = open(os.path.join(out, "log"), "ab")

def die():
    os.kill(os.getpid(), signal.SIGKILL)

def wait_for(name):
    while not os.path.exists(os.path.join(out, name)):
        time.sleep(0.01)

if point == "in-spawn":
    threading.Timer(0.002, die).start()
if point == "thread":
    t = threading.Thread(target=lambda: _spawn_guarded(command, env=dict(os.environ), out=log, cwd=Path(out)))
    t.start()
    t.join()
else:
    _spawn_guarded(command, env=dict(os.environ), out=log, cwd=Path(out))
if point == "after-spawn":
    die()
if point == "loading":
    wait_for("server")
    die()
if point == "ready":
    wait_for("worker")
    die()
wait_for("worker")
open(os.path.join(out, "trainer-ready"), "w").close()
while True:
    time.sleep(1)
"""


def _tree(token: str) -> list[int]:
    """Live processes of the fake tree (the guardian's command line carries the token too)."""
    out = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            cmd = (entry / "cmdline").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if token.encode() in cmd and state != "Z":
            out.append(int(entry.name))
    return out


def _wait(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"{what}: not within {timeout_s:.0f} s"
        time.sleep(0.1)


@pytest.fixture
def loaded_machine():
    """Busy loops, more of them than cores, for the test's length: the load under which the old tie failed."""
    n = 2 * (os.cpu_count() or 1) + 2
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    yield
    for proc in loops:
        proc.kill()
        proc.wait()


@pytest.fixture
def fake(tmp_path):
    script = tmp_path / "fake_server.py"
    script.write_text(FAKE_SERVER)
    trainer = tmp_path / "trainer.py"
    trainer.write_text(TRAINER)

    tokens: list[str] = []

    def start(point: str, load_s: float = 1.0) -> tuple[subprocess.Popen, str, Path]:
        token = f"crucible-fake-engine-{uuid.uuid4().hex}"
        tokens.append(token)
        out = tmp_path / token
        out.mkdir()
        proc = subprocess.Popen([sys.executable, str(trainer), str(ROOT), point, str(script), token, str(out),
                                 str(load_s)])
        return proc, token, out

    yield start
    for token in tokens:  # a failed test leaves nothing running either
        for pid in _tree(token):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.mark.parametrize("point", ["in-spawn", "after-spawn", "loading", "ready"])
def test_no_process_of_the_server_tree_outlives_a_trainer_killed_while_it_starts(fake, loaded_machine, point):
    trainer, token, out = fake(point)
    assert trainer.wait(60) == -signal.SIGKILL
    _wait(lambda: not _tree(token), GONE_WITHIN_S, f"the server tree after a SIGKILL at {point!r}")
    if point in ("loading", "ready"):  # the server did run: the tie ended a started tree, not a server never run
        assert (out / "server").exists()
    if point == "ready":
        assert (out / "worker").exists()
        assert "the trainer" in (out / "log").read_text() and "is gone" in (out / "log").read_text()


def test_a_server_spawned_from_a_thread_that_exits_lives_as_long_as_its_trainer(fake, loaded_machine):
    """PR_SET_PDEATHSIG fires when the thread that forked dies: the old tie ended such a server at once."""
    trainer, token, out = fake("thread")
    try:
        _wait(lambda: (out / "trainer-ready").exists() or trainer.poll() is not None, 60, "the tree's start")
        time.sleep(2 * POLL_S)  # two of the guardian's checks of its owner: the tree must still be there
        assert trainer.poll() is None and len(_tree(token)) == 5  # trainer, guardian, server, core, worker
    finally:
        trainer.kill()
        trainer.wait()
    _wait(lambda: not _tree(token), GONE_WITHIN_S, "the server tree after its trainer's SIGKILL")


def test_the_sweep_ends_the_engine_processes_of_a_trainer_killed_with_its_guardian(fake):
    """A SIGKILL of the guardian and the trainer together (the OOM killer, a killed cgroup that spared a
    few) leaves the engine core and worker reparented to init; the sweep on a worker's start ends them,
    and leaves the tree of a trainer still alive alone."""
    dead, dead_token, dead_out = fake("none", load_s=0)
    alive, alive_token, alive_out = fake("none", load_s=0)
    try:
        _wait(lambda: (dead_out / "trainer-ready").exists() and (alive_out / "trainer-ready").exists(), 60,
              "both trees' start")
        pids = {role: int((dead_out / role).read_text()) for role in ("server", "core", "worker")}
        guardian = next(pid for pid in _tree(dead_token)
                        if b"guardian.py" in Path(f"/proc/{pid}/cmdline").read_bytes())
        os.kill(guardian, signal.SIGKILL)
        dead.kill()
        dead.wait()
        # the server dies with its guardian (its death signal); its engine processes are orphaned
        _wait(lambda: pids["server"] not in _tree(dead_token), 30, "the server after its guardian's SIGKILL")
        assert {pids["core"], pids["worker"]} <= set(_tree(dead_token)), "nothing left for the sweep to end"
        ended = end_orphaned_servers()
        assert {pids["core"], pids["worker"]} <= set(ended)
        _wait(lambda: not _tree(dead_token), 10, "the orphaned engine processes after the sweep")
        assert len(_tree(alive_token)) == 5
    finally:
        alive.kill()
        alive.wait()
    _wait(lambda: not _tree(alive_token), GONE_WITHIN_S, "the live trainer's tree after its SIGKILL")


def test_descendants_lists_every_process_of_a_tree_once_and_not_the_root():
    # bash -> (sleep, subshell -> sleep): three descendants, one of them a grandchild.
    tree = subprocess.Popen(["bash", "-c", "sleep 60 & (sleep 60 & wait) & wait"], start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while len(found := descendants(tree.pid)) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(found) == len(set(found)) == 3 and tree.pid not in found, found
        subshells = [pid for pid in found if descendants(pid)]
        assert len(subshells) == 1 and set(descendants(subshells[0])) < set(found)  # the grandchild
    finally:
        os.killpg(tree.pid, signal.SIGKILL)
        tree.wait()
