"""Experiment trackers: the run's events, also logged to TensorBoard, Weights & Biases and MLflow.

``Tracker`` is one fan-out the trainer's ``EventWriter`` hands every event it writes (``observe``); each
tracker the ``tracking`` config section turns on is a ``Backend`` that turns those events into its own
calls (docs/design.md "Experiment trackers"):

- ``start``: the run config as hyper-parameters (flattened to dotted keys: ``ppo.clip_range``) and as a
  whole (a ``config`` text / file);
- ``step``: every metric of the step (keys of training/metrics.py) at that step;
- ``eval``: the held-out results at their step, as ``eval/<split>/pass@1``, ``eval/<split>/pass@<k>``
  (MLflow spells ``@`` as ``_at_``: its metric names allow no ``@``);
- ``done``: the last checkpoint the run wrote (its Hugging Face files, not the optimizer state) as an
  artifact where the tracker has artifacts (a W&B ``model`` artifact, MLflow run artifacts: hard links in
  a file store inside the run's directory), then the
  tracker's run is closed with the run's status.

Where each tracker's run is goes to ``RUN_DIR/trackers.json`` (``TRACKERS_FILE``; the web app links it from
the run page, and a resumed run continues the same W&B / MLflow run from it).

Logging never fails a run: the first error of a tracker writes one ``warning`` event naming it and the
tracker is dropped for the rest of the run. The libraries are imported only when their tracker is on.
Credentials come from the worker's environment only (``WANDB_API_KEY``, ``MLFLOW_TRACKING_TOKEN``, ...).
"""

from __future__ import annotations

import json
import math
import os
import re
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from training.config import RunConfig, check_tracking_uri
from training.events import Checkpoint, Done, Eval, Event, Start, Step, warning_event

TRACKERS_FILE = "trackers.json"
TENSORBOARD_DIR = "tensorboard"
WANDB_DIR = "wandb"
MLFLOW_STORE = "mlruns"
ARTIFACT_SKIP = ("training_state",)
"""Parts of a checkpoint directory that are resume state, not the exported model: never uploaded."""


class Backend:
    """One tracker. ``open`` imports its library and starts its run; the other hooks log one event each."""

    name = ""
    title = ""

    def __init__(self, config: RunConfig, run_dir: Path, saved: dict):
        self.config, self.run_dir, self.saved = config, run_dir, saved

    def open(self, start: Start) -> dict:
        """Start (or, resuming, continue) the tracker's run; -> what ``trackers.json`` records of it."""
        raise NotImplementedError

    def metrics(self, step: int, values: dict[str, float]) -> None:
        raise NotImplementedError

    def artifact(self, checkpoint: Checkpoint, files: list[Path]) -> None:
        """Log a checkpoint's exported files; trackers without artifacts keep this no-op."""

    def summary(self, values: dict[str, float]) -> None:
        """The run's latest held-out results, where the tracker keeps a summary beside the curves."""

    def close(self, status: str) -> None:
        raise NotImplementedError


class TensorBoard(Backend):
    name, title = "tensorboard", "TensorBoard"

    def open(self, start: Start) -> dict:
        from torch.utils.tensorboard import SummaryWriter
        from torch.utils.tensorboard.summary import hparams

        # A resumed run drops what the steps after its checkpoint had written (they are run again).
        purge = start.resumed_from + 1 if start.resumed_from is not None else None
        self.writer = SummaryWriter(log_dir=str(self.run_dir / TENSORBOARD_DIR), purge_step=purge)
        self.writer.add_text("config", "```\n" + json.dumps(start.config, indent=2) + "\n```", global_step=0)
        exp, ssi, sei = hparams(_hparam_values(start.config), {})
        for summary in (exp, ssi, sei):
            self.writer.file_writer.add_summary(summary)
        self.writer.flush()
        return {"dir": TENSORBOARD_DIR}

    def metrics(self, step: int, values: dict[str, float]) -> None:
        for key, value in values.items():
            self.writer.add_scalar(key, value, global_step=step)
        self.writer.flush()  # the live TensorBoard beside the app shows each step as it ends

    def close(self, status: str) -> None:
        self.writer.close()


class Wandb(Backend):
    name, title = "wandb", "W&B"

    def open(self, start: Start) -> dict:
        import wandb

        cfg = self.config.tracking.wandb
        (self.run_dir / WANDB_DIR).mkdir(parents=True, exist_ok=True)
        settings = wandb.Settings(console="off", silent=True, x_disable_stats=True, disable_git=True,
                                  save_code=False, init_timeout=60.0)
        run_id = self.saved.get("run_id") if start.resumed_from is not None else None
        self.run = wandb.init(project=cfg.project, entity=cfg.entity, mode=cfg.mode, dir=str(self.run_dir),
                              config=start.config, name=self.run_dir.name, id=run_id,
                              resume="allow" if run_id else None, settings=settings, reinit="create_new")
        self.wandb = wandb
        run_dir = Path(self.run.dir).parent  # RUN_DIR/wandb/<offline-|>run-<time>-<id>/files
        url = getattr(self.run, "url", None) if cfg.mode == "online" else None
        return {"mode": cfg.mode, "project": cfg.project, "entity": cfg.entity, "run_id": self.run.id,
                "dir": _relative(run_dir, self.run_dir), "url": url}

    def metrics(self, step: int, values: dict[str, float]) -> None:
        self.run.log(values, step=step)

    def artifact(self, checkpoint: Checkpoint, files: list[Path]) -> None:
        name = re.sub(r"[^A-Za-z0-9_.-]", "-", f"{self.run_dir.name}-{checkpoint.kind}")  # W&B's artifact names
        art = self.wandb.Artifact(name=name, type="model",
                                  metadata={"step": checkpoint.step, "kind": checkpoint.kind, "path": checkpoint.path})
        for path in files:  # immutable: the run directory keeps them, so no staging copy (`wandb sync` reads them)
            art.add_file(str(path), name=path.name, policy="immutable")
        self.run.log_artifact(art, aliases=["latest", f"step-{checkpoint.step}"])

    def summary(self, values: dict[str, float]) -> None:
        self.run.summary.update(values)

    def close(self, status: str) -> None:
        self.run.finish(exit_code=0 if status == "succeeded" else 1)


class Mlflow(Backend):
    name, title = "mlflow", "MLflow"

    def open(self, start: Start) -> dict:
        cfg = self.config.tracking.mlflow
        uri = cfg.tracking_uri or f"file:{MLFLOW_STORE}"
        check_tracking_uri(uri)  # validated with the config; checked again where it is used
        store = None
        if uri.startswith("file:"):
            store = (self.run_dir / uri[len("file:"):]).resolve()
            root = self.run_dir.resolve()
            if store == root or not store.is_relative_to(root):
                raise ValueError(f"tracking.mlflow.tracking_uri {uri!r} is not inside the run's directory")
            # MLflow 3 refuses its file store unless asked: it is what a store inside the run's own directory is.
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
            uri = store.as_uri()
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient(tracking_uri=uri)
        run_id = self.saved.get("run_id") if start.resumed_from is not None else None
        if run_id:
            self.client.update_run(run_id, status="RUNNING")
            experiment_id = self.client.get_run(run_id).info.experiment_id
        else:
            experiment = self.client.get_experiment_by_name(cfg.experiment)
            experiment_id = (experiment.experiment_id if experiment is not None
                             else self.client.create_experiment(cfg.experiment))
            run = self.client.create_run(experiment_id, run_name=self.run_dir.name,
                                         tags={"crucible.model": str(start.model or "")})
            run_id = run.info.run_id
            params = [Param(_mlflow_key(k), _param_text(v)) for k, v in _hparam_values(start.config).items()]
            for i in range(0, len(params), 100):  # MLflow takes at most 100 params per batch
                self.client.log_batch(run_id, params=params[i:i + 100])
            self.client.log_dict(run_id, start.config, "config.json")
        self.run_id, self.store = run_id, store
        url = None if store else f"{uri.rstrip('/')}/#/experiments/{experiment_id}/runs/{run_id}"
        return {"tracking_uri": cfg.tracking_uri or f"file:{MLFLOW_STORE}", "store": _relative(store, self.run_dir)
                if store else None, "experiment": cfg.experiment, "experiment_id": experiment_id,
                "run_id": run_id, "url": url}

    def metrics(self, step: int, values: dict[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        batch = [Metric(_mlflow_key(k), v, now, step) for k, v in values.items()]
        for i in range(0, len(batch), 1000):
            self.client.log_batch(self.run_id, metrics=batch[i:i + 1000])

    def artifact(self, checkpoint: Checkpoint, files: list[Path]) -> None:
        where = f"checkpoint/{checkpoint.kind}"
        linked = self._link_artifacts(files, where) if self.store else False
        if not linked:
            for path in files:
                self.client.log_artifact(self.run_id, str(path), where)

    def _link_artifacts(self, files: list[Path], where: str) -> bool:
        """A file store in the run's directory gets the checkpoint's files as hard links, not copies (MLflow's
        own ``log_artifact`` copies: a 9B model's exported checkpoint twice on the worker's disk); False, with
        nothing left behind, where the filesystem cannot link them (then they are copied)."""
        uri = self.client.get_run(self.run_id).info.artifact_uri
        if not uri.startswith("file:"):
            return False
        target = Path(urllib.parse.unquote(urllib.parse.urlparse(uri).path)) / where
        if not target.resolve().is_relative_to(self.store):
            return False
        target.mkdir(parents=True, exist_ok=True)
        made = []
        try:
            for path in files:
                link = target / path.name
                link.unlink(missing_ok=True)  # a resumed run's earlier checkpoint of this kind
                os.link(path, link)
                made.append(link)
        except OSError:
            for link in made:
                link.unlink(missing_ok=True)
            return False
        return True

    def close(self, status: str) -> None:
        self.client.set_terminated(self.run_id, {"succeeded": "FINISHED", "cancelled": "KILLED"}.get(status, "FAILED"))


BACKENDS: dict[str, type[Backend]] = {cls.name: cls for cls in (TensorBoard, Wandb, Mlflow)}


class Tracker:
    """The trackers a run's config turns on, fed every event the run writes (``observe``).

    ``warn`` writes the warning event of a tracker that failed (``EventWriter.write``). Nothing here
    raises into the run: a tracker whose call raises is dropped after one warning.
    """

    def __init__(self, config: RunConfig, run_dir: str | Path, warn: Callable[[Event], Any]):
        self.run_dir = Path(run_dir)
        self.warn = warn
        tracking = config.tracking
        saved = read_trackers(self.run_dir)
        on = {"tensorboard": tracking.tensorboard, "wandb": tracking.wandb is not None,
              "mlflow": tracking.mlflow is not None}
        self.backends: list[Backend] = [cls(config, self.run_dir, saved.get(name) or {})
                                        for name, cls in BACKENDS.items() if on[name]]
        self.opened: list[Backend] = []
        self.records: dict[str, dict] = {}
        self.last_checkpoints: list[Checkpoint] = []
        self._observing = False

    def observe(self, event: Event, record: dict | None = None) -> None:
        """Log ``event`` to every live tracker (an ``EventWriter`` observer)."""
        if self._observing or not self.backends:  # a warning written from here comes back here
            return
        self._observing = True
        try:
            if isinstance(event, Start):
                for backend in list(self.backends):
                    self._call(backend, self._open, backend, event)
            elif isinstance(event, Step):
                values = _numbers(event.metrics)
                self._each(lambda b: b.metrics(event.step, values))
            elif isinstance(event, Eval):
                values = eval_metrics(event)
                self._each(lambda b: b.metrics(event.step, values))
                self._each(lambda b: b.summary(values))
            elif isinstance(event, Checkpoint):
                if self.last_checkpoints and self.last_checkpoints[-1].step != event.step:
                    self.last_checkpoints = []
                self.last_checkpoints.append(event)
            elif isinstance(event, Done):
                self._finish(event.status)
        finally:
            self._observing = False

    def close(self) -> None:
        """Close every tracker still open (a run that ended without a ``done`` event)."""
        if not self._observing:
            self._finish("failed")

    # ------------------------------------------------------------------------------------- helpers

    def _finish(self, status: str) -> None:
        if status in ("succeeded", "cancelled"):
            for checkpoint in self.last_checkpoints:
                files = exported_files(self.run_dir / checkpoint.path)
                if files:
                    self._each(lambda b: b.artifact(checkpoint, files))
        for backend in list(self.opened):
            self._call(backend, backend.close, status)
        self.opened, self.backends = [], []

    def _open(self, backend: Backend, start: Start) -> None:
        self.records[backend.name] = backend.open(start)
        self.opened.append(backend)
        write_trackers(self.run_dir, self.records)

    def _each(self, call: Callable[[Backend], Any]) -> None:
        for backend in [b for b in self.backends if b in self.opened]:
            self._call(backend, call, backend)

    def _call(self, backend: Backend, fn: Callable, *args: Any) -> None:
        try:
            fn(*args)
        except Exception as exc:  # noqa: BLE001 -- a tracker's failure must never fail the run
            self._drop(backend, exc)

    def _drop(self, backend: Backend, exc: BaseException) -> None:
        if backend not in self.backends:
            return
        self.backends.remove(backend)
        if backend in self.opened:
            self.opened.remove(backend)
            try:
                backend.close("failed")
            except Exception:  # noqa: BLE001 -- closing a broken tracker may fail too; it is dropped anyway
                pass
        text = f"{type(exc).__name__}: {exc}".strip()
        observing, self._observing = self._observing, True
        try:
            self.warn(warning_event(f"tracking.{backend.name}",
                                    f"{backend.title} logging failed and is off for the rest of this run "
                                    f"(the run goes on): {text[:1000]}"))
        except Exception:  # noqa: BLE001 -- the events file itself failing is the trainer's to report
            pass
        finally:
            self._observing = observing


def make_tracker(config: RunConfig, run_dir: str | Path, warn: Callable[[Event], Any]) -> Tracker | None:
    """The run's ``Tracker``, or None when no tracker is on (nothing imported, nothing written)."""
    return Tracker(config, run_dir, warn) if config.tracking.enabled else None


def eval_metrics(event: Eval) -> dict[str, float]:
    """A held-out evaluation as tracker metrics: ``eval/<split>/pass@1``, ``eval/<split>/pass@<k>``, ..."""
    prefix = f"eval/{event.split}"
    values = {f"{prefix}/pass@1": event.pass_at_1, f"{prefix}/pass@1/turn1": event.pass_at_1_turn1}
    values.update({f"{prefix}/pass@{k}": v for k, v in (event.pass_at_k or {}).items() if str(k) != "1"})
    return _numbers(values)


def exported_files(checkpoint_dir: Path) -> list[Path]:
    """The exported model of a checkpoint: its top-level files (the resume state under ``training_state``
    is left out)."""
    if not checkpoint_dir.is_dir():
        return []
    return sorted(p for p in checkpoint_dir.iterdir() if p.is_file() and p.name not in ARTIFACT_SKIP)


def read_trackers(run_dir: str | Path) -> dict:
    """``RUN_DIR/trackers.json``: ``{tracker name: where its run is}``; {} when absent or unreadable."""
    try:
        data = json.loads((Path(run_dir) / TRACKERS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_trackers(run_dir: Path, records: dict) -> None:
    path = run_dir / TRACKERS_FILE
    saved = read_trackers(run_dir)  # a resumed run keeps the record of a tracker it no longer opened
    tmp = path.with_suffix(".json.partial")
    tmp.write_text(json.dumps({**saved, **records}, indent=2), encoding="utf-8")
    tmp.replace(path)


def _numbers(values: dict[str, Any]) -> dict[str, float]:
    """The finite numbers of ``values`` as floats (a non-finite metric is null in the events file)."""
    out = {}
    for key, value in values.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            out[key] = float(value)
    return out


def _hparam_values(config: dict, prefix: str = "") -> dict[str, Any]:
    """The config flattened to ``{dotted key: bool | int | float | str}`` (lists as JSON, null as "null")."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_hparam_values(value, name + "."))
        elif value is None:
            out[name] = "null"
        elif isinstance(value, (bool, int, float, str)):
            out[name] = value
        else:
            out[name] = json.dumps(value)
    return out


def _mlflow_key(key: str) -> str:
    """MLflow's names allow letters, digits, ``_ - . / :`` and spaces: ``pass@1/train`` -> ``pass_at_1/train``."""
    return key.replace("@", "_at_")


def _param_text(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return text if len(text) <= 6000 else text[:5990] + "...(cut)"  # MLflow's limit on a param value


def _relative(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return str(path)
