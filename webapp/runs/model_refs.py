"""Which models a web user may name, and what each name means on this server (docs/design.md "Web (webapp/)").

A web user names a model in one of three ways, never by a server path:

- a hub id, ``org/name``, handed to the trainer as it is;
- ``models/<name>``: a model an admin installed under ``settings.MODELS_DIR`` (the tiny model is
  ``models/tiny``), resolved to its real directory, which must lie inside the models directory;
- ``run:<id>/step-<n>``: a checkpoint of one of the user's own runs. A merged or full checkpoint is
  used as it is; an adapter is merged into the model its run trained (that run's base and adapters,
  as its run.yaml gave them to its trainer).

Anything else, another user's run included, is refused with one message that tells nothing about the
server's files. The config a user sees keeps the name; only the trainer's run.yaml gets the resolution.
"""
from __future__ import annotations

import os
import re
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from django.conf import settings

from training.config import MAX_PATH, ConfigError, load_config

from .checkpoints import resolve_checkpoint_dir
from .models import Run

FIELD = "model.name_or_path"
MODELS_PREFIX = "models/"
WEB_DEFAULT_MODEL = "models/tiny"
# The hub's repo id rule (huggingface_hub.validate_repo_id), narrowed to org/name as docs/design.md asks.
_HUB_PART = r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?"
_HUB_ID = re.compile(rf"{_HUB_PART}/{_HUB_PART}")
_CHECKPOINT = re.compile(r"run:([1-9][0-9]{0,17})/step-(0|[1-9][0-9]{0,17})")
_INSTALLED_DEPTH = 2  # models/tiny and models/Qwen/Qwen3.5-9B


@dataclass(frozen=True)
class ResolvedModel:
    """What the trainer loads for a name a user gave."""

    name_or_path: str
    """A hub id or an absolute directory."""
    adapters: tuple[str, ...] = ()
    """Absolute PEFT adapter directories merged into it, in order."""


def resolve_model(name: str, user) -> ResolvedModel:
    """The trainer's model for ``name`` as ``user`` sent it; ConfigError naming ``model.name_or_path``."""
    if len(name) > MAX_PATH or not name.isprintable():  # control characters, lone surrogates
        raise refusal()
    if name.startswith(MODELS_PREFIX):
        directory = installed_model_dir(name[len(MODELS_PREFIX):])
        if directory is None:
            raise refusal()
        return ResolvedModel(str(directory))
    checkpoint = _CHECKPOINT.fullmatch(name)
    if checkpoint:
        return resolve_checkpoint(int(checkpoint[1]), int(checkpoint[2]), user)
    if is_hub_id(name):
        return ResolvedModel(name)
    raise refusal()


def check_model_field(model, user) -> str:
    """``model`` as ``user`` named it in a probe's or an evaluation's ``model`` field, stripped; ConfigError
    naming ``model`` when it is missing, one the run form would refuse, or a hub id this server cannot
    load now."""
    model = model.strip() if isinstance(model, str) else ""
    if not model:
        raise ConfigError("model", "is required: a preset or installed model (models/<name>), a hub id "
                                   "(org/name), or a checkpoint of one of your runs as run:<id>/step-<n>")
    try:
        resolve_model(model, user)
    except ConfigError as exc:  # the run form's refusal, under this field's name
        raise ConfigError("model", exc.message) from None
    check_hub_model(model, "model")
    return model


def check_hub_model(name: str, field: str = FIELD) -> None:
    """At launch: a hub id must be in this machine's hub cache, or the hub must be reachable.

    On a machine without network the trainer would otherwise retry the hub for about a minute and
    then fail; this refuses at once and says how to make the model available. Names that are not hub
    ids are left to ``resolve_model``.
    """
    if not names_hub_model(name) or hub_model_cached(name):
        return
    if settings.HF_OFFLINE:
        why = "the hub is switched off on this server (CRUCIBLE_HF_OFFLINE=1)"
    elif not hub_reachable():
        why = f"the hub ({hub_endpoint()}) cannot be reached from this server"
    else:
        return
    # Not the cache's path: it would tell a web user where on the host, and as whom, the server runs.
    raise ConfigError(field, f"{name} is not in this server's hub cache and {why}: "
                             "an admin can download it there first (README: 'Hub models without network'), "
                             "or name a model installed under models/")


def hub_cache_dir() -> Path:
    """Where the hub client of this machine keeps its downloads (read from the environment each time)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME", "~/.cache"), "huggingface")
    return Path(home).expanduser() / "hub"


def hub_model_cached(name: str) -> bool:
    """Whether the hub cache holds a snapshot of ``name`` with its config.json (what loading needs first)."""
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(name, "config.json", cache_dir=hub_cache_dir())
    except (OSError, ValueError):
        return False
    return isinstance(found, str)


def hub_endpoint() -> str:
    return os.environ.get("HF_ENDPOINT") or "https://huggingface.co"


_REACHABLE_TTL_S = 60.0
_reachable: tuple[float, bool] | None = None


def hub_reachable(timeout_s: float = 3.0) -> bool:
    """Whether a TCP connection to the hub opens (remembered for a minute, so launches stay quick)."""
    global _reachable
    if _reachable is not None and time.monotonic() - _reachable[0] < _REACHABLE_TTL_S:
        return _reachable[1]
    url = urlsplit(hub_endpoint())
    try:
        socket.create_connection((url.hostname or "", url.port or (80 if url.scheme == "http" else 443)),
                                 timeout=timeout_s).close()
        ok = True
    except (OSError, ValueError):
        ok = False
    _reachable = (time.monotonic(), ok)
    return ok


def checkpoint_reference(name: str) -> tuple[int, int] | None:
    """``(run_id, step)`` of a ``run:<id>/step-<n>`` name, else None (whoever owns the run)."""
    match = _CHECKPOINT.fullmatch(name)
    return (int(match[1]), int(match[2])) if match else None


def names_hub_model(name: str) -> bool:
    """Whether ``name`` as a web user sends it means a hub model (``models/x`` is an installed one)."""
    return not name.startswith(MODELS_PREFIX) and is_hub_id(name)


def is_hub_id(name: str) -> bool:
    return bool(_HUB_ID.fullmatch(name)) and ".." not in name and "--" not in name


def refusal() -> ConfigError:
    """The one answer for every name that is not allowed, whatever exists on the server under it."""
    installed = ", ".join(MODELS_PREFIX + n for n in installed_models()) or "none"
    return ConfigError(FIELD, "must be a hub id (org/name), a model installed under models/ "
                              f"(installed: {installed}), or a checkpoint of one of your runs as run:<id>/step-<n>")


def installed_model_dir(relative: str) -> Path | None:
    """MODELS_DIR/relative as a real model directory inside MODELS_DIR (symlinks resolved), else None."""
    parts = relative.split("/")
    if any(p in ("", ".", "..") for p in parts) or "\\" in relative or "\x00" in relative:
        return None
    root = Path(settings.MODELS_DIR).resolve()
    try:
        target = (root / relative).resolve()
        if target == root or not target.is_relative_to(root) or not (target / "config.json").is_file():
            return None
    except (OSError, ValueError):  # a part longer than the file system allows, a lone surrogate
        return None
    return target


def installed_models() -> list[str]:
    """Names (relative to MODELS_DIR) of the model directories an admin installed, sorted."""
    root = Path(settings.MODELS_DIR)
    found: list[str] = []
    level = [root]
    for _ in range(_INSTALLED_DEPTH):
        level = sorted(d for parent in level if parent.is_dir() for d in parent.iterdir() if d.is_dir())
        for d in level:
            relative = d.relative_to(root).as_posix()
            if installed_model_dir(relative) is not None:
                found.append(relative)
    return sorted(found)


def resolve_checkpoint(run_id: int, step: int, user) -> ResolvedModel:
    """Checkpoint ``step`` of the user's own run ``run_id``; another user's run is refused like a bad path."""
    run = Run.objects.filter(pk=run_id, owner=user).first() if user is not None else None
    if run is None:
        raise refusal()
    candidates = list(run.checkpoints.filter(step=step))
    if not candidates:
        steps = sorted(set(run.checkpoints.values_list("step", flat=True)))
        have = ", ".join(map(str, steps)) if steps else "none yet"
        raise ConfigError(FIELD, f"your run {run.pk} has no checkpoint at step {step} (its checkpoints: {have})")
    # At the last step a run may hold an adapter and its merged export: the merged one is used as it is.
    checkpoint = min(candidates, key=lambda c: c.kind == "adapter")
    try:
        directory = resolve_checkpoint_dir(run, checkpoint.path).resolve()
        trained = load_config(run.path / "run.yaml").model if checkpoint.kind == "adapter" else None
    except (OSError, ConfigError):
        raise ConfigError(FIELD, f"checkpoint step-{step} of your run {run.pk} is no longer on disk") from None
    if trained is None:
        return ResolvedModel(str(directory))
    return ResolvedModel(trained.name_or_path, (*trained.adapters, str(directory)))
