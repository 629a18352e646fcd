"""Linux calls the isolation rooms share: libc through ctypes, and memfd files handed to children."""

from __future__ import annotations

import os


_LIBC = None


def libc():
    """The C library through ctypes, for the calls Python 3.11 lacks (setns, unshare, syscall, prctl)."""
    global _LIBC
    if _LIBC is None:
        import ctypes
        _LIBC = ctypes.CDLL(None, use_errno=True)
    return _LIBC


def libc_error(call: str) -> OSError:
    """The OSError for a failed libc call made through ctypes (errno from ctypes' copy)."""
    import ctypes
    e = ctypes.get_errno()
    return OSError(e, f"{call}: {os.strerror(e)}")


def memfd_with(data: bytes, name: str) -> int:
    """A memory-backed file holding `data`, read from its start, to hand to a child as a descriptor."""
    fd = os.memfd_create(name, 0)  # not CLOEXEC: handed to a child
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd
