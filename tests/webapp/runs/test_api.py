"""JSON API under /api/runs and /api/presets (shapes from docs/design.md "Web (webapp/)")."""
import io
import json
import os
import tarfile
from urllib.parse import quote

import pytest

from webapp.runs.models import Run

from tests.factories import TINY_OVERRIDES, finished_run


def test_post_creates_a_run_and_bad_config_names_the_field(client_alice, problem_set):
    r = client_alice.post("/api/runs", {"name": "api run", "problem_set": problem_set.pk, "config": TINY_OVERRIDES},
                          content_type="application/json")
    assert r.status_code == 201, r.content
    assert r.json()["status"] == "queued"
    run = Run.objects.get(pk=r.json()["id"])
    assert run.config["train"]["steps"] == 3
    r = client_alice.post("/api/runs", {"name": "x", "problem_set": problem_set.pk,
                                        "config": {"sampling": {"temperature": -1}}}, content_type="application/json")
    assert r.status_code == 400
    assert r.json()["field"] == "sampling.temperature" and "sampling.temperature" in r.json()["detail"]


def test_another_users_problem_set_or_run_is_not_found(client, other_user, run, problem_set):
    client.force_login(other_user)
    r = client.post("/api/runs", {"name": "x", "problem_set": problem_set.pk}, content_type="application/json")
    assert r.status_code == 400 and r.json()["field"] == "problem_set"
    for path in ("", "/metrics", "/problems", "/checkpoints", "/problems/HumanEval%2F0/candidates"):
        assert client.get(f"/api/runs/{run.pk}{path}").status_code == 404, path
    assert client.post(f"/api/runs/{run.pk}/cancel").status_code == 404
    assert client.get("/api/runs").json() == []


def test_staff_see_every_run(client, staff_user, run):
    client.force_login(staff_user)
    assert [r["id"] for r in client.get("/api/runs").json()] == [run.pk]
    assert client.get(f"/api/runs/{run.pk}").status_code == 200


def test_read_endpoints_follow_the_documented_shapes(client_alice, run):
    finished_run(run)
    detail = client_alice.get(f"/api/runs/{run.pk}").json()
    assert detail["status"] == "succeeded" and detail["step"] == 2 and detail["steps"] == 3
    assert detail["latest"]["metrics"]["reward/mean"] == pytest.approx(0.5)
    assert [e["pass@1"] for e in detail["evals"]] == [0.25, 0.75]
    metrics = client_alice.get(f"/api/runs/{run.pk}/metrics").json()
    assert [m["step"] for m in metrics] == [1, 2] and "kl" in metrics[0]["metrics"]
    problems = client_alice.get(f"/api/runs/{run.pk}/problems").json()
    assert {p["problem_id"] for p in problems} == {"HumanEval/0", "add-1"}
    he = next(p for p in problems if p["problem_id"] == "HumanEval/0")
    assert he["history"] == [[1, 0.5], [2, 0.5]] and he["split"] == "train"


def test_candidates_accept_a_problem_id_with_a_slash(client_alice, run):
    finished_run(run)
    url = f"/api/runs/{run.pk}/problems/{quote('HumanEval/0', safe='')}/candidates"
    everything = client_alice.get(url).json()
    assert len(everything) == 4 and everything[0]["step"] == 2
    failed = client_alice.get(url + "?status=failed&step=1").json()
    assert len(failed) == 1 and failed[0]["result"]["status"] == "failed" and not failed[0]["passed"]
    assert set(failed[0]) >= {"step", "index", "code", "reward", "rewards", "result"}
    bogus = client_alice.get(url + "?status=bogus")
    assert bogus.status_code == 400 and bogus.json()["field"] == "status"


def test_cancel_and_resume(client_alice, run):
    assert client_alice.post(f"/api/runs/{run.pk}/resume").status_code == 409
    assert client_alice.post(f"/api/runs/{run.pk}/cancel").json() == {"status": "cancelled"}
    assert client_alice.post(f"/api/runs/{run.pk}/resume").json() == {"status": "queued"}


def test_checkpoint_download_is_a_tar_gz_of_the_directory(client_alice, run):
    finished_run(run)
    [ckpt] = client_alice.get(f"/api/runs/{run.pk}/checkpoints").json()
    assert ckpt["kind"] == "adapter" and ckpt["step"] == 2 and ckpt["size_bytes"] > 4096
    r = client_alice.get(ckpt["download_url"])
    assert r.status_code == 200 and r["Content-Type"] == "application/gzip"
    with tarfile.open(fileobj=io.BytesIO(b"".join(r.streaming_content)), mode="r:gz") as tar:
        names = sorted(tar.getnames())
        assert names == ["step-2/README.md", "step-2/adapter_config.json", "step-2/adapter_model.safetensors",
                         "step-2/crucible_run.yaml", "step-2/metrics_summary.json",
                         "step-2/problems.jsonl"]  # + the run's card, config, metrics and the problems it names
        assert json.loads(tar.extractfile("step-2/adapter_config.json").read()) == {"r": 8}


def test_checkpoint_download_and_size_leave_out_the_resume_state(client_alice, run):
    finished_run(run)
    state = run.path / "checkpoints" / "step-2" / "training_state"
    state.mkdir()
    (state / "optimizer.pt").write_bytes(b"\x01" * 100_000)
    from training.checkpoint import STATE_DIR
    from webapp.runs.checkpoints import STATE_DIR as WEB_STATE_DIR
    from webapp.runs.services import directory_size

    assert WEB_STATE_DIR == STATE_DIR
    assert directory_size(run, "checkpoints/step-2") < 100_000
    ckpt = run.checkpoints.get()
    r = client_alice.get(f"/api/runs/{run.pk}/checkpoints/{ckpt.pk}/download")
    with tarfile.open(fileobj=io.BytesIO(b"".join(r.streaming_content)), mode="r:gz") as tar:
        assert not [n for n in tar.getnames() if "training_state" in n]


def test_checkpoint_download_refuses_symlinks_and_escapes(client_alice, run, tmp_path):
    finished_run(run)
    ckpt = run.checkpoints.get()
    secret = tmp_path / "secret.txt"
    secret.write_text("top secret")
    os.symlink(secret, run.path / "checkpoints" / "step-2" / "leak.txt")
    assert client_alice.get(f"/api/runs/{run.pk}/checkpoints/{ckpt.pk}/download").status_code == 403
    ckpt.path = "../../"
    ckpt.save()
    assert client_alice.get(f"/api/runs/{run.pk}/checkpoints/{ckpt.pk}/download").status_code == 403
    os.symlink(tmp_path, run.path / "linked")
    ckpt.path = "linked"
    ckpt.save()
    assert client_alice.get(f"/api/runs/{run.pk}/checkpoints/{ckpt.pk}/download").status_code == 403


def test_presets_are_valid_configs_and_the_demo_points_at_the_tiny_model(client_alice, user, settings):
    from webapp.runs.config import validate_config

    presets = client_alice.get("/api/presets").json()
    assert {p["title"] for p in presets} >= {"CPU demo — tiny model", "Qwen3.5-9B LoRA on one 80 GB GPU"}
    for p in presets:
        validate_config(p["config"], user)
    demo = next(p for p in presets if p["name"] == "cpu-demo")
    assert demo["config"]["model"]["name_or_path"] == "models/tiny"  # the user-facing name, never a server path
    assert str(settings.DATA_DIR) not in json.dumps(presets) and str(settings.MODELS_DIR) not in json.dumps(presets)


def test_the_tiny_qwen3_5_demo_differs_from_the_cpu_demo_only_in_its_model_and_length(client_alice):
    from webapp.launcher import DEMO_MODELS

    presets = {p["name"]: p for p in client_alice.get("/api/presets").json()}
    hybrid = presets["cpu-demo-qwen3.5"]
    assert hybrid["title"] == "CPU demo — tiny Qwen3.5 (hybrid attention)"
    assert hybrid["config"]["model"]["name_or_path"] == "models/tiny-qwen3_5"
    assert DEMO_MODELS["tiny-qwen3_5"] == "qwen3_5" and DEMO_MODELS["tiny"] == "qwen3"
    # 60 steps: a Qwen3.5 step costs about two Qwen3 steps on CPU, and 60 already gain +35 points
    model = dict(hybrid["config"]["model"], name_or_path="models/tiny")
    train = dict(hybrid["config"]["train"], steps=200, eval_every=40, checkpoint_every=40)
    assert dict(hybrid["config"], model=model, train=train) == presets["cpu-demo"]["config"]
    assert hybrid["config"]["train"]["steps"] == 60


def test_token_auth_works_and_anonymous_gets_401(client, user, run):
    from webapp.accounts.models import ApiToken

    token = ApiToken.issue(user, "t")[1]
    assert client.get("/api/runs", HTTP_AUTHORIZATION=f"Bearer {token}").json()[0]["id"] == run.pk
    assert client.get("/api/runs").status_code == 401


def test_the_openapi_schema_publishes_the_run_config_a_client_may_send(client, settings):
    from training.config import json_schema

    training = json_schema(settings.CONFIG_CEILINGS)["properties"]
    run_in = client.get("/api/openapi.json").json()["components"]["schemas"]["RunIn"]
    config = run_in["properties"]["config"]["properties"]
    assert set(config) == set(training) - {"problems"}  # the run's problem set gives the problems
    assert config["ppo"]["properties"]["advantage"] == training["ppo"]["properties"]["advantage"]
    sampling = config["sampling"]["properties"]
    assert sampling["problems_per_step"] == training["sampling"]["properties"]["problems_per_step"]  # ceilings
    model = config["model"]["properties"]
    assert "adapters" not in model and model["name_or_path"]["default"] == "models/tiny"
    assert run_in["required"] == ["name", "problem_set"]  # config may be left out: all defaults
