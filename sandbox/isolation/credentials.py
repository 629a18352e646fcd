"""Credentials: who a sandbox is started as (uid/gid 65534, no groups, no capabilities).

A root caller drops to the sandbox user for the start only, three ways from cheapest: the starting
thread's own credentials (`ThreadCredentials`, bubblewrap only), util-linux `setpriv`, or
Popen(user=...).
"""

from __future__ import annotations

import errno
import os
import shutil
import sys
import threading

from .linux import libc, libc_error


NOBODY = 65534
"""The sandbox user and group (`nobody`/`nogroup`)."""


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
        if libc().syscall(nr, *args) != 0:
            raise libc_error("syscall")

    def __enter__(self) -> "ThreadCredentials":
        self.resuid, self.resgid, self.groups = os.getresuid(), os.getresgid(), os.getgroups()
        cls = ThreadCredentials
        with cls._lock:  # any credential change clears the process's dumpable flag
            if cls._dropped == 0:
                cls._dumpable = libc().prctl(3, 0, 0, 0, 0)  # PR_GET_DUMPABLE
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
                libc().prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE


def _has_ambient_capabilities() -> bool:
    try:
        with open("/proc/thread-self/status") as f:
            for line in f:
                if line.startswith("CapAmb:"):
                    return int(line.split()[1], 16) != 0
    except (OSError, ValueError):
        return True  # cannot tell: assume the worst
    return False
