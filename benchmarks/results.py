"""Shared helper: rewrite one marked section of benchmarks/RESULTS.md, leaving the others alone.

A section is the text between ``<!-- NAME -->`` and ``<!-- /NAME -->`` (markers included). Each
benchmark owns its own NAME, so benchmarks written by different people never overwrite each other::

    from benchmarks.results import update_section
    update_section("train-step-bench", "## Training step\n\n| ... |")
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from pathlib import Path

RESULTS_PATH = Path(__file__).resolve().parent / "RESULTS.md"
_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]*$")


def update_section(name: str, markdown: str, path: str | Path | None = None) -> Path:
    """Replace the ``name`` section of RESULTS.md with ``markdown`` (append it when absent).

    Creates the file with a ``# Benchmark results`` title when it does not exist. The write goes to a
    temporary file first and is renamed over the old one, so a crash never leaves half a file.
    Returns the path written.
    """
    if not _NAME_RE.match(name):
        raise ValueError(f"section name {name!r}: use lowercase letters, digits and '-' (e.g. 'train-step-bench')")
    path = Path(path) if path is not None else RESULTS_PATH
    begin, end = f"<!-- {name} -->", f"<!-- /{name} -->"
    body = markdown.strip("\n")
    if begin in body or end in body:
        raise ValueError(f"the markdown for section {name!r} must not contain its own markers")
    block = f"{begin}\n{body}\n{end}"
    text = path.read_text() if path.exists() else "# Benchmark results\n"
    i, j = text.find(begin), text.find(end)
    if i >= 0 and j > i:
        text = text[:i] + block + text[j + len(end):]
    elif i >= 0 or j >= 0:
        raise ValueError(f"{path}: section {name!r} has only one of its markers ({begin} / {end}); fix the file by hand")
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".RESULTS.", suffix=".md")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path

