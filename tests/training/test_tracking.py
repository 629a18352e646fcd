"""Experiment trackers (training/tracking.py): a real run logs to TensorBoard, W&B (offline) and MLflow (file
store), and what it logged is read back with each library's own reader; a broken tracker costs one warning."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.parse
from pathlib import Path

import pytest

from tests.training.conftest import tiny_run_config
from training import metrics as metric_registry
from training.config import ConfigError, config_from_dict, config_to_dict, json_schema
from training.events import parse_event, read_events
from training.tracking import TRACKERS_FILE, read_trackers
from training.trainer import train

ALL_ON = {"tensorboard": True, "wandb": {"project": "crucible-test", "mode": "offline"},
          "mlflow": {"experiment": "crucible tests"}}


@pytest.fixture
def no_network_trackers(monkeypatch, tmp_path):
    """No tracker may reach a server or the user's home: W&B's own settings and caches go under tmp_path."""
    for key in ("WANDB_API_KEY", "WANDB_BASE_URL", "WANDB_MODE", "MLFLOW_TRACKING_URI"):
        monkeypatch.delenv(key, raising=False)
    for key, sub in (("WANDB_CONFIG_DIR", "wandb-config"), ("WANDB_CACHE_DIR", "wandb-cache"),
                     ("WANDB_DATA_DIR", "wandb-data")):
        monkeypatch.setenv(key, str(tmp_path / sub))
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")


# ---- config ------------------------------------------------------------------------------------------------


def test_trackers_are_off_by_default_and_round_trip():
    cfg = config_from_dict({})
    assert not cfg.tracking.enabled and cfg.tracking.wandb is None and cfg.tracking.mlflow is None
    on = config_from_dict({"tracking": ALL_ON})
    assert on.tracking.enabled and on.tracking.wandb.mode == "offline" and on.tracking.mlflow.tracking_uri is None
    assert config_from_dict(config_to_dict(on)) == on
    schema = json_schema()["properties"]["tracking"]
    assert schema["properties"]["tensorboard"]["default"] is False
    wandb = schema["properties"]["wandb"]
    assert wandb["default"] is None
    assert next(b for b in wandb["anyOf"] if b.get("type") == "object")["properties"]["mode"]["enum"] == [
        "offline", "online"]


@pytest.mark.parametrize("tracking, field, words", [
    ({"mlflow": {"tracking_uri": "file:/etc/crucible"}}, "tracking.mlflow.tracking_uri", "relative path"),
    ({"mlflow": {"tracking_uri": "file:///var/lib/x"}}, "tracking.mlflow.tracking_uri", "relative path"),
    ({"mlflow": {"tracking_uri": "file:mlruns/../../other-run"}}, "tracking.mlflow.tracking_uri", "'..'"),
    ({"mlflow": {"tracking_uri": "file:%2e%2e/x"}}, "tracking.mlflow.tracking_uri", "relative path"),
    ({"mlflow": {"tracking_uri": "file:."}}, "tracking.mlflow.tracking_uri", "inside the run"),
    ({"mlflow": {"tracking_uri": "sqlite:////tmp/x.db"}}, "tracking.mlflow.tracking_uri", "http(s) URL"),
    ({"mlflow": {"tracking_uri": "https://me:secret@mlflow.example"}}, "tracking.mlflow.tracking_uri", "credentials"),
    ({"mlflow": {"tracking_uri": "http://mlflow.example:99999"}}, "tracking.mlflow.tracking_uri", "port"),
    ({"mlflow": {"experiment": "../etc"}}, "tracking.mlflow.experiment", "letter or digit"),
    ({"mlflow": {"experiment": "x" * 129}}, "tracking.mlflow.experiment", "at most 128"),
    ({"wandb": {"project": "my project"}}, "tracking.wandb.project", "letters, digits"),
    ({"wandb": {"entity": "team/other"}}, "tracking.wandb.entity", "letters, digits"),
    ({"wandb": {"mode": "disabled"}}, "tracking.wandb.mode", "offline, online"),
    ({"wandb": {"api_key": "x"}}, "tracking.wandb.api_key", "unknown key"),
    ({"tensorboard": "yes"}, "tracking.tensorboard", "true or false"),
])
def test_bad_tracking_settings_name_their_field(tracking, field, words):
    with pytest.raises(ConfigError) as err:
        config_from_dict({"tracking": tracking})
    assert err.value.field == field and words in err.value.message


def test_good_tracking_uris_are_taken():
    for uri in ("file:mlruns", "file:./tracking/mlruns", "http://127.0.0.1:5000", "https://mlflow.example/base"):
        assert config_from_dict({"tracking": {"mlflow": {"tracking_uri": uri}}}).tracking.mlflow.tracking_uri == uri


def test_a_run_without_trackers_imports_none_of_their_libraries(tmp_path):
    code = ("import sys; from training.config import config_from_dict; from training.tracking import make_tracker;"
            "assert make_tracker(config_from_dict({}), sys.argv[1], print) is None;"
            "print(sorted(m for m in ('wandb', 'mlflow', 'tensorboard', 'torch.utils.tensorboard')"
            " if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.stdout.strip() == "[]"
    assert not (tmp_path / TRACKERS_FILE).exists()


# ---- a real run ----------------------------------------------------------------------------------------------


def _wandb_records(run_dir: Path) -> list[dict]:
    """The W&B offline run's transaction log as W&B's own reader (wandb-core, `wandb leet inspect`) reads it."""
    wandb_cli = Path(sys.executable).with_name("wandb")
    out = subprocess.run([str(wandb_cli), "leet", "inspect", "--json", str(run_dir)], capture_output=True,
                         text=True, timeout=120, check=True)
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


def test_a_run_with_every_tracker_writes_what_each_library_reads_back(tmp_path, qwen3_5_model_dir, problems_file,
                                                                      runner, no_network_trackers):
    cfg = tiny_run_config(qwen3_5_model_dir, problems_file, tracking=ALL_ON)
    run = tmp_path / "run"
    assert train(cfg, run, runner=runner, progress=False) == "succeeded"
    events = read_events(run / "events.jsonl")
    assert [e for e in events if e["event"] == "warning"] == []
    steps = {e["step"]: e["metrics"] for e in events if e["event"] == "step"}
    evals = {e["step"]: e for e in events if e["event"] == "eval"}
    final = [e for e in events if e["event"] == "checkpoint"][-1]
    assert set(steps) == {1, 2} and set(evals) == {0, 2}
    trackers = read_trackers(run)
    assert set(trackers) == {"tensorboard", "wandb", "mlflow"}

    # TensorBoard: its own event reader
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run / trackers["tensorboard"]["dir"]), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert set(steps[1]) <= tags and all(metric_registry.find(k) for k in steps[1])
    for key in ("reward/mean", "pass@1/train", "loss/policy", "kl"):
        assert [(s.step, pytest.approx(s.value)) for s in acc.Scalars(key)] == [(1, steps[1][key]), (2, steps[2][key])]
    assert [(s.step, pytest.approx(s.value)) for s in acc.Scalars("eval/heldout/pass@1")] == [
        (0, evals[0]["pass@1"]), (2, evals[2]["pass@1"])]
    assert "eval/heldout/pass@2" in tags
    assert "_hparams_/experiment" in acc.summary_metadata and "config/text_summary" in acc.Tags()["tensors"]

    # MLflow: its client on the file store inside the run's directory
    from mlflow.tracking import MlflowClient

    record = trackers["mlflow"]
    assert record["store"] == "mlruns" and (run / "mlruns").is_dir()
    client = MlflowClient(tracking_uri=(run / "mlruns").as_uri())
    mlrun = client.get_run(record["run_id"])
    assert mlrun.info.status == "FINISHED"
    assert client.get_experiment(mlrun.info.experiment_id).name == "crucible tests"
    history = client.get_metric_history(record["run_id"], "reward/mean")
    assert sorted((m.step, m.value) for m in history) == [(1, pytest.approx(steps[1]["reward/mean"])),
                                                          (2, pytest.approx(steps[2]["reward/mean"]))]
    heldout = client.get_metric_history(record["run_id"], "eval/heldout/pass_at_1")
    assert sorted(m.step for m in heldout) == [0, 2]
    assert {m.step for m in client.get_metric_history(record["run_id"], "pass_at_1/train")} == {1, 2}
    params = mlrun.data.params
    assert params["sampling.candidates_per_problem"] == "4" and params["model.lora.r"] == "8"
    assert params["tracking.wandb.project"] == "crucible-test"
    exported = sorted(p.name for p in (run / final["path"]).iterdir() if p.is_file())
    logged = sorted(Path(a.path).name for a in client.list_artifacts(record["run_id"], f"checkpoint/{final['kind']}"))
    assert logged == exported and "adapter_model.safetensors" in logged and "optimizer.pt" not in logged
    # the file store inside the run's directory holds them as hard links to the checkpoint's files, not copies
    artifacts = Path(urllib.parse.unquote(urllib.parse.urlparse(mlrun.info.artifact_uri).path))
    for name in exported:
        assert (artifacts / "checkpoint" / final["kind"] / name).samefile(run / final["path"] / name)
    assert "config.json" in {a.path for a in client.list_artifacts(record["run_id"])}

    # W&B: the offline run's transaction log, read by W&B's own reader
    record = trackers["wandb"]
    assert record["mode"] == "offline" and record["url"] is None
    wandb_run = run / record["dir"]
    assert wandb_run.parent == run / "wandb" and wandb_run.name.startswith("offline-run-")
    records = _wandb_records(wandb_run)
    history = {r["history"]["step"]["num"]: r["history"]["item"] for r in records if r["type"] == "history"}
    for step in (1, 2):
        assert history[step]["reward/mean"] == pytest.approx(steps[step]["reward/mean"])
        assert set(steps[step]) <= set(history[step])
    assert history[2]["eval/heldout/pass@1"] == pytest.approx(evals[2]["pass@1"])
    run_record = next(r["run"] for r in records if r["type"] == "run")
    assert run_record["project"] == "crucible-test" and run_record["run_id"] == record["run_id"]
    assert run_record["config"]["update"]["sampling"]["candidates_per_problem"] == 4
    artifact = next(r["artifact"] for r in records if r["type"] == "artifact")
    assert artifact["type"] == "model" and f"step-{final['step']}" in artifact["aliases"]
    assert sorted(c["path"] for c in artifact["manifest"]["contents"]) == exported
    # the files the artifact points at are the run's own (immutable: no copy in a staging area)
    assert all(Path(c["local_path"]).resolve().parent == (run / final["path"]).resolve()
               for c in artifact["manifest"]["contents"])
    assert next(r for r in records if r["type"] == "exit")["exit"].get("exit_code", 0) == 0


def test_a_broken_tracker_warns_once_and_the_run_succeeds(tmp_path, qwen3_5_model_dir, problems_file, runner,
                                                          no_network_trackers):
    run = tmp_path / "run"
    run.mkdir()
    (run / "tensorboard").write_text("a file where TensorBoard wants its directory")
    # nothing listens on port 9: every MLflow call fails
    cfg = tiny_run_config(qwen3_5_model_dir, problems_file,
                          tracking={"tensorboard": True, "mlflow": {"tracking_uri": "http://127.0.0.1:9"}})
    assert train(cfg, run, runner=runner, progress=False) == "succeeded"
    events = read_events(run / "events.jsonl")
    warnings = [parse_event(e) for e in events if e["event"] == "warning"]
    assert sorted(w.source for w in warnings) == ["tracking.mlflow", "tracking.tensorboard"]
    assert all("off for the rest of this run" in w.message for w in warnings)
    assert events[-1]["event"] == "done" and events[-1]["status"] == "succeeded"
    assert [e["step"] for e in events if e["event"] == "step"] == [1, 2]


def test_a_tracker_failing_mid_run_is_dropped_after_one_warning(tmp_path, monkeypatch):
    """A tracker that opened fine and then fails at every step: one warning, then it is not called again."""
    from training.events import EventWriter, done_event, start_event, step_event
    from training.tracking import TensorBoard, Tracker

    calls = []

    def failing(self, step, values):
        calls.append(step)
        raise OSError("disk full")

    monkeypatch.setattr(TensorBoard, "metrics", failing)
    cfg = config_from_dict({"tracking": {"tensorboard": True}})
    with EventWriter(tmp_path / "events.jsonl") as events:
        tracker = Tracker(cfg, tmp_path, events.write)
        events.observers.append(tracker.observe)
        events.write(start_event(config_to_dict(cfg), "tiny", steps=3, runtime={}))
        for step in (1, 2, 3):
            events.write(step_event(step, {"reward/mean": 0.5}))
        events.write(done_event("succeeded"))
        tracker.close()
    kinds = [e["event"] for e in read_events(tmp_path / "events.jsonl")]
    assert kinds == ["start", "step", "warning", "step", "step", "done"] and calls == [1]


def test_resuming_continues_the_same_tracker_runs(tmp_path, no_network_trackers):
    """A resumed run logs into the MLflow run (and W&B run id) that trackers.json recorded."""
    from training.events import EventWriter, done_event, start_event, step_event
    from training.tracking import Tracker

    cfg = config_from_dict({"tracking": {"mlflow": {}, "wandb": {}}})
    for resumed_from, step in ((None, 1), (1, 2)):
        with EventWriter(tmp_path / "events.jsonl") as events:
            tracker = Tracker(cfg, tmp_path, events.write)
            events.observers.append(tracker.observe)
            events.write(start_event(config_to_dict(cfg), "tiny", steps=2, runtime={}, resumed_from=resumed_from))
            events.write(step_event(step, {"reward/mean": step / 10}))
            events.write(done_event("cancelled" if step == 1 else "succeeded"))
    assert [e["event"] for e in read_events(tmp_path / "events.jsonl")].count("warning") == 0
    from mlflow.tracking import MlflowClient

    run_id = read_trackers(tmp_path)["mlflow"]["run_id"]
    client = MlflowClient(tracking_uri=(tmp_path / "mlruns").as_uri())
    assert sorted(m.step for m in client.get_metric_history(run_id, "reward/mean")) == [1, 2]
    assert client.get_run(run_id).info.status == "FINISHED"
    assert len(client.search_runs([client.get_run(run_id).info.experiment_id])) == 1
    wandb_id = read_trackers(tmp_path)["wandb"]["run_id"]
    # offline-run-<date>_<time>-<id>, and W&B adds -1 to the second when both started within one second
    ids = [re.fullmatch(r"offline-run-\d{8}_\d{6}-([a-z0-9]+)(?:-\d+)?", p.name)
           for p in (tmp_path / "wandb").glob("offline-run-*")]
    assert sorted(m[1] for m in ids if m) == [wandb_id] * 2


@pytest.mark.parametrize("links", [True, False], ids=["hard-links", "no-links"])
def test_mlflow_file_store_holds_the_last_checkpoint_as_links_or_else_copies(tmp_path, no_network_trackers, monkeypatch,
                                                                            links):
    """In the file store inside the run's directory the exported files are hard links to the checkpoint's own
    (a 9B export is not stored twice); a resumed run's later checkpoint replaces them; where the filesystem
    cannot link, MLflow copies them as before."""
    import os

    from training.events import EventWriter, checkpoint_event, done_event, start_event

    if not links:
        def refuse(src, dst):
            raise OSError(18, "Invalid cross-device link")
        monkeypatch.setattr(os, "link", refuse)
    from training.tracking import Tracker

    cfg = config_from_dict({"tracking": {"mlflow": {}}})
    for resumed_from, step in ((None, 1), (1, 2)):
        checkpoint = tmp_path / "checkpoints" / f"step-{step}"
        (checkpoint / "training_state").mkdir(parents=True)
        (checkpoint / "adapter_model.safetensors").write_bytes(b"weights %d" % step)
        (checkpoint / "adapter_config.json").write_text("{}")
        (checkpoint / "training_state" / "optimizer.pt").write_bytes(b"state")
        with EventWriter(tmp_path / "events.jsonl") as events:
            tracker = Tracker(cfg, tmp_path, events.write)
            events.observers.append(tracker.observe)
            events.write(start_event(config_to_dict(cfg), "tiny", steps=2, runtime={}, resumed_from=resumed_from))
            events.write(checkpoint_event(step, f"checkpoints/step-{step}", "adapter"))
            events.write(done_event("cancelled" if step == 1 else "succeeded"))
    assert [e for e in read_events(tmp_path / "events.jsonl") if e["event"] == "warning"] == []
    from mlflow.tracking import MlflowClient

    run_id = read_trackers(tmp_path)["mlflow"]["run_id"]
    client = MlflowClient(tracking_uri=(tmp_path / "mlruns").as_uri())
    assert sorted(Path(a.path).name for a in client.list_artifacts(run_id, "checkpoint/adapter")) == [
        "adapter_config.json", "adapter_model.safetensors"]
    artifacts = Path(urllib.parse.unquote(urllib.parse.urlparse(client.get_run(run_id).info.artifact_uri).path))
    stored = artifacts / "checkpoint" / "adapter" / "adapter_model.safetensors"
    assert stored.read_bytes() == b"weights 2"
    assert stored.samefile(tmp_path / "checkpoints" / "step-2" / "adapter_model.safetensors") is links
