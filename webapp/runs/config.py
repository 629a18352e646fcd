"""The web's run config: the training defaults a web user starts from, deep merging, and validation.

A run config sent to the web app (the form, ``POST /api/runs``, a preset, a clone) is a partial config
merged over ``default_config()`` and checked by ``training.config`` (a ``ConfigError`` names the dotted
field) plus what only the web checks: the model is a name the user may use (``model_refs``), the
sandbox endpoints, MLflow servers and online W&B entities are this server's, the engine can run here, and
``difficulty.probe`` names a probe (``probe:<id>``), never a path. This module, ``presets`` and ``model_refs`` are the run-config layer:
they import nothing of the services, the supervisor or the problems app, which all build on them.
"""
from __future__ import annotations

import copy
import re

from django.conf import settings

from sandbox.remote import ENDPOINTS_ENV, operator_endpoints
from training.config import ConfigError, RunConfig, check_ceilings, config_from_dict, config_to_dict
from webapp import env

from .engines import check_engine
from .model_refs import WEB_DEFAULT_MODEL, resolve_model

PROBE_REFERENCE = re.compile(r"probe:([1-9][0-9]{0,17})")
"""How a run's ``difficulty.probe`` names a difficulty probe of its problem set."""


def default_config() -> dict:
    """The training defaults, with the model a web user names by default (not the CLI's relative path)."""
    config = config_to_dict(RunConfig())
    config["model"]["name_or_path"] = WEB_DEFAULT_MODEL
    return config


def merge_config(base: dict, overrides: dict) -> dict:
    """``overrides`` deep-merged over ``base``; a value that is not a mapping (``null`` too) replaces."""
    out = copy.deepcopy(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge_config(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def validate_config(config: dict, user) -> dict:
    """The full merged config (as a plain dict) for ``user``'s overrides ``config``; raises ConfigError.

    ``model.name_or_path`` must be a name ``user`` may use (model_refs); the result keeps that name.
    """
    if not isinstance(config, dict):
        raise ConfigError("config", f"must be a mapping of sections (model, sampling, ppo, ...); got {config!r}")
    if "problems" in config:
        raise ConfigError("problems", "is set from the run's problem set; leave it out of the config")
    merged = merge_config(default_config(), config)
    merged["problems"] = "problems.jsonl"  # relative until the run dir exists; create_run sets the real path
    probe = difficulty_probe_name(merged)
    cfg = config_from_dict(merged)
    check_ceilings(cfg, settings.CONFIG_CEILINGS)
    full = config_to_dict(cfg)
    full["difficulty"]["probe"] = probe
    if full["model"]["adapters"]:
        raise ConfigError("model.adapters", "is set from model.name_or_path: name an adapter checkpoint of "
                                            "your run as run:<id>/step-<n>; leave model.adapters out")
    check_sandbox_endpoints(full["sandbox"]["endpoints"])
    check_tracking_server(full["tracking"]["mlflow"])
    check_wandb_entity(full["tracking"]["wandb"])
    resolve_model(full["model"]["name_or_path"], user)
    check_engine(full)
    return full


def check_tracking_server(mlflow: dict | None) -> None:
    """A web user may name only this server's MLflow tracking servers (CRUCIBLE_MLFLOW_SERVERS, comma-separated):
    the worker sends its MLFLOW_TRACKING_TOKEN / password to the server of a run, and shows its errors on the
    run page. A file store (inside the run's directory) is always allowed."""
    uri = (mlflow or {}).get("tracking_uri")
    if not uri or uri.startswith("file:"):
        return
    allowed = [u.rstrip("/") for u in env.read("CRUCIBLE_MLFLOW_SERVERS")]
    if uri.rstrip("/") not in allowed:
        listed = ", ".join(allowed) or "none: CRUCIBLE_MLFLOW_SERVERS is unset"
        raise ConfigError("tracking.mlflow.tracking_uri", f"{uri} is not one of this server's MLflow tracking servers "
                                                          f"({listed}); leave it empty for a file store in the run's "
                                                          "directory")


def check_wandb_entity(wandb: dict | None) -> None:
    """A web run streams to W&B (``mode: online``) only into an entity the operator lists (CRUCIBLE_WANDB_ENTITIES,
    comma-separated), named as ``entity``: the worker's WANDB_API_KEY writes there, and without the list a tenant
    could write into any project the key reaches, another tenant's included. Offline is always allowed."""
    if not wandb or wandb.get("mode") != "online":
        return
    allowed = env.read("CRUCIBLE_WANDB_ENTITIES")
    if wandb.get("entity") in allowed:
        return
    if not allowed:
        raise ConfigError("tracking.wandb.mode", "online W&B is not offered by this server (CRUCIBLE_WANDB_ENTITIES "
                                                 "is unset): use mode: offline, and `wandb sync` the run's files "
                                                 "with your own key")
    raise ConfigError("tracking.wandb.entity", f"{wandb.get('entity')!r} is not one of this server's W&B entities "
                                               f"({', '.join(allowed)}); name one of them, or use mode: offline")


def check_sandbox_endpoints(endpoints: list) -> None:
    """A web user may name only this server's sandbox replicas (CRUCIBLE_SANDBOX_ENDPOINTS): the worker
    sends its sandbox token to every endpoint of a run."""
    allowed = operator_endpoints()
    stray = [u for u in endpoints if u.rstrip("/") not in allowed]
    if stray:
        raise ConfigError("sandbox.endpoints", f"{stray[0]} is not one of this server's sandbox replicas ("
                                               f"{', '.join(allowed) or f'none: {ENDPOINTS_ENV} is unset'}); leave "
                                               "sandbox.endpoints out and runs use the server's own")


def difficulty_probe_name(merged: dict) -> str | None:
    """``difficulty.probe`` as a web user names it: ``probe:<id>`` or null (the problem set's latest
    finished probe, found by ``create_run``), never a path. A null probe under a drop rule becomes a
    stand-in in ``merged`` so that the config validates; the caller puts the name back."""
    difficulty = merged.get("difficulty")
    if not isinstance(difficulty, dict):
        return None
    probe = difficulty.get("probe")
    if probe is not None and not (isinstance(probe, str) and PROBE_REFERENCE.fullmatch(probe)):
        raise ConfigError("difficulty.probe", "names a difficulty probe of the run's problem set as probe:<id>, or "
                                              "null for the set's latest finished probe (never a path)")
    if probe is None and (difficulty.get("drop_unsolved") or difficulty.get("drop_solved")):
        merged["difficulty"] = {**difficulty, "probe": "probe:latest"}
    return probe


def trainer_config(full: dict, user) -> dict:
    """``full`` as the trainer gets it: the model name resolved to a hub id or a server directory."""
    resolved = resolve_model(full["model"]["name_or_path"], user)
    return merge_config(full, {"model": {"name_or_path": resolved.name_or_path,
                                         "adapters": list(resolved.adapters)}})
