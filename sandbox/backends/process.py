"""The `process` backend: bubblewrap + seccomp + cgroups + rlimits, no daemon needed.

A worker is one bubblewrap sandbox: new user (payload uid/gid 65534, and the sandbox itself started
as host uid 65534 when we are root, so even an escape lands on an unprivileged user), pid, net, mount,
ipc, uts and cgroup namespaces; no new user namespaces inside (`--disable-userns`); a new session (no
terminal to inject into); killed with its parent; a cleared, allow-listed environment; a read-only
root holding only /usr (nothing of /root, /home, /work, /var, the host's /proc; of /etc only the
dynamic loader's cache, localtime and nsswitch.conf); a fresh /proc; a /dev of null, zero, full,
random and urandom; a size-limited tmpfs scratch as the working directory (also /tmp; /dev/shm
links to it, so it is no second writable place); a seccomp filter; its own pids and memory
cgroups. Inside, harness.py's worker is pid 1.

warm mode: a worker serves many executions, forking a fresh child for each and killing every process
of the execution afterwards; it is recycled after `max_executions_per_worker` or any anomaly.
cold mode: one worker per execution, each in fresh namespaces except the network one: a cold
sandbox borrows an empty network namespace from a pool (see `Home` for why that is sound).
Without bubblewrap it still runs (rlimits, cgroups when root, uid nobody) and says so in `isolation`.
"""

from __future__ import annotations

import contextlib
import functools
import json
import marshal
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass

from ..isolation.cgroups import Cgroup, CgroupRoot
from ..isolation.credentials import NOBODY, ThreadCredentials, find_setpriv
from ..isolation.linux import memfd_with
from ..isolation.netns import EmptyNetns, shared_netns_supported
from ..isolation.programs import find_bwrap, find_python
from ..isolation.seccomp import seccomp_bpf
from ..environments import SANDBOX_PATH
from ..limits import Limits
from ..protocol.channel import Channel, Done, ExecIO, FrameReader, WorkerBroken
from .base import PooledExecutor, register

_HARNESS_DIR: str | None = None
_HARNESS_LOCK = threading.Lock()
_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "TMPDIR": "/tmp", "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONIOENCODING": "utf-8",
        # Numeric libraries of an environment (numpy's OpenBLAS...) start one thread per host core
        # otherwise: against the process limit, and nondeterministic timing.
        "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def harness_dir() -> str:
    """A root-owned directory, bound read-only at /opt/crucible in every sandbox, that the
    unprivileged sandbox user can read:

    - harness.py with its bytecode compiled once by the sandbox's interpreter (a worker loads it
      instead of compiling 700 lines at every start: ~5 ms of a cold execution's ~20);
    - etc/: copies of the three /etc files the interpreter and libc read (the sandbox's /etc
      holds symlinks to them: a symlink costs bubblewrap no mount);
    - dev/: the sandbox's /dev (see `_DEV_DEVICES`), when device nodes can be made here.

    Fewer mounts make a faster sandbox: bubblewrap re-reads the whole mount table for every bind."""
    global _HARNESS_DIR
    with _HARNESS_LOCK:
        if _HARNESS_DIR is None or not os.path.exists(os.path.join(_HARNESS_DIR, "harness.py")):
            # Built while only we can enter it (mkdtemp: 0700), opened to others at the end: no
            # one can plant a link for the chmod walk below to follow, whatever our umask.
            d = tempfile.mkdtemp(prefix=f"crucible-harness-{os.getpid()}-")
            _remove_stale_harness_dirs(os.path.dirname(d))
            src = os.path.join(os.path.dirname(os.path.dirname(__file__)), "harness.py")
            dst = os.path.join(d, "harness.py")
            shutil.copyfile(src, dst)
            os.chmod(dst, 0o644)
            try:  # best effort: without the .pyc the interpreter compiles the source itself
                subprocess.run([find_python(), "-I", "-S", "-c", _COMPILE, dst], timeout=60,
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, check=False)
            except (OSError, subprocess.SubprocessError):
                pass
            os.mkdir(os.path.join(d, "etc"))
            for name in _ETC_FILES:
                try:
                    shutil.copyfile(os.path.join("/etc", name), os.path.join(d, "etc", name))
                except OSError:
                    pass  # absent on this host: absent in the sandbox too
            for root, dirs, files in os.walk(d):
                for name in dirs + files:
                    path = os.path.join(root, name)
                    if not os.path.islink(path):  # chmod would follow it
                        os.chmod(path, 0o755 if name in dirs else 0o644)
            _DEV_READY[0] = _make_dev(os.path.join(d, "dev"))
            os.chmod(d, 0o755)
            import atexit
            atexit.register(shutil.rmtree, d, True)
            _HARNESS_DIR = d
        return _HARNESS_DIR


def _remove_stale_harness_dirs(parent: str) -> None:
    """Remove the harness directories of processes that ended without running their atexit
    cleanup (a Celery pool process ends with os._exit; a killed one runs nothing): each name
    carries its owner's pid. Only our own user's real directories, never through a link."""
    import glob
    import stat
    for path in glob.glob(os.path.join(parent, "crucible-harness-*-*")):
        try:
            owner = int(os.path.basename(path).split("-")[2])
            st = os.lstat(path)
        except (ValueError, IndexError, OSError):
            continue
        if owner != os.getpid() and stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() \
                and not os.path.exists(f"/proc/{owner}"):
            shutil.rmtree(path, ignore_errors=True)


_ETC_FILES = ("ld.so.cache", "localtime", "nsswitch.conf")
# The sandbox's /dev: these character devices (all harmless, world read-write on any host), and
# symlinks. No pts/ptmx/tty: a candidate has no terminal. /dev/shm is the scratch directory itself
# (one size limit, wiped with it), never a second writable place.
_DEV_DEVICES = {"null": (1, 3), "zero": (1, 5), "full": (1, 7), "random": (1, 8), "urandom": (1, 9)}
_DEV_LINKS = {"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1",
              "stderr": "/proc/self/fd/2", "shm": "/tmp"}
_DEV_READY = [False]  # harness_dir()/dev holds working device nodes: bind it whole at /dev


def _make_dev(path: str) -> bool:
    """Make `path` the sandbox's /dev: one bind then replaces a mount per device. False (the
    sandbox then binds the host's device nodes one by one) where this process may not make device
    nodes (no CAP_MKNOD) or the filesystem ignores them (mounted nodev)."""
    import stat
    os.mkdir(path)
    os.chmod(path, 0o755)
    for name, target in _DEV_LINKS.items():
        os.symlink(target, os.path.join(path, name))
    try:
        if os.statvfs(path).f_flag & getattr(os, "ST_NODEV", 4):
            return False
        for name, (major, minor) in _DEV_DEVICES.items():
            node = os.path.join(path, name)
            os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(major, minor))
            os.chmod(node, 0o666)
            st = os.stat(node)
            if not stat.S_ISCHR(st.st_mode) or st.st_rdev != os.makedev(major, minor):
                return False
        with open(os.path.join(path, "null"), "wb") as f:  # the node really is usable here
            f.write(b"x")
        return True
    except OSError:
        return False


# Compiles harness.py to __pycache__/ with the interpreter that will load it.
_COMPILE = "import py_compile, sys; py_compile.compile(sys.argv[1], doraise=True)"
# Starts the worker from the compiled module. argv[1] is the harness path (its directory goes on
# sys.path for the import only); the rest are the worker's arguments.
_LOADER = ("import sys; sys.path.insert(0, sys.argv[1].rpartition('/')[0]); import harness; "
           "del sys.path[0]; harness.main(sys.argv[2:])")


def _bwrap_args(bwrap: str, limits: Limits, info_fd: int, seccomp_fd: int | None,
                own_netns: bool = True, site: str | None = None) -> list[str]:
    # an environment's packages, read-only
    args = bwrap_argv(bwrap, limits.scratch_mb, own_netns, [("--ro-bind", site, SANDBOX_PATH)] if site else [])
    args += ["--info-fd", str(info_fd)]
    if seccomp_fd is not None:
        args += ["--seccomp", str(seccomp_fd)]
    return args


def bwrap_argv(bwrap: str, scratch_mb: int, own_netns: bool, binds=()) -> list[str]:
    """The sandbox's bubblewrap command line without per-start descriptors, with `binds` (bubblewrap
    options such as `("--ro-bind", src, dst)`) mounted before the root turns read-only."""
    args = list(_bwrap_base(bwrap, scratch_mb, own_netns, harness_dir(), _DEV_READY[0]))
    at = args.index("--remount-ro")
    args[at:at] = [a for bind in binds for a in bind]
    return args


def start_sandboxed(argv: list[str], *, scratch_mb: int, network: bool, binds=()) -> subprocess.Popen:
    """Start `argv` (a host program path first) in the candidates' bubblewrap sandbox, as the sandbox
    user when we are root: cleared, allow-listed environment, a read-only root of /usr and the
    libraries, no host directory but `binds`, a `scratch_mb` tmpfs at /tmp, and the host's network
    only when `network`. For what must run code we do not trust on the host (environment builds).
    stderr is a pipe, stdout is discarded. OSError when there is no bubblewrap."""
    bwrap = find_bwrap()
    if bwrap is None:
        raise OSError("bubblewrap (bwrap) is not installed")
    launch = _Launch(bwrap_argv(bwrap, scratch_mb, own_netns=not network, binds=binds) + argv, cwd="/", env={},
                     isolation="bwrap", features=[], pass_fds=[])
    return _spawn(launch, None)


@functools.lru_cache(maxsize=64)
def _bwrap_base(bwrap: str, scratch_mb: int, own_netns: bool, hdir: str,
                dev_ready: bool) -> tuple[str, ...]:
    """Everything but the per-start descriptors (made once: it looks at the host's /bin, /lib...)."""
    # --unshare-all is user(-try), ipc, pid, net, uts and cgroup(-try); without `own_netns` the
    # sandbox stays in the network namespace of the thread that starts it (a Home's, see below).
    unshare = ["--unshare-all"] if own_netns else \
        ["--unshare-ipc", "--unshare-pid", "--unshare-uts", "--unshare-cgroup-try"]
    args = [bwrap, *unshare, "--unshare-user", "--disable-userns", "--new-session",
            "--die-with-parent", "--as-pid-1", "--uid", "65534", "--gid", "65534",
            "--hostname", "sandbox", "--clearenv"]
    for k, v in _ENV.items():
        args += ["--setenv", k, v]
    args += ["--ro-bind", "/usr", "/usr"]
    for top in ("bin", "lib", "lib64", "lib32", "libx32", "sbin"):
        path = "/" + top
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    for name in _ETC_FILES:
        if os.path.exists(os.path.join(hdir, "etc", name)):
            args += ["--symlink", f"/opt/crucible/etc/{name}", f"/etc/{name}"]
    args += ["--proc", "/proc"]
    if dev_ready:
        # Root-owned on the host: the payload can neither add to nor change it.
        args += ["--dev-bind", os.path.join(hdir, "dev"), "/dev"]
    else:  # a directory of the root tmpfs (read-only below) and one bind per device
        args += ["--dir", "/dev"]
        for name in _DEV_DEVICES:
            args += ["--dev-bind-try", f"/dev/{name}", f"/dev/{name}"]
        for name, target in _DEV_LINKS.items():
            args += ["--symlink", target, f"/dev/{name}"]
    args += ["--size", str(scratch_mb << 20), "--tmpfs", "/tmp",
             "--ro-bind", hdir, "/opt/crucible",
             "--chdir", "/tmp", "--remount-ro", "/", "--cap-drop", "ALL"]
    return tuple(args)


class Home:
    """The empty network namespace (isolation.netns.EmptyNetns) a one-shot (cold) sandbox borrows
    instead of creating and destroying one per execution (the costliest namespace to make).

    Sound because a Home serves one sandbox at a time, and only ever a sandbox that starts after
    every process of the previous one is gone: the executor lends it when a sandbox starts and
    takes it back once that sandbox's pid 1 has exited (its pidfd says so), and pid 1 of a pid
    namespace finishes exiting only after every other process of the namespace has been
    released. Nothing of an execution outlives its processes in a network namespace: no
    interface is up, and an unprivileged payload, in a user namespace that does not own the netns,
    can configure none (no address, route, firewall rule or sysctl); its sockets, abstract
    AF_UNIX names included, close when its processes die. Each sandbox still gets fresh pid, mount,
    ipc, uts, user and cgroup namespaces and a fresh tmpfs.

    A Home also keeps the pids and memory cgroups its sandboxes run in, on the same terms: they
    go back with it only empty (no process left in them; see Cgroup.reusable for the rest), with
    their limits already written, which saves two mkdir, two rmdir and three writes per cold
    start."""

    def __init__(self, netns: EmptyNetns):
        self.netns = netns
        self.uses = 0
        self.cgroup: Cgroup | None = None

    def close(self) -> None:
        self.netns.close()
        if self.cgroup is not None:
            self.cgroup.destroy()
            self.cgroup = None


@dataclass
class _Launch:
    """How one worker is started (`_bwrap_launch` or `_bare_launch`), for `_spawn`."""

    argv: list[str]
    cwd: str
    env: dict[str, str]
    isolation: str
    features: list[str]
    pass_fds: list[int]
    """Descriptors the worker inherits; our copies are closed once it has started."""
    info_fd: int | None = None
    """Our end of bubblewrap's --info-fd pipe, which reports the sandbox's pid 1."""
    scratch: str | None = None
    """The worker's private scratch directory when there is no bubblewrap (and so no tmpfs)."""


_BWRAP_FEATURES = ("user_ns", "pid_ns", "net_ns", "mount_ns", "ipc_ns", "uts_ns", "read_only_root",
                   "tmpfs_scratch", "clear_env", "new_session")


def _worker_argv(python: str, harness: str, control_fd: int, light: bool) -> list[str]:
    """The worker's own command: the interpreter starting harness.py's compiled worker."""
    return [python, "-I", "-S", "-B", "-c", _LOADER, harness, "worker", str(control_fd)] + \
        (["--light"] if light else [])


def _bwrap_launch(bwrap: str, python: str, limits: Limits, control_fd: int, passed: list[int], *,
                  light: bool, use_seccomp: bool, own_netns: bool, site: str | None = None) -> _Launch:
    """The worker inside a bubblewrap sandbox (the module docstring says what that isolates).
    Descriptors opened here for the worker go on `passed`, which the caller closes."""
    features = list(_BWRAP_FEATURES)
    bpf = seccomp_bpf() if use_seccomp else None
    seccomp_fd = None
    if bpf:
        seccomp_fd = memfd_with(bpf, "crucible-seccomp")
        passed.append(seccomp_fd)
        features.append("seccomp")
    info_r, info_w = os.pipe()
    passed.append(info_w)
    try:
        argv = _bwrap_args(bwrap, limits, info_w, seccomp_fd, own_netns=own_netns, site=site) + \
            _worker_argv(python, "/opt/crucible/harness.py", control_fd, light)
    except BaseException:
        os.close(info_r)
        raise
    return _Launch(argv, cwd="/", env={}, isolation="bwrap", features=features, pass_fds=passed,
                   info_fd=info_r)


def _bare_launch(python: str, control_fd: int, passed: list[int], *, light: bool) -> _Launch:
    """The worker without bubblewrap: the interpreter alone, in a private scratch directory, under
    rlimits (and, when we are root, cgroups and the sandbox user)."""
    scratch = tempfile.mkdtemp(prefix="crucible-scratch-")
    try:
        if os.geteuid() == 0:
            os.chown(scratch, NOBODY, NOBODY)
        os.chmod(scratch, 0o700)
        argv = _worker_argv(python, os.path.join(harness_dir(), "harness.py"), control_fd, light)
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    return _Launch(argv, cwd=scratch, env=dict(_ENV, HOME=scratch, TMPDIR=scratch), isolation="rlimits",
                   features=["clear_env"], pass_fds=passed, scratch=scratch)


def _spawn(launch: _Launch, home: Home | None) -> subprocess.Popen:
    """Start a launch: in `home`'s network namespace when one is lent to a bubblewrap sandbox, and
    as the sandbox user when we are root."""
    argv, kwargs = launch.argv, {}
    with contextlib.ExitStack() as starting:
        if home is not None and launch.isolation == "bwrap":
            launch.features.append("net_ns_reused")
            # bwrap starts in the Home's netns and stays there (entered while still root)
            starting.enter_context(home.netns.entered())
        if os.geteuid() == 0:
            # Started as uid/gid 65534 with no groups and no capabilities, three ways from
            # cheapest: this thread's own credentials (bubblewrap only: see ThreadCredentials),
            # setpriv, Popen(user=) (a full fork of this process).
            if launch.isolation == "bwrap" and ThreadCredentials.supported():
                starting.enter_context(ThreadCredentials(NOBODY, NOBODY))
            elif find_setpriv():
                argv = [find_setpriv(), f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--",
                        *argv]
            else:
                kwargs = {"user": NOBODY, "group": NOBODY, "extra_groups": []}
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, pass_fds=launch.pass_fds, cwd=launch.cwd,
                                env=launch.env, start_new_session=True, **kwargs)


class ProcessWorker(Channel):
    """One started worker and the host ends of its control channel."""

    def __init__(self, limits: Limits, *, use_bwrap: bool = True, use_seccomp: bool = True,
                 use_cgroups: bool = True, light: bool = False, python: str | None = None,
                 home: Home | None = None, site: str | None = None):
        self.limits = limits
        self.home = home
        self.site = site
        """Host directory of the environment's packages this worker has (None: the standard library only)."""
        self.site_inside: str | None = None
        """Where the candidate finds them (SANDBOX_PATH under bubblewrap, else `site` itself)."""
        self.pidfd: int | None = None
        self.executions = 0
        self.closed = False
        self.proc: subprocess.Popen | None = None
        self.cgroup: Cgroup | None = None
        self.scratch: str | None = None
        self._done: Done | None = None
        host, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock = host
        self._frames = FrameReader(host)
        try:
            launch = self._start(child, python or find_python(), find_bwrap() if use_bwrap else None,
                                 light=light, use_seccomp=use_seccomp)
            self.features = self._settle(launch, use_cgroups)
        except BaseException:
            self.close()
            raise

    def _start(self, child: socket.socket, python: str, bwrap: str | None, *, light: bool,
               use_seccomp: bool) -> _Launch:
        """Start the worker process with `child`, its end of the control socket (closed here once
        the worker holds it)."""
        passed = [child.fileno()]  # our copies of the descriptors the worker inherits
        launch = None
        try:
            if bwrap:
                launch = _bwrap_launch(bwrap, python, self.limits, child.fileno(), passed, light=light,
                                       use_seccomp=use_seccomp, own_netns=self.home is None, site=self.site)
                self.site_inside = SANDBOX_PATH if self.site else None
            else:
                launch = _bare_launch(python, child.fileno(), passed, light=light)
                self.scratch = launch.scratch
                self.site_inside = self.site
            self.isolation = launch.isolation
            if os.geteuid() == 0:
                launch.features.append("nobody_user")
            self.proc = _spawn(launch, self.home)
        except BaseException:
            if launch is not None and launch.info_fd is not None:
                os.close(launch.info_fd)
            raise
        finally:
            for fd in passed:
                try:
                    os.close(fd)
                except OSError:
                    pass
            child.detach()
        return launch

    def _settle(self, launch: _Launch, use_cgroups: bool) -> list[str]:
        """Once started: find the worker's pid (pid 1 of the sandbox), put it in its cgroups and
        wait for its `ready`. Returns the features in force."""
        features = launch.features
        self.pid = self.proc.pid
        if launch.info_fd is not None:
            self.pid = self._read_info(launch.info_fd)
            # pid 1 of the sandbox, held by a descriptor: `kill` signals it with no pid-reuse
            # race, and a Home goes back only once it is readable (pid 1 exited, see Home).
            self.pidfd = os.pidfd_open(self.pid)
        if use_cgroups and os.geteuid() == 0:
            features += self._join_cgroups()
        ready = self._recv_frame(timeout=20.0)
        if ready.get("op") != "ready":
            raise WorkerBroken(f"worker said {ready!r} instead of ready")
        self.vsz = int(ready.get("vsz", 0))
        return features + ["rlimits"]

    def _join_cgroups(self) -> list[str]:
        """Put the worker in its pids and memory cgroups (a Home's, when it keeps empty ones with
        their limits written); returns the cgroup features whose limit is in force."""
        home = self.home
        if home is not None and home.cgroup is not None:
            self.cgroup = home.cgroup  # empty: see Home
        else:
            self.cgroup = CgroupRoot.get().new_group()
            if home is not None:
                home.cgroup = self.cgroup
        failed = self.cgroup.set_limits(self.limits.max_processes + 1, None)
        self.cgroup.add(self.pid)
        return [f for f in self.cgroup.features if f[len("cgroup_"):] not in failed]

    def _read_info(self, fd: int) -> int:
        data = b""
        end = time.monotonic() + 20.0
        try:
            while b"}" not in data:
                import select
                if not select.select([fd], [], [], max(0.0, end - time.monotonic()))[0]:
                    raise WorkerBroken("bubblewrap did not start in 20 s")
                chunk = os.read(fd, 4096)
                if not chunk:
                    err = self.proc.stderr.read().decode(errors="replace") if self.proc else ""
                    raise WorkerBroken(f"bubblewrap failed: {err.strip()[:500]}")
                data += chunk
        finally:
            os.close(fd)
        return int(json.loads(data[: data.index(b"}") + 1])["child-pid"])

    # -- control channel ------------------------------------------------------------------------
    def _send(self, obj: dict, fds: list[int] | None = None) -> None:
        body = marshal.dumps(obj)  # the worker reads marshal (no json import in a one-shot worker)
        data = len(body).to_bytes(4, "big") + body
        try:
            if fds:
                socket.send_fds(self.sock, [data], fds)
            else:
                self.sock.sendall(data)
        except OSError as e:
            raise WorkerBroken(f"control channel: {e}") from None

    def _exit_detail(self) -> str:
        if self.proc and self.proc.poll() is not None:
            return self.proc.stderr.read().decode(errors="replace").strip()[:500]
        return ""

    def _recv_frame(self, timeout: float) -> dict:
        return self._frames.recv(timeout, self._exit_detail)

    def ctrl_fd(self) -> int:
        return self.sock.fileno()

    def poll_done(self) -> Done | None:
        self._frames.feed()
        frame = self._frames.take()
        return self._to_done(frame) if frame is not None else None

    def _to_done(self, frame: dict) -> Done:
        if frame.get("op") != "done":
            raise WorkerBroken(f"unexpected worker message {frame.get('op')!r}")
        self._after_execution(frame)
        return Done(ended_by=frame.get("ended_by", "exit"), exit_code=frame.get("exit_code"),
                    signal=frame.get("signal"), cpu_s=float(frame.get("utime", 0)) +
                    float(frame.get("stime", 0)), maxrss_kb=int(frame.get("maxrss_kb", 0)),
                    wiped=int(frame.get("wiped", 0)))

    def wait_done(self, timeout: float) -> Done:
        return self._to_done(self._recv_frame(timeout))

    # -- executions -----------------------------------------------------------------------------
    def before_execution(self, limits: Limits) -> None:
        if self.cgroup is not None:
            # Headroom for the worker's pages that the child dirties copy-on-write.
            failed = self.cgroup.set_limits(limits.max_processes + 1, (limits.memory_mb + 32) << 20)
            for controller in failed:  # never claim a limit that is not in force
                if f"cgroup_{controller}" in self.features:
                    self.features.remove(f"cgroup_{controller}")
                    self.anomaly = f"could not set the {controller} cgroup limit"

    def start_execution(self, mode: str, code: str | None, stdin_data: bytes, limits: Limits) -> ExecIO:
        if self.closed:
            raise WorkerBroken("worker closed")
        if self.scratch is None and limits.scratch_mb != self.limits.scratch_mb:
            raise WorkerBroken("scratch size differs from this worker's")
        mem = limits.memory_mb << 20
        as_bytes = self.vsz + (2 * mem if self.cgroup and "cgroup_memory" in self.features else mem) \
            + (256 << 20)
        header = {"op": "run", "mode": mode, "code": code if mode == "stdio" else None, "site": self.site_inside,
                  "limits": {"cpu_s": limits.time_limit_s, "as_bytes": as_bytes,
                             "fsize_bytes": limits.file_size_mb << 20, "nofile": limits.open_files,
                             "nproc": None}}
        # No input (function problems): /dev/null, opened once, instead of a memfd each time.
        stdin_fd = memfd_with(stdin_data, "stdin") if stdin_data else _devnull()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        to_r = to_w = from_r = from_w = None
        child_fds = [stdin_fd, out_w, err_w]
        if mode == "function":
            to_r, to_w = os.pipe()
            from_r, from_w = os.pipe()
            child_fds += [to_r, from_w]
        header["nfds"] = len(child_fds)
        try:
            self._send(header, child_fds)
        finally:
            for fd in child_fds:
                if fd != _DEVNULL[0]:
                    os.close(fd)
        self.executions += 1
        return ExecIO(stdout=out_r, stderr=err_r, rpc_to_child=to_w, rpc_from_child=from_r)

    def end_execution(self, how: str = "end") -> None:
        self._send({"op": how})

    def _after_execution(self, frame: dict) -> None:
        if self.cgroup is not None:
            keep = {self.pid}
            stray = self.cgroup.sweep(keep)
            if stray:
                self.anomaly = f"{stray} process(es) outlived the execution and were killed"
        if int(frame.get("wiped", 0)) > 10000:
            self.anomaly = "scratch held over 10000 entries"

    anomaly: str | None = None

    def memory_report(self) -> tuple[float, bool]:
        return self.cgroup.memory_report() if self.cgroup else (0.0, False)

    def alive(self) -> bool:
        return not self.closed and self.proc is not None and self.proc.poll() is None

    def close(self) -> None:
        if self.kill():
            self.reap()

    def kill(self) -> bool:
        """SIGKILL the sandbox now (pid 1 of its pid namespace: everything in it dies); False when
        it was already closed. `reap` then waits for it and removes its cgroups."""
        if self.closed:
            return False
        self.closed = True
        try:
            self.sock.close()
        except OSError:
            pass
        if self.proc is not None:
            # pid 1 of the sandbox's pid namespace: everything in it dies with it, and bubblewrap,
            # which waits for it, reaps it and exits (killing bubblewrap too would leave pid 1 a
            # zombie in the cgroups until the host's init got round to it).
            try:
                if self.pidfd is not None:
                    signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
                else:
                    self.proc.kill()
            except OSError:
                pass
        return True

    def reap(self) -> bool:
        """Wait for the sandbox; True once bubblewrap has exited (so has everything in it)."""
        exited = True
        if self.proc is not None:
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                exited = False
                self.proc.kill()
                try:
                    self.proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
            if self.proc.stderr:
                self.proc.stderr.close()
        if self.pidfd is not None:
            import select
            try:  # readable once pid 1 has exited, i.e. once nothing of the sandbox runs
                exited = exited and bool(select.select([self.pidfd], [], [], 5.0)[0])
            finally:
                os.close(self.pidfd)
                self.pidfd = None
        elif self.home is not None:
            exited = False  # never saw pid 1: cannot vouch for the Home
        if self.cgroup is not None:
            homes = self.home is not None and self.home.cgroup is self.cgroup
            if not (homes and exited and self.cgroup.reusable()):  # else it goes back with the Home
                if homes:
                    self.home.cgroup = None
                self.cgroup.destroy()
        if self.scratch:
            shutil.rmtree(self.scratch, ignore_errors=True)
        return exited


@register("process")
class ProcessExecutor(PooledExecutor):
    """Runs candidates in ProcessWorkers. Thread-safe: each thread borrows its own worker."""

    name = "process"

    def start_sandboxed(self, argv: list[str], **how) -> subprocess.Popen:
        return start_sandboxed(argv, **how)

    def __init__(self, mode: str = "warm", *, use_bwrap: bool = True, use_seccomp: bool = True,
                 use_cgroups: bool = True, max_executions_per_worker: int = 500,
                 scratch_mb: int | None = None, reuse_homes: bool = True):
        if mode not in ("warm", "cold"):
            raise ValueError(f"mode={mode!r}: use 'warm' (reused workers) or 'cold' (one per execution)")
        self.mode = mode
        # cold mode: sandboxes borrow a Home (an empty netns) instead of unsharing their own one;
        # see Home for why that is sound. Needs root (setns) and bubblewrap.
        self._use_homes = (reuse_homes and mode == "cold" and use_bwrap
                           and find_bwrap() is not None and shared_netns_supported())
        self._homes: list[Home] = []       # clean, ready to lend
        self._homes_all: set[Home] = set()  # every Home this executor made and has not closed
        self.options = dict(use_bwrap=use_bwrap, use_seccomp=use_seccomp, use_cgroups=use_cgroups)
        self._credentials = os.getresuid()
        self.max_executions = max_executions_per_worker
        self._idle: list[ProcessWorker] = []
        self._all: set[ProcessWorker] = set()
        self._lock = threading.Lock()
        self._closed = False
        # cold mode: fresh sandboxes started ahead of need (each still serves one execution), so
        # starting the next one overlaps the current execution instead of following it.
        self.prefetch = 0
        self._spares: list[ProcessWorker] = []
        self._starting = 0  # spares being started now
        self._spare_cv = threading.Condition(self._lock)
        self._refiller: threading.Thread | None = None
        self._spare_limits = Limits()
        self._reap_queue: list[ProcessWorker] = []  # killed, not yet waited for (see _retire)
        self._reaper: threading.Thread | None = None
        self._reap_cv = threading.Condition(self._lock)
        # bwrap's --die-with-parent is PR_SET_PDEATHSIG, which fires when the *thread* that
        # started it exits: workers are started only from these long-lived threads.
        from concurrent.futures import ThreadPoolExecutor
        self._spawner = ThreadPoolExecutor(max_workers=8, thread_name_prefix="sandbox-spawn")

    supports_environments = True

    def _borrow(self, limits: Limits, site: str | None = None) -> ProcessWorker:
        if self.mode == "warm":
            with self._lock:
                for w in [w for w in self._idle if not (w.alive() and w.limits.scratch_mb == limits.scratch_mb)]:
                    self._idle.remove(w)
                    self._retire(w)
                same = [w for w in self._idle if w.site == site]
                if same:
                    self._idle.remove(same[-1])
                    return same[-1]
                if self._idle:  # one of another environment makes room: the pool keeps its size
                    self._retire(self._idle.pop(0))
        else:
            with self._lock:
                if self._spares and self._spares[-1].limits.scratch_mb == limits.scratch_mb \
                        and self._spares[-1].site == site:
                    w = self._spares.pop()
                    self._spare_cv.notify_all()
                    if w.alive():
                        return w
                    self._retire(w)
        w = self._new_worker(limits, light=self.mode == "cold", site=site)
        with self._lock:
            self._all.add(w)
        return w

    def _new_worker(self, limits: Limits, light: bool, site: str | None = None) -> ProcessWorker:
        if threading.current_thread().name.startswith("sandbox-spawn"):
            return self._start(limits, light, site)
        return self._spawner.submit(self._start, limits, light, site).result()

    def _start(self, limits: Limits, light: bool, site: str | None = None) -> ProcessWorker:
        """Start a worker (on a spawner thread); one-shot ones get a Home when homes are in use."""
        if os.getresuid() != self._credentials:
            # A thread whose credentials could not be restored (ThreadCredentials): fail closed.
            raise WorkerBroken(f"this sandbox-spawn thread runs as {os.getresuid()}, not "
                               f"{self._credentials}: refusing to start sandboxes from it")
        home = self._lease_home() if light else None
        try:
            return ProcessWorker(limits, light=light, home=home, site=site, **self.options)
        except BaseException:
            if home is not None:  # never lent again: nothing vouches for what ran in it
                self._return_home(home, False)
            raise

    def _lease_home(self) -> Home | None:
        if not self._use_homes:
            return None
        with self._lock:
            if self._homes:
                home = self._homes.pop()
                home.uses += 1
                return home
        try:
            home = Home(EmptyNetns())
        except OSError:
            self._use_homes = False  # sandboxes then unshare their own network namespace
            return None
        home.uses = 1
        with self._lock:
            if self._closed:
                home.close()
                raise WorkerBroken("executor closed")
            self._homes_all.add(home)
        return home

    def _return_home(self, home: Home, clean: bool) -> None:
        """Lend `home` again only when the sandbox that had it is known to be entirely gone."""
        with self._lock:
            if clean and not self._closed:
                self._homes.append(home)
                return
            self._homes_all.discard(home)
        home.close()

    def set_prefetch(self, n: int, limits: Limits | None = None) -> None:
        """cold mode: keep `n` unused sandboxes started (typically one per parallel slot)."""
        if self.mode != "cold":
            return
        with self._lock:
            self.prefetch = max(0, n)
            if limits is not None:
                self._spare_limits = limits
            if self.prefetch and self._refiller is None:
                self._refiller = threading.Thread(target=self._refill, daemon=True,
                                                  name="sandbox-prefetch")
                self._refiller.start()
            self._spare_cv.notify_all()

    def _refill(self) -> None:
        # Up to `prefetch` sandboxes start at once (each on a long-lived spawner thread), so the
        # spares keep up when starting one takes longer than an execution.
        while True:
            with self._lock:
                while not self._closed and len(self._spares) + self._starting >= self.prefetch:
                    self._spare_cv.wait()
                if self._closed:
                    return
                limits = self._spare_limits
                self._starting += 1
            try:
                future = self._spawner.submit(self._start, limits, True)
            except RuntimeError:  # the spawner is shut down: we are closing
                with self._lock:
                    self._starting -= 1
                return
            future.add_done_callback(self._spare_started)

    def _spare_started(self, future) -> None:
        try:
            w = future.result()
        except BaseException:
            w = None
            time.sleep(0.5)  # the next borrow starts its own and reports the failure
        with self._lock:
            self._starting -= 1
            self._spare_cv.notify_all()
            if w is None:
                return
            if self._closed:
                w.close()
                return
            self._all.add(w)
            self._spares.append(w)

    def _retire(self, w: ProcessWorker) -> None:
        """Kill `w` at once; waiting for it and removing its cgroups (milliseconds: a v1 memory
        cgroup's rmdir, the namespace's teardown) happen on the reaper thread, off the path of
        the execution that retired it. `close` waits for the reaper."""
        self._all.discard(w)
        if self._closed:
            w.close()
            return
        if not w.kill():
            return
        self._reap_queue.append(w)
        if self._reaper is None or not self._reaper.is_alive():
            self._reaper = threading.Thread(target=self._reap, daemon=True, name="sandbox-reaper")
            self._reaper.start()
        self._reap_cv.notify_all()

    def _reap(self) -> None:
        while True:
            with self._lock:
                while not self._reap_queue:
                    if self._closed:
                        return
                    self._reap_cv.wait()
                w = self._reap_queue.pop(0)
            try:
                exited = w.reap()
            except Exception:  # never let one stuck sandbox stop the others' cleanup
                exited = False
            if w.home is not None:
                # exited: pid 1 is gone; otherwise something of it may still run, and the
                # Home is never lent again.
                self._return_home(w.home, exited)

    def _give_back(self, w: ProcessWorker, healthy: bool) -> None:
        with self._lock:
            if self._keeps(w, healthy):
                self._idle.append(w)
                return
            self._retire(w)

    def warm_up(self, n: int, limits: Limits | None = None) -> None:
        """Start `n` warm workers now (so the first executions do not pay for the start)."""
        if self.mode != "warm":
            return
        limits = limits or Limits()
        futures = [self._spawner.submit(self._start, limits, False) for _ in range(n)]
        ws = [f.result() for f in futures]
        with self._lock:
            self._all.update(ws)
            self._idle.extend(ws)

    def describe(self) -> tuple[str, list[str]]:
        """(isolation, features) that a worker started now would have."""
        w = self._borrow(Limits())
        try:
            return w.isolation, list(w.features)
        finally:
            self._give_back(w, True)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            workers = list(self._all)
            self._all.clear()
            self._idle.clear()
            self._spares.clear()
            self._spare_cv.notify_all()
            refiller = self._refiller
        if refiller is not None:
            refiller.join(timeout=30)
        with self._lock:
            workers += list(self._all)
            self._all.clear()
        for w in workers:
            w.close()
        with self._lock:
            self._reap_cv.notify_all()
            reaper = self._reaper
        if reaper is not None:
            reaper.join(timeout=60)
        with self._lock:
            leftover, self._reap_queue = self._reap_queue, []
        for w in leftover:
            w.reap()
        self._spawner.shutdown(wait=True)
        with self._lock:
            homes, self._homes_all, self._homes = list(self._homes_all), set(), []
        for home in homes:
            home.close()


_DEVNULL = [-1]


def _devnull() -> int:
    if _DEVNULL[0] < 0:
        with _HARNESS_LOCK:
            if _DEVNULL[0] < 0:
                _DEVNULL[0] = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    return _DEVNULL[0]
