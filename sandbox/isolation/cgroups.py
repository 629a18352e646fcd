"""cgroups (v1 as on this host; v2 unified also handled): one pids + memory group per worker.

Only when running as root: `CgroupRoot` is this process's own `crucible-<pid>` group, and each worker
gets a `Cgroup` under it that bounds its processes and memory, reports the memory peak and OOM
kills, and finds any process that outlives an execution.
"""

from __future__ import annotations

import glob
import os
import signal
import threading
import time


def _own_cgroup(controller: str) -> tuple[str, str] | None:
    """(mount point, our own cgroup path) for a v1 controller, or for v2 ('', path)."""
    try:
        lines = open("/proc/self/cgroup").read().splitlines()
    except OSError:
        return None
    for line in lines:
        hid, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            mount = f"/sys/fs/cgroup/{controller}"
            if os.path.isdir(mount):
                return mount, path
    for line in lines:
        if line.startswith("0::"):
            mount = "/sys/fs/cgroup" if os.path.exists("/sys/fs/cgroup/cgroup.controllers") else \
                "/sys/fs/cgroup/unified"
            if os.path.exists(os.path.join(mount, "cgroup.controllers")):
                ctrls = open(os.path.join(mount, "cgroup.controllers")).read().split()
                if controller in ctrls:
                    return mount, line[3:]
    return None


class CgroupRoot:
    """This process's own `crucible-<pid>` cgroups (nested under our cgroup, so any limit placed on
    us still applies); workers get children of it."""

    _lock = threading.Lock()
    _instance: "CgroupRoot | None" = None

    def __init__(self) -> None:
        self.dirs: dict[str, str] = {}
        self.v2: dict[str, bool] = {}
        self.errors: dict[str, str] = {}
        self.counter = 0
        for controller in ("pids", "memory"):
            found = _own_cgroup(controller)
            if not found:
                self.errors[controller] = "controller not mounted"
                continue
            mount, path = found
            _remove_stale(os.path.join(mount, path.lstrip("/")))
            base = os.path.join(mount, path.lstrip("/"), f"crucible-{os.getpid()}")
            try:
                os.makedirs(base, exist_ok=True)
                v2 = os.path.exists(os.path.join(mount, "cgroup.controllers"))
                if v2:  # children may use the controllers only once the parent delegates them
                    with open(os.path.join(base, "cgroup.subtree_control"), "w") as f:
                        f.write(f"+{controller}")
                self.dirs[controller] = base
                self.v2[controller] = v2
            except OSError as e:
                self.errors[controller] = f"cannot create {base}: {e.strerror}"
        import atexit
        atexit.register(self.cleanup)

    @classmethod
    def get(cls) -> "CgroupRoot":
        with cls._lock:
            if cls._instance is None:
                cls._instance = CgroupRoot()
            return cls._instance

    def new_group(self) -> "Cgroup":
        with self._lock:
            self.counter += 1
            n = self.counter
        return Cgroup(self, f"w{n}")

    def cleanup(self) -> None:
        for base in self.dirs.values():
            for sub in glob.glob(os.path.join(base, "w*")):
                _kill_and_rmdir(sub)
            try:
                os.rmdir(base)
            except OSError:
                pass


def _remove_stale(parent: str) -> None:
    """Remove `crucible-<pid>` cgroups left by processes that were killed before their cleanup."""
    for base in glob.glob(os.path.join(parent, "crucible-*")):
        try:
            owner = int(base.rsplit("-", 1)[1])
        except ValueError:
            continue
        if os.path.exists(f"/proc/{owner}"):
            continue
        for sub in glob.glob(os.path.join(base, "w*")):
            if not _procs(sub):
                try:
                    os.rmdir(sub)
                except OSError:
                    pass
        try:
            os.rmdir(base)
        except OSError:
            pass


def _listing(path: str) -> list[int] | None:
    """The pids in a cgroup's cgroup.procs, or None when it cannot be read."""
    try:
        with open(os.path.join(path, "cgroup.procs")) as f:
            return [int(x) for x in f.read().split()]
    except (OSError, ValueError):
        return None


def _procs(path: str) -> list[int]:
    return _listing(path) or []


def _kill_and_rmdir(path: str, wait_s: float = 2.0) -> bool:
    end = time.monotonic() + wait_s
    while True:
        for pid in _procs(path):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.rmdir(path)
            return True
        except FileNotFoundError:
            return True
        except OSError:
            if time.monotonic() > end:
                return False
            time.sleep(0.01)


class Cgroup:
    """One worker's pids + memory cgroups."""

    def __init__(self, root: CgroupRoot, name: str):
        self.paths: dict[str, str] = {}
        self.v2 = root.v2
        self.errors = dict(root.errors)
        for controller, base in root.dirs.items():
            path = os.path.join(base, name)
            try:
                os.mkdir(path)
                self.paths[controller] = path
            except OSError as e:
                self.errors[controller] = f"cannot create {path}: {e.strerror}"
        self._oom_before = 0
        self._limits: dict[str, int] = {}  # what set_limits last wrote successfully
        # Files read or written at every execution stay open (pread/pwrite at offset 0 re-reads
        # or rewrites a cgroup file): an open + close less each time.
        self._fds: dict[tuple[str, str, int], int] = {}

    @property
    def features(self) -> list[str]:
        return [f"cgroup_{c}" for c in ("pids", "memory") if c in self.paths]

    def _write(self, controller: str, fname: str, value: str) -> bool:
        path = self.paths.get(controller)
        if not path:
            return False
        try:
            with open(os.path.join(path, fname), "w") as f:
                f.write(value)
            return True
        except OSError:
            return False

    def _read(self, controller: str, fname: str) -> str:
        path = self.paths.get(controller)
        if not path:
            return ""
        try:
            with open(os.path.join(path, fname)) as f:
                return f.read()
        except OSError:
            return ""

    def _fd(self, controller: str, fname: str, flags: int) -> int | None:
        fd = self._fds.get((controller, fname, flags))
        if fd is None:
            path = self.paths.get(controller)
            if not path:
                return None
            try:
                fd = self._fds[(controller, fname, flags)] = os.open(os.path.join(path, fname),
                                                                      flags | os.O_CLOEXEC)
            except OSError:
                return None
        return fd

    def _hot_read(self, controller: str, fname: str) -> str:
        fd = self._fd(controller, fname, os.O_RDONLY)
        if fd is None:
            return ""
        try:
            chunks = []
            while True:
                b = os.pread(fd, 65536, sum(map(len, chunks)))
                if not b:
                    return b"".join(chunks).decode()
                chunks.append(b)
        except OSError:
            return ""

    def _hot_write(self, controller: str, fname: str, value: str) -> bool:
        fd = self._fd(controller, fname, os.O_WRONLY)
        if fd is None:
            return False
        try:
            os.pwrite(fd, value.encode(), 0)
            return True
        except OSError:
            return False

    def add(self, pid: int) -> None:
        for controller in list(self.paths):
            if not self._hot_write(controller, "cgroup.procs", str(pid)):
                self.errors[controller] = f"cannot move pid {pid} into it"
                _kill_and_rmdir(self.paths.pop(controller), 0.1)

    def set_limits(self, max_pids: int | None, memory_bytes: int | None) -> set[str]:
        """Apply limits; returns the controllers whose limit could NOT be set. A limit that this
        object already wrote successfully is not written again (nothing else writes these files:
        the sandbox sees no cgroupfs); the peak-usage counter is reset every time."""
        failed = set()
        if max_pids is not None and "pids" in self.paths:
            if self._limits.get("pids") != max_pids:
                self._limits.pop("pids", None)
                if self._write("pids", "pids.max", str(max_pids)):
                    self._limits["pids"] = max_pids
                else:
                    failed.add("pids")
        if memory_bytes is not None and "memory" in self.paths:
            ok = self._limits.get("memory") == memory_bytes
            if not ok:
                self._limits.pop("memory", None)
                if self.v2.get("memory"):
                    ok = self._write("memory", "memory.max", str(memory_bytes))
                    self._write("memory", "memory.swap.max", "0")
                else:
                    # memsw must stay >= limit: raise/lower in the order the kernel accepts.
                    ok = self._write("memory", "memory.limit_in_bytes", str(memory_bytes))
                    self._write("memory", "memory.memsw.limit_in_bytes", str(memory_bytes))
                    if not ok:
                        ok = self._write("memory", "memory.limit_in_bytes", str(memory_bytes))
                if ok:
                    self._limits["memory"] = memory_bytes
            if not self.v2.get("memory"):
                self._hot_write("memory", "memory.max_usage_in_bytes", "0")  # peak per execution
            if not ok:
                failed.add("memory")
            self._oom_before = self.oom_kills()
        return failed

    def oom_kills(self) -> int:
        text = self._hot_read("memory", "memory.events" if self.v2.get("memory") else "memory.oom_control")
        for line in text.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0] == "oom_kill":
                return int(parts[1])
        return 0

    def memory_report(self) -> tuple[float, bool]:
        if "memory" not in self.paths:
            return 0.0, False
        fname = "memory.peak" if self.v2.get("memory") else "memory.max_usage_in_bytes"
        try:
            peak = int(self._hot_read("memory", fname) or 0) / (1 << 20)
        except ValueError:
            peak = 0.0
        return peak, self.oom_kills() > self._oom_before

    def procs(self) -> list[int]:
        """Every process in the cgroup (both controllers hold the same ones: a worker joins both
        and its descendants inherit them; a controller it could not join was dropped).

        Read through a fresh descriptor every time: cgroup v1 caches a cgroup.procs listing per
        open file, and re-reading a kept descriptor from offset 0 returned the previous listing
        (seen here: a process added or gone showed up one read late)."""
        controller = "pids" if "pids" in self.paths else "memory" if "memory" in self.paths else None
        if controller is None:
            return []
        return _procs(self.paths[controller])

    def reusable(self) -> bool:
        """Whether a Home may hand these cgroups to its next sandbox: every controller the root
        has is still here, each listing could be read and is empty, and the memory peak is reset
        per execution (v1's max_usage_in_bytes; v2's memory.peak only counts up)."""
        if set(self.paths) != set(CgroupRoot.get().dirs) or any(self.v2.values()):
            return False
        return all(_listing(path) == [] for path in self.paths.values())  # None: unreadable

    def sweep(self, keep: set[int]) -> int:
        """SIGKILL every process in the cgroup except `keep`; returns how many it found."""
        if "pids" in self.paths:  # the usual case costs one pread: nothing but `keep` is left
            try:
                if int(self._hot_read("pids", "pids.current")) <= len(keep):
                    return 0
            except ValueError:
                pass
        found = 0
        for pid in self.procs():
            if pid not in keep:
                found += 1
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        return found

    def destroy(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds = {}
        # A dying pid namespace keeps its cgroup busy for a while: never wait for it here (a cold
        # slot would stall); the janitor thread removes what cannot be removed yet.
        for path in self.paths.values():
            if not _kill_and_rmdir(path, 0):
                _JANITOR.add(path)
        self.paths = {}


class _Janitor:
    """Removes cgroups whose last processes were still exiting (pid-namespace teardown is lazy)."""

    def __init__(self) -> None:
        self.pending: list[str] = []
        self.lock = threading.Lock()
        self.thread: threading.Thread | None = None

    def add(self, path: str) -> None:
        with self.lock:
            self.pending.append(path)
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(target=self._run, daemon=True, name="cgroup-janitor")
                self.thread.start()

    def _run(self) -> None:
        for _ in range(600):
            time.sleep(0.1)
            with self.lock:
                self.pending = [p for p in self.pending if not _kill_and_rmdir(p, 0)]
                if not self.pending:
                    return


_JANITOR = _Janitor()
