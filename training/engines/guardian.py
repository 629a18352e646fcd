"""The engine server's parent: it ends the server's whole process tree when its trainer is gone.

Run by ``VLLMServer.start`` as ``python -I guardian.py FD OWNER_PID GRACE_S -- SERVER_ARGS...`` (stdlib
only, since it runs as a script in isolated mode; ``vllm_server`` also imports it for ``descendants`` and
``OWNER_ENV``, and importing it starts nothing). The trainer keeps the write end of a
pipe whose read end is ``FD`` here and never writes to it, so the read end turns readable (EOF) the
moment the trainer is gone, however it went: SIGKILL included, from whichever thread. The tie is in
place before the server can run:

- the guardian checks its owner first (parent pid and the pipe) and starts nothing when the trainer
  died while it was being spawned;
- the server is forked by this single-threaded process with PR_SET_PDEATHSIG (SIGKILL), so a guardian
  killed outright takes the server along (a death signal set from a thread that later exits fires
  early or, set too late, never: neither can happen here);
- the guardian is a child subreaper, so the server's engine-core and worker processes, orphaned when
  the server dies first, become its children instead of init's, and are ended with the rest;
- the server runs in a process group of its own, which its engine processes share (vLLM never calls
  setsid): SIGTERM to the group, ``GRACE_S`` to end, then SIGKILL to the group and to every remaining
  descendant.

It also ends the tree on SIGTERM (the trainer's ``stop``) and when the server exits by itself; its exit
status is then the server's (128 + N for a signal N). The guardian runs in a session of its own, so the
SIGTERM a supervisor sends the trainer's process group does not end the server under a step in flight.

What a SIGKILL of the guardian and the trainer together leaves (the engine processes, reparented to
init) is ended by ``training.engines.vllm_server.end_orphaned_servers``: every process of the tree
carries ``OWNER_ENV`` = the trainer's pid and start time in its environment.
"""

from __future__ import annotations

import ctypes
import os
import select
import signal
import subprocess
import sys
import time

OWNER_ENV = "CRUCIBLE_ENGINE_OWNER"
"""In the environment of every process of a vLLM server's tree: its trainer's ``pid:start time``."""
PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
POLL_S = 0.5
"""How often the owner's pid is checked besides the pipe (a fork of the trainer that never exec'd may
still hold the pipe's write end; its parent pid changes regardless)."""

_libc = ctypes.CDLL(None, use_errno=True)  # Linux: prctl; the engine server runs on Linux only
_stop_requested = False


def say(message: str) -> None:
    print(f"[crucible engine guardian {os.getpid()}] {message}", file=sys.stderr, flush=True)


def owner_gone(fd: int, owner: int) -> bool:
    if os.getppid() != owner:
        return True
    readable, _, _ = select.select([fd], [], [], 0)
    return bool(readable)


def descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid`` from /proc (a child subreaper's include the orphans it adopted).
    Also the vLLM server's, the sandbox tests' leak check's and the service bench's (stdlib only, so
    importable from anywhere). Each pid once: /proc is read one process at a time, so a pid reused
    meanwhile can show up under a descendant of its own."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(name))
    out: list[int] = []
    seen, stack = {pid}, [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in seen:
                seen.add(child)
                out.append(child)
                stack.append(child)
    return out


def reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def end_tree(server: subprocess.Popen, grace_s: float) -> None:
    """SIGTERM to the server's group, ``grace_s`` for it to exit, then SIGKILL to the group and to every
    descendant until none is left (bounded: SIGKILL cannot be ignored; a process in uninterruptible sleep
    dies when its I/O returns)."""
    if server.poll() is None:
        try:
            os.killpg(server.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            server.wait(grace_s)
        except subprocess.TimeoutExpired:
            say(f"the server did not end within {grace_s:.0f} s of SIGTERM: SIGKILL")
    deadline = time.monotonic() + 60
    while True:
        try:
            os.killpg(server.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        left = descendants(os.getpid())
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        reap()
        if not left or time.monotonic() > deadline:
            if left:
                say(f"processes still there after 60 s of SIGKILL: {left}")
            return
        time.sleep(0.1)


def _on_sigterm(signum, frame) -> None:
    global _stop_requested
    _stop_requested = True


def _server_preexec(guardian: int):
    def preexec() -> None:
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != guardian:  # the guardian died between the fork and the prctl
            os._exit(1)
    return preexec


def main(argv: list[str]) -> int:
    fd, owner, grace_s = int(argv[0]), int(argv[1]), float(argv[2])
    command = argv[4:] if argv[3] == "--" else argv[3:]
    signal.signal(signal.SIGTERM, _on_sigterm)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    if owner_gone(fd, owner):
        say("the trainer was gone before the server started: not starting it")
        return 1
    server = subprocess.Popen(command, stdin=subprocess.DEVNULL, start_new_session=True,
                              preexec_fn=_server_preexec(os.getpid()))
    code = None
    while code is None:
        if _stop_requested:
            say("asked to stop: ending the server and its processes")
            break
        if owner_gone(fd, owner):
            say(f"the trainer (pid {owner}) is gone: ending the server and its processes")
            break
        code = server.poll()
        if code is None:
            select.select([fd], [], [], POLL_S)
    end_tree(server, grace_s)
    if code is None:
        return 0
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
