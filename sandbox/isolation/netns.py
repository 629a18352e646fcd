"""Network namespaces: an empty one, made once and reused by one-shot (cold) sandboxes in turn.

bubblewrap gives every warm sandbox a fresh network namespace of its own; making and destroying one
is the costliest part of a sandbox start, so a cold sandbox borrows an `EmptyNetns` instead (see the
process backend's `Home` for why that is sound).
"""

from __future__ import annotations

import os

from .linux import libc, libc_error


CLONE_NEWNET = 0x40000000


def _setns(fd: int, what: str) -> None:
    if libc().setns(fd, CLONE_NEWNET) != 0:
        raise libc_error(f"setns into {what}")


class EmptyNetns:
    """A network namespace created once by this (root) process and kept by a file descriptor: it is
    owned by the host's initial user namespace, so nothing inside a sandbox's own user namespace
    (which is all a payload ever has, and without capabilities) may configure it. No interface in
    it is up, not even `lo`. Python 3.11 has no os.unshare/os.setns: libc through ctypes.

    Namespaces are per thread: `entered()` moves only the calling thread in (a process it then
    starts is created in the namespace) and back out."""

    def __init__(self) -> None:
        own = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        try:
            if libc().unshare(CLONE_NEWNET) != 0:
                raise libc_error("unshare(CLONE_NEWNET)")
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
