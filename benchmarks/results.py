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



def json_from_child(cmd: list[str], what: str, *, tag: str, show_stderr: bool = True) -> dict:
    """Run a benchmark's measuring half, ``cmd + ["--json-out", PATH]``, in a fresh Python process from the
    repository root (no caches, threads or patched functions shared with the last measurement) and return
    the JSON it wrote to PATH. ``what`` names it in the progress line ``[tag] what ...`` and in the error;
    its stderr streams to the terminal, or with ``show_stderr=False`` is kept and its tail put in the error."""
    import json
    import subprocess
    import sys

    fd, name = tempfile.mkstemp(prefix=f"{tag}-", suffix=".json")
    os.close(fd)
    out = Path(name)
    print(f"[{tag}] {what} ...", file=sys.stderr, flush=True)
    try:
        proc = subprocess.run([*cmd, "--json-out", str(out)], cwd=RESULTS_PATH.parent.parent, text=True,
                              stdout=subprocess.PIPE, stderr=None if show_stderr else subprocess.PIPE)
        if proc.returncode != 0:
            why = "; see its stderr above" if show_stderr else f":\n{proc.stderr[-4000:]}"
            raise SystemExit(f"{what} failed (exit {proc.returncode}){why}")
        return json.loads(out.read_text())
    finally:
        out.unlink(missing_ok=True)
