"""Checkpoints: the best one is marked; the archive says what the adapter is, and names its base portably."""
import io
import json
import tarfile

import yaml


from tests.factories import eval_event, full_run_events, ingest


def _archive(client, url) -> dict[str, bytes]:
    r = client.get(url)
    with tarfile.open(fileobj=io.BytesIO(b"".join(r.streaming_content)), mode="r:gz") as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers()}


def _finished(run, base_model="/srv/crucible/models/tiny"):
    events = full_run_events(run.path, steps=2)
    (run.path / "checkpoints" / "step-2" / "adapter_config.json").write_text(
        json.dumps({"r": 8, "base_model_name_or_path": base_model}))
    peft_template = "---\nbase_model: /srv\n---\n# Model Card for Model ID\n"
    (run.path / "checkpoints" / "step-2" / "README.md").write_text(peft_template)
    ingest(run, events)


def test_the_archive_carries_a_model_card_the_config_and_a_metrics_summary(client_alice, run):
    _finished(run)
    [ckpt] = client_alice.get(f"/api/runs/{run.pk}/checkpoints").json()
    files = _archive(client_alice, ckpt["download_url"])
    card = files["step-2/README.md"].decode()
    assert "Model Card for Model ID" not in card  # peft's empty template is replaced
    assert "base_model: tiny" in card and "25.0% before training, 75.0% at this checkpoint" in card
    assert "small set: 3 train / 1 held-out problems" in card
    assert yaml.safe_load(files["step-2/crucible_run.yaml"])["train"]["steps"] == 3
    summary = json.loads(files["step-2/metrics_summary.json"])
    assert summary["heldout_pass@1"]["before"] == 0.25 and summary["heldout_pass@1"]["at_checkpoint"] == 0.75
    assert summary["train_metrics_at_checkpoint"]["step"] == 2


def test_the_base_model_is_never_a_server_path(client_alice, run):
    _finished(run)
    [ckpt] = client_alice.get(f"/api/runs/{run.pk}/checkpoints").json()
    config = json.loads(_archive(client_alice, ckpt["download_url"])["step-2/adapter_config.json"])
    assert config == {"r": 8, "base_model_name_or_path": "tiny"}  # models/tiny, by its directory name
    # on disk the trainer's file is untouched
    assert "/srv/" in (run.path / "checkpoints" / "step-2" / "adapter_config.json").read_text()


def test_a_hub_base_stays_a_hub_id_and_a_run_checkpoint_names_that_runs_base(user):
    from webapp.runs.archive import public_base_name

    assert public_base_name({"model": {"name_or_path": "Qwen/Qwen3.5-9B"}}) == "Qwen/Qwen3.5-9B"
    assert public_base_name({"model": {"name_or_path": "models/tiny-qwen3_5"}}) == "tiny-qwen3_5"
    from webapp.runs.models import Run

    source = Run.objects.create(owner=user, name="src", config={"model": {"name_or_path": "Qwen/Qwen3-0.6B"}})
    assert public_base_name({"model": {"name_or_path": f"run:{source.pk}/step-20"}}) == "Qwen/Qwen3-0.6B"


def test_the_checkpoint_with_the_best_held_out_pass_is_marked(client_alice, user, problem_set, run):
    _finished(run)
    ckpt_dir = run.path / "checkpoints" / "step-1"
    ckpt_dir.mkdir()
    (ckpt_dir / "adapter_config.json").write_text("{}")
    ingest(run, [eval_event(1, 0.9), {"event": "checkpoint", "step": 1, "path": "checkpoints/step-1",
                                       "kind": "adapter", "time": 0}])
    rows = {c["step"]: c for c in client_alice.get(f"/api/runs/{run.pk}/checkpoints").json()}
    assert rows[1]["best"] is True and rows[2]["best"] is False
    assert rows[1]["heldout_pass_at_1"] == 0.9 and rows[2]["heldout_pass_at_1"] == 0.75


def test_no_checkpoint_is_best_when_none_beats_the_base_model(client_alice, run):
    ingest(run, [eval_event(0, 0.5)])
    _finished(run)  # its checkpoint at step 2 scores 0.75, but...
    ingest(run, [eval_event(0, 0.8)])  # ...the base model scored 0.8 before training
    assert not any(c["best"] for c in client_alice.get(f"/api/runs/{run.pk}/checkpoints").json())


def test_the_archive_carries_the_runs_problems_and_its_card_says_how_to_rerun(client_alice, run, tmp_path):
    import os
    import subprocess
    import sys

    from tests.factories import ROOT

    _finished(run)
    [ckpt] = client_alice.get(f"/api/runs/{run.pk}/checkpoints").json()
    files = _archive(client_alice, ckpt["download_url"])
    config = yaml.safe_load(files["step-2/crucible_run.yaml"])
    assert config["problems"] == "problems.jsonl"
    assert files["step-2/problems.jsonl"] == (run.path / "problems.jsonl").read_bytes()  # the file the config names
    card = files["step-2/README.md"].decode()
    assert "python -m training run --config crucible_run.yaml --out RUN_DIR" in card
    assert "finds `problems.jsonl` here" in card
    assert "`--set model.name_or_path=PATH`" in card and "tiny-model --out PATH" in card  # models/tiny: not a hub id

    # Unpacked, the config and the problem file it names load as the trainer loads them.
    for name in ("crucible_run.yaml", "problems.jsonl"):
        (tmp_path / name).write_bytes(files[f"step-2/{name}"])
    code = ("from training.config import load_config; from training.cli import load_problems_or_fail; "
            "cfg = load_config('crucible_run.yaml'); print(len(load_problems_or_fail(cfg.problems)))")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    assert int(out.stdout) == 4  # the small set's problems


def test_an_input_too_large_for_the_archive_is_named_in_the_card(client_alice, run, monkeypatch):
    from webapp.runs import archive

    _finished(run)
    monkeypatch.setattr(archive, "RUN_INPUTS_MAX_BYTES", 10)
    [ckpt] = client_alice.get(f"/api/runs/{run.pk}/checkpoints").json()
    files = _archive(client_alice, ckpt["download_url"])
    assert "step-2/problems.jsonl" not in files
    assert "is too large for the archive: put the problem set (export it from the set's page) here as " \
           "`problems.jsonl`" in files["step-2/README.md"].decode()
