"""The run page's "Experiment trackers" card: where a run's TensorBoard files, W&B run and MLflow run are.

Read from the run's config (which trackers it asked for) and ``RUN_DIR/trackers.json``, which the trainer's
``training.tracking.Tracker`` writes as each tracker starts; a tracker that failed and was dropped shows its
``warning`` event. Links are only ever http(s) URLs; local stores are shown as paths with the command that
opens them.
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from training.tracking import TRACKERS_FILE, read_trackers
from webapp import env

from .models import Run, RunEvent

@dataclass
class TrackerRow:
    title: str
    where: str = ""
    """A path on the server, or the run's address on a tracking server."""
    url: str | None = None
    """An http(s) link to open; None where the tracker has no web page for the run (yet)."""
    command: str = ""
    """The shell command that opens or uploads it, where that is how it is reached."""
    note: str = ""
    warnings: list[str] = field(default_factory=list)


def tracker_rows(run: Run) -> list[TrackerRow]:
    """One row per tracker the run's config turns on (none when it turns none on)."""
    tracking = (run.config or {}).get("tracking") or {}
    if not (tracking.get("tensorboard") or tracking.get("wandb") or tracking.get("mlflow")):
        return []
    saved = read_trackers(run.path) if run.run_dir else {}
    warned: dict[str, list[str]] = {}
    for payload in RunEvent.objects.filter(run=run, kind="warning").order_by("seq").values_list("payload", flat=True):
        source = str((payload or {}).get("source", ""))
        if source.startswith("tracking."):
            warned.setdefault(source.removeprefix("tracking."), []).append(str(payload.get("message", "")))
    rows = []
    if tracking.get("tensorboard"):
        rows.append(_tensorboard(run, saved.get("tensorboard")))
    if tracking.get("wandb"):
        rows.append(_wandb(run, tracking["wandb"], saved.get("wandb")))
    if tracking.get("mlflow"):
        rows.append(_mlflow(run, tracking["mlflow"], saved.get("mlflow")))
    for row, name in zip(rows, [n for n in ("tensorboard", "wandb", "mlflow") if tracking.get(n)]):
        row.warnings = warned.get(name, [])
    return rows


def _pending(title: str) -> TrackerRow:
    return TrackerRow(title, note=f"appears when the trainer starts ({TRACKERS_FILE} in the run's directory)")


def _tensorboard(run: Run, saved: dict | None) -> TrackerRow:
    if not isinstance(saved, dict):
        return _pending("TensorBoard")
    path = run.path / str(saved.get("dir", "tensorboard"))
    url = env.read("CRUCIBLE_TENSORBOARD_URL")  # where `make tensorboard` serves every run's files
    return TrackerRow("TensorBoard", where=str(path), url=_http(url),
                      command=f"tensorboard --logdir {shlex.quote(str(path))}",
                      note=f"`make tensorboard` serves every run there; this one is {run.path.name}/{path.name}")


def _wandb(run: Run, config: dict, saved: dict | None) -> TrackerRow:
    if not isinstance(saved, dict):
        return _pending("W&B")
    path = run.path / str(saved.get("dir", "wandb"))
    if saved.get("mode") == "online":
        return TrackerRow("W&B", where=str(saved.get("url") or path), url=_http(saved.get("url")),
                          note=f"project {config.get('project')}, run {saved.get('run_id')}")
    return TrackerRow("W&B", where=str(path), command=f"wandb sync {shlex.quote(str(path))}",
                      note=f"offline run {saved.get('run_id')} (project {config.get('project')}): upload it with "
                           f"this command where WANDB_API_KEY is set")


def _mlflow(run: Run, config: dict, saved: dict | None) -> TrackerRow:
    if not isinstance(saved, dict):
        return _pending("MLflow")
    ids = f"experiment {saved.get('experiment')} ({saved.get('experiment_id')}), run {saved.get('run_id')}"
    if saved.get("store"):
        store = run.path / str(saved["store"])
        command = f"MLFLOW_ALLOW_FILE_STORE=true mlflow ui --backend-store-uri {shlex.quote(store.as_uri())}"
        return TrackerRow("MLflow", where=str(store), note=ids, command=command)
    return TrackerRow("MLflow", where=str(saved.get("url") or config.get("tracking_uri")), url=_http(saved.get("url")),
                      note=ids)


def _http(url: object) -> str | None:
    """``url`` when it is an http(s) URL, so that nothing else (``javascript:``) ever becomes a link."""
    return url if isinstance(url, str) and url.startswith(("http://", "https://")) else None
