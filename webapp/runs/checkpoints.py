"""Checkpoint directories: path-safe resolution and a streamed ``.tar.gz`` of a Hugging Face directory.

The archive is produced chunk by chunk (tar headers and file blocks through one zlib stream), so a
merged model of many GiB never sits in memory and the first bytes leave at once.
"""
from __future__ import annotations

import os
import stat
import tarfile
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

CHUNK = 1 << 20
# training.checkpoint.STATE_DIR, spelled out: importing that module would load torch into the web server.
STATE_DIR = "training_state"


def resolve_checkpoint_dir(run, relative: str) -> Path:
    """run_dir/relative as a real directory inside the run dir.

    PermissionError for an absolute path, ``..``, or any symlink on the way (the trainer never writes
    one, so a link can only be an attempt to reach files outside the run); FileNotFoundError when absent.
    """
    if not run.run_dir:
        raise FileNotFoundError("the run has no directory")
    root = Path(run.run_dir).resolve()
    rel = Path(relative)
    if rel.is_absolute() or ".." in rel.parts or not rel.parts:
        raise PermissionError(f"checkpoint path {relative!r} is not a plain path inside the run directory")
    current = root
    for part in rel.parts:
        current = current / part
        try:
            st = os.lstat(current)
        except FileNotFoundError:
            raise FileNotFoundError(f"checkpoint directory {relative!r} does not exist") from None
        if stat.S_ISLNK(st.st_mode):
            raise PermissionError(f"checkpoint path {relative!r} goes through a symbolic link; refusing")
    if not current.is_dir():
        raise FileNotFoundError(f"checkpoint {relative!r} is not a directory")
    if not current.resolve().is_relative_to(root):
        raise PermissionError(f"checkpoint path {relative!r} escapes the run directory")
    return current


def checkpoint_files(directory: Path) -> list[tuple[Path, str]]:
    """(absolute path, archive name) of every regular file; PermissionError on a symlink or special file.

    The trainer's resume state (``training_state/``: optimizer, scheduler, RNG) is not part of the
    Hugging Face directory and is left out: for a full fine-tune it is twice the model's size.
    """
    out = []
    for dirpath, dirnames, filenames in os.walk(directory, followlinks=False):
        if Path(dirpath) == directory and STATE_DIR in dirnames:
            dirnames.remove(STATE_DIR)
        dirnames.sort()
        for name in sorted(dirnames + filenames):
            full = Path(dirpath) / name
            st = os.lstat(full)
            if stat.S_ISLNK(st.st_mode):
                raise PermissionError(f"{full.relative_to(directory)} is a symbolic link; refusing to archive it")
            if name in filenames and not stat.S_ISREG(st.st_mode):
                raise PermissionError(f"{full.relative_to(directory)} is not a regular file")
        for name in sorted(filenames):
            full = Path(dirpath) / name
            out.append((full, f"{directory.name}/{full.relative_to(directory).as_posix()}"))
    return out


def stream_tar_gz(directory: Path, extras: dict[str, bytes] | None = None) -> Iterator[bytes]:
    """Yield a gzip-compressed tar of ``directory`` (top-level folder = its name).

    ``extras``: small files by path relative to ``directory``, added to the archive or taking the
    place of the file of that name on disk.
    """
    files = checkpoint_files(directory)  # raises before the first byte is sent
    extras = dict(extras or {})
    gz = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)  # 16+: gzip container
    for path, arcname in files:
        relative = path.relative_to(directory).as_posix()
        if relative in extras:
            yield gz.compress(_member(arcname, extras.pop(relative), int(os.lstat(path).st_mtime)))
            continue
        st = os.lstat(path)
        info = tarfile.TarInfo(arcname)
        info.size, info.mtime, info.mode = st.st_size, int(st.st_mtime), 0o644
        out = gz.compress(info.tobuf(format=tarfile.PAX_FORMAT))
        sent = 0
        with open(path, "rb") as f:
            while chunk := f.read(CHUNK):
                sent += len(chunk)
                out += gz.compress(chunk)
                if out:
                    yield out
                    out = b""
        if sent != st.st_size:
            raise OSError(f"{path} changed size while being archived")
        padding = (-sent) % tarfile.BLOCKSIZE
        out += gz.compress(b"\0" * padding)
        if out:
            yield out
    for relative, data in sorted(extras.items()):
        yield gz.compress(_member(f"{directory.name}/{relative}", data, int(time.time())))
    yield gz.compress(b"\0" * (2 * tarfile.BLOCKSIZE)) + gz.flush()


def _member(arcname: str, data: bytes, mtime: int) -> bytes:
    """A whole tar member (header, data, padding) for a small in-memory file."""
    info = tarfile.TarInfo(arcname)
    info.size, info.mtime, info.mode = len(data), mtime, 0o644
    return info.tobuf(format=tarfile.PAX_FORMAT) + data + b"\0" * ((-len(data)) % tarfile.BLOCKSIZE)
