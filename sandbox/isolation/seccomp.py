"""The seccomp filter every bubblewrap sandbox runs under (compiled once with pyseccomp).

Allowed by default; denied: debugging other processes, namespaces and mounts, kernel surfaces, every
socket family but AF_UNIX, terminal injection, new namespaces through clone flags.
"""

from __future__ import annotations

import errno
import os
import threading

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
# CLONE_NEWUSER, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWPID, CLONE_NEWNET, CLONE_NEWNS, CLONE_NEWCGROUP
_NEW_NAMESPACE_FLAGS = (0x10000000, 0x04000000, 0x08000000, 0x20000000, 0x40000000, 0x00020000, 0x02000000)
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
            for flag in _NEW_NAMESPACE_FLAGS:
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
