"""Which models a web user may name, and what each name means on this server (DESIGN.md "Web").

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

import re
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from training.config import ConfigError, load_config

from .checkpoints import resolve_checkpoint_dir
from .models import Run

FIELD = "model.name_or_path"
MODELS_PREFIX = "models/"
WEB_DEFAULT_MODEL = "models/tiny"
# The hub's repo id rule (huggingface_hub.validate_repo_id), narrowed to org/name as DESIGN.md asks.
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


def checkpoint_reference(name: str) -> tuple[int, int] | None:
    """``(run_id, step)`` of a ``run:<id>/step-<n>`` name, else None (whoever owns the run)."""
    match = _CHECKPOINT.fullmatch(name)
    return (int(match[1]), int(match[2])) if match else None


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
    target = (root / relative).resolve()
    if target == root or not target.is_relative_to(root) or not (target / "config.json").is_file():
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
