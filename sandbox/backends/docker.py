"""The `docker` backend: a warm pool of locked-down containers, through the Docker SDK.

Each container runs harness.py's relay worker as its pid 1 and serves many executions (a fresh
forked child each, every process killed after it, scratch wiped), then is recycled. Containers:
`--network none`, read-only root, tmpfs scratch (/tmp, also /dev/shm), pids/memory/cpu limits,
`--cap-drop ALL`, `no-new-privileges`, uid/gid 65534, Docker's default seccomp profile, optional
gVisor (`runtime="runsc"`). A problem environment is an image of its own built on the base image
(sandbox.backends.docker_images), run in exactly such containers. Docker cannot hand file
descriptors into a container, so the worker multiplexes each execution's streams over its attached
stdin/stdout; a relay thread here turns them back into local pipes, and the same host-side protocol
(sandbox.protocol.driver) decides verdicts.
"""

from __future__ import annotations

import json
import marshal
import os
import select
import socket
import subprocess
import threading

from ..limits import Limits
from ..protocol.channel import Channel, Done, ExecIO, FrameReader, WorkerBroken
from .base import PooledExecutor, SandboxUnavailable, register
from .docker_images import EnvironmentImages

HARNESS = os.path.join(os.path.dirname(os.path.dirname(__file__)), "harness.py")
_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "TMPDIR": "/tmp", "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1", "PYTHONIOENCODING": "utf-8",
        # As the process backend: an environment's numeric libraries (numpy's OpenBLAS) would start a
        # thread per host core, against the container's pids limit.
        "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


class RelayChannel(Channel):
    """Host side of a relay worker reached through a byte stream (`read_stream`/`write_stream`).

    A thread demultiplexes the worker's frames into local pipes so drive_execution sees the same
    file descriptors as with the process backend."""

    def __init__(self, read_stream, write_stream, closer, *, isolation: str, features: list[str]):
        self._read_stream = read_stream
        self._write_stream = write_stream
        self._closer = closer
        self.isolation = isolation
        self.features = features
        self.executions = 0
        self.closed = False
        self.site: str | None = None
        """The environment this worker has, as its executor names it (docker: the image tag; the local
        relay: the host directory); None: the standard library only."""
        self.site_inside: str | None = None
        """Where the worker's candidates find it."""
        self.anomaly: str | None = None
        self.oom = False
        self._lock = threading.Lock()
        self._ctrl_host, self._ctrl_relay = socket.socketpair()
        self._sinks: dict[bytes, int] = {}
        self._unsent: dict[int, bytearray] = {}
        self._rpc_to_r: int | None = None
        self._frames = FrameReader(self._ctrl_host, "container worker")
        self._wake_r, self._wake_w = os.pipe()
        self._thread = threading.Thread(target=self._relay, daemon=True, name="sandbox-relay")
        self._thread.start()
        ready = self._recv_frame(60.0)
        if ready.get("op") != "ready":
            self.close()
            raise WorkerBroken(f"worker said {ready!r} instead of ready")

    # -- relay thread ---------------------------------------------------------------------------
    def _relay(self) -> None:
        pending = b""
        try:
            while not self.closed:
                with self._lock:
                    rpc_r = self._rpc_to_r
                    waiting = [fd for fd, buf in self._unsent.items() if buf]
                fds = [self._read_stream.fileno(), self._wake_r] + ([rpc_r] if rpc_r is not None else [])
                ready, writable, _ = select.select(fds, waiting, [], 1.0)
                for fd in writable:
                    self._flush(fd)
                if self._wake_r in ready:
                    os.read(self._wake_r, 4096)
                if rpc_r is not None and rpc_r in ready:
                    try:
                        data = os.read(rpc_r, 1 << 16)
                    except OSError:
                        data = b""
                    if data:
                        self._send({"op": "rpc", "data": data})
                    else:
                        with self._lock:
                            if self._rpc_to_r == rpc_r:
                                os.close(rpc_r)
                                self._rpc_to_r = None
                if self._read_stream.fileno() in ready:
                    chunk = self._read_stream.read_chunk()
                    if chunk is None:
                        continue
                    if not chunk:
                        break
                    pending += chunk
                    while len(pending) >= 5:
                        n = int.from_bytes(pending[1:5], "big")
                        if len(pending) < 5 + n:
                            break
                        kind, payload, pending = pending[:1], pending[5:5 + n], pending[5 + n:]
                        self._deliver(kind, payload)
        except (OSError, ValueError):
            pass
        finally:
            try:
                self._ctrl_relay.close()  # the host sees EOF: worker gone
            except OSError:
                pass

    _MAX_UNSENT = 32 << 20

    def _flush(self, fd: int) -> None:
        """Write what the host side can take now; never block the relay on a reader that stopped."""
        buf = self._unsent.get(fd)
        while buf:
            try:
                n = os.write(fd, buf[: 1 << 16])
            except BlockingIOError:
                return
            except OSError:
                buf.clear()
                return
            del buf[:n]

    def _deliver(self, kind: bytes, payload: bytes) -> None:
        if kind == b"c":
            msg = json.loads(payload)
            if msg.get("op") == "done":
                self.oom = bool(msg.get("oom"))
                with self._lock:
                    sinks, self._sinks = self._sinks, {}
                for fd in sinks.values():
                    self._flush(fd)  # best effort: what the pipe can hold now
                    self._unsent.pop(fd, None)
                    os.close(fd)
            self._ctrl_relay.sendall(len(payload).to_bytes(4, "big") + payload)
            return
        with self._lock:
            fd = self._sinks.get(kind)
        if fd is None:
            return
        buf = self._unsent.setdefault(fd, bytearray())
        if len(buf) < self._MAX_UNSENT:
            buf += payload
        self._flush(fd)

    def _send(self, obj: dict) -> None:
        body = marshal.dumps(obj)
        try:
            self._write_stream(len(body).to_bytes(4, "big") + body)
        except OSError as e:
            raise WorkerBroken(f"container stream: {e}") from None

    # -- Channel --------------------------------------------------------------------------------
    def start_execution(self, mode: str, code: str | None, stdin_data: bytes, limits: Limits) -> ExecIO:
        if self.closed:
            raise WorkerBroken("container closed")
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        from_r, from_w = os.pipe()
        to_r = to_w = None
        if mode == "function":
            to_r, to_w = os.pipe()
        for fd in (out_w, err_w, from_w):
            os.set_blocking(fd, False)
        with self._lock:
            self._sinks = {b"o": out_w, b"e": err_w, b"r": from_w}
            self._rpc_to_r = to_r
        os.write(self._wake_w, b"x")
        mem = limits.memory_mb << 20
        self._send({"op": "run", "mode": mode, "code": code if mode == "stdio" else None,
                    "site": self.site_inside, "stdin": stdin_data, "output_cap": limits.output_limit_bytes,
                    "limits": {"cpu_s": limits.time_limit_s, "as_bytes": 2 * mem + (512 << 20),
                               "fsize_bytes": limits.file_size_mb << 20,
                               "nofile": limits.open_files, "nproc": None}})
        self.executions += 1
        if mode != "function":
            os.close(from_r)
            from_r = None
        return ExecIO(stdout=out_r, stderr=err_r, rpc_to_child=to_w, rpc_from_child=from_r)

    def end_execution(self, how: str = "end") -> None:
        self._send({"op": how})

    def ctrl_fd(self) -> int:
        return self._ctrl_host.fileno()

    def _recv_frame(self, timeout: float) -> dict:
        return self._frames.recv(timeout)

    def _to_done(self, frame: dict) -> Done:
        if frame.get("op") != "done":
            raise WorkerBroken(f"unexpected worker message {frame.get('op')!r}")
        if int(frame.get("wiped", 0)) > 10000:
            self.anomaly = "scratch held over 10000 entries"
        return Done(ended_by=frame.get("ended_by", "exit"), exit_code=frame.get("exit_code"),
                    signal=frame.get("signal"), cpu_s=float(frame.get("utime", 0)) +
                    float(frame.get("stime", 0)), maxrss_kb=int(frame.get("maxrss_kb", 0)),
                    wiped=int(frame.get("wiped", 0)))

    def poll_done(self) -> Done | None:
        self._frames.feed()
        frame = self._frames.take()
        return self._to_done(frame) if frame is not None else None

    def wait_done(self, timeout: float) -> Done:
        return self._to_done(self._recv_frame(timeout))

    def memory_report(self) -> tuple[float, bool]:
        return 0.0, self.oom

    def alive(self) -> bool:
        return not self.closed and self._thread.is_alive()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass
        try:
            self._closer()
        except Exception:
            pass
        self._thread.join(timeout=5)
        for s in (self._ctrl_host,):
            s.close()
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass


class _DockerStream:
    """Reads the attach socket's multiplexed stream (8-byte headers; 1 = stdout, 2 = stderr)."""

    def __init__(self, sock):
        self.sock = sock
        self.raw = b""
        self.stderr = b""

    def fileno(self) -> int:
        return self.sock.fileno()

    def read_chunk(self) -> bytes | None:
        """Our worker's stdout bytes; None when this read held only stderr or a partial header;
        b"" at end of stream."""
        data = self.sock.recv(1 << 16)
        if not data:
            return b""
        self.raw += data
        out = b""
        while len(self.raw) >= 8:
            n = int.from_bytes(self.raw[4:8], "big")
            if len(self.raw) < 8 + n:
                break
            stream, payload, self.raw = self.raw[0], self.raw[8:8 + n], self.raw[8 + n:]
            if stream == 1:
                out += payload
            else:
                self.stderr = (self.stderr + payload)[-4096:]
        return out or None


class _PipeStream:
    """A plain pipe (local relay worker, used by tests of the relay protocol)."""

    def __init__(self, fd: int):
        self.fd = fd

    def fileno(self) -> int:
        return self.fd

    def read_chunk(self) -> bytes:
        return os.read(self.fd, 1 << 16)


def local_relay_channel(python: str = "/usr/bin/python3") -> RelayChannel:
    """A relay worker as a plain local subprocess, NOT isolated: exercises the relay protocol
    (the docker path) on machines without a Docker engine."""
    proc = subprocess.Popen([python, "-I", "-S", "-B", HARNESS, "worker", "--relay", "--light"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True,
                            cwd=_scratch_dir(), env=dict(_ENV))

    def write(data: bytes) -> None:
        proc.stdin.write(data)
        proc.stdin.flush()

    def closer() -> None:
        proc.kill()
        proc.wait(timeout=5)
        proc.stdin.close()
        proc.stdout.close()

    return RelayChannel(_PipeStream(proc.stdout.fileno()), write, closer, isolation="none",
                        features=[])


def _scratch_dir() -> str:
    import tempfile
    return tempfile.mkdtemp(prefix="crucible-relay-")


# --- the docker executor -----------------------------------------------------------------------

@register("docker")
class DockerExecutor(PooledExecutor):
    """Warm pool of locked-down containers; each serves up to `max_executions_per_container`."""

    name = "docker"
    supports_environments = True

    def __init__(self, mode: str = "warm", *, image: str = "python:3.11-slim",
                 runtime: str | None = None, max_executions_per_container: int = 200,
                 cpus: float = 1.0, python: str = "python3", client=None):
        if mode != "warm":
            raise ValueError(f"mode={mode!r}: the docker backend runs a warm pool of containers "
                             "(many executions each, recycled); use mode='warm'")
        try:
            import docker
        except ImportError as e:
            raise SandboxUnavailable(f"the docker SDK is not installed: {e}") from None
        try:
            self.client = client or docker.from_env(timeout=10)
            self.client.ping()
        except Exception as e:
            raise SandboxUnavailable(f"no Docker engine answers: {type(e).__name__}: {e}") from None
        self.mode = mode
        self.image = image
        self.runtime = runtime
        self.cpus = cpus
        self.python = python
        self.max_executions = max_executions_per_container
        self.harness_source = open(HARNESS).read()
        self._idle: list[RelayChannel] = []
        self._all: set[RelayChannel] = set()
        self._lock = threading.Lock()
        self._closed = False
        try:
            self.client.images.get(image)
        except Exception:
            try:
                self.client.images.pull(image)
            except Exception as e:
                raise SandboxUnavailable(f"image {image} is not available: {e}") from None
        self.environments = EnvironmentImages(self.client, image, python)

    @classmethod
    def unavailable(cls) -> str | None:
        try:
            import docker
        except ImportError as e:
            return f"the docker SDK is not installed ({e}): pip install docker"
        try:
            client = docker.from_env(timeout=3)
            try:
                client.ping()
            finally:
                client.close()
        except Exception as e:
            return (f"no Docker engine answers ({type(e).__name__}: {e}); start dockerd or give the worker "
                    "the engine's socket (DOCKER_HOST), or use the process backend")
        return None

    def environment_site(self, env) -> str:
        """The tag of `env`'s image (built on first use, reused while the engine holds it)."""
        return self.environments.image(env)

    def _start(self, limits: Limits, site: str | None = None) -> RelayChannel:
        """A started container of the base image, or of the environment image tagged `site`: the
        packages are part of its read-only root, nothing is bound from the host."""
        from docker.types import Ulimit
        from ..environments import SANDBOX_PATH
        tmpfs_opts = f"rw,nosuid,nodev,size={limits.scratch_mb}m,mode=1777"
        container = self.client.containers.create(
            site or self.image,
            command=[self.python, "-I", "-S", "-B", "-c", self.harness_source, "worker", "--relay"],
            stdin_open=True, tty=False, detach=True, user="65534:65534", working_dir="/tmp",
            environment=dict(_ENV), network_mode="none", read_only=True,
            tmpfs={"/tmp": tmpfs_opts, "/dev/shm": tmpfs_opts}, cap_drop=["ALL"],
            security_opt=["no-new-privileges:true"], pids_limit=limits.max_processes + 1,
            mem_limit=(limits.memory_mb + 64) << 20, memswap_limit=(limits.memory_mb + 64) << 20,
            nano_cpus=int(self.cpus * 1e9), ipc_mode="private",
            ulimits=[Ulimit(name="nofile", soft=limits.open_files, hard=limits.open_files),
                     Ulimit(name="core", soft=0, hard=0),
                     Ulimit(name="fsize", soft=limits.file_size_mb << 20,
                            hard=limits.file_size_mb << 20)],
            runtime=self.runtime, labels={"crucible.sandbox": "1"}, auto_remove=False)
        try:
            sock = container.attach_socket(params={"stdin": 1, "stdout": 1, "stderr": 1,
                                                   "stream": 1})
            raw = getattr(sock, "_sock", sock)
            container.start()
        except Exception:
            container.remove(force=True)
            raise

        def write(data: bytes) -> None:
            raw.sendall(data)

        def closer() -> None:
            try:
                raw.close()
            finally:
                container.remove(force=True)

        features = ["container", "net_none", "read_only_root", "tmpfs_scratch", "cap_drop_all",
                    "no_new_privileges", "nobody_user", "cgroup_pids", "cgroup_memory",
                    "cgroup_cpu", "seccomp", "rlimits"] + (["gvisor"] if self.runtime == "runsc" else [])
        ch = RelayChannel(_DockerStream(raw), write, closer,
                          isolation=f"docker{'/' + self.runtime if self.runtime else ''}",
                          features=features)
        ch.memory_mb = limits.memory_mb
        ch.scratch_mb = limits.scratch_mb
        ch.site, ch.site_inside = site, SANDBOX_PATH if site else None
        return ch

    def _borrow(self, limits: Limits, site: str | None = None) -> RelayChannel:
        with self._lock:
            while self._idle:
                ch = self._idle.pop()
                if ch.alive() and ch.memory_mb == limits.memory_mb and ch.scratch_mb == limits.scratch_mb \
                        and ch.site == site:
                    return ch
                self._all.discard(ch)
                ch.close()
        ch = self._start(limits, site)
        with self._lock:
            self._all.add(ch)
        return ch

    def _give_back(self, ch: RelayChannel, healthy: bool) -> None:
        with self._lock:
            if self._keeps(ch, healthy):
                self._idle.append(ch)
                return
            self._all.discard(ch)
        ch.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            chans = list(self._all)
            self._all.clear()
            self._idle.clear()
        for ch in chans:
            ch.close()


class LocalRelayExecutor(DockerExecutor):
    """The docker backend's protocol with local, unisolated relay workers: for testing the relay
    path where no Docker engine runs. Not registered as a backend (it isolates nothing)."""

    name = "relay-local"

    def __init__(self, mode: str = "warm", max_executions_per_container: int = 200):
        self.mode = mode
        self.max_executions = max_executions_per_container
        self._idle, self._all = [], set()
        self._lock = threading.Lock()
        self._closed = False

    def environment_site(self, env) -> str:
        return PooledExecutor.environment_site(self, env)  # the host's build: no images without an engine

    def start_sandboxed(self, argv: list[str], **how):
        from .process import start_sandboxed
        return start_sandboxed(argv, **how)

    def _start(self, limits: Limits, site: str | None = None) -> RelayChannel:
        ch = local_relay_channel()
        ch.memory_mb, ch.scratch_mb = limits.memory_mb, limits.scratch_mb
        ch.site = ch.site_inside = site  # no container: the host directory itself
        return ch
