"""sampling.engine in the web app: refused at launch when it cannot run here, vllm.url only where the operator
lists it, the engine on the Runtime panel with its log, and a real vLLM run through a Celery worker."""
import json
import os
from pathlib import Path

import pytest

from webapp.runs.models import Checkpoint, Eval, Run, StepMetric
from webapp.runs.services import create_run, ingest_event

from tests.factories import DEMO, TINY_OVERRIDES, form_data, make_problem_set, start_event
from tests.webapp.conftest import wait_for

from .conftest import demo_config


def _post(client, problem_set, config):
    return client.post("/api/runs", {"name": "engine run", "problem_set": problem_set.pk, "config": config},
                       content_type="application/json")


def test_a_vllm_run_is_refused_at_launch_when_the_engine_is_not_installed(client_alice, problem_set, monkeypatch,
                                                                         tmp_path):
    monkeypatch.setenv("CRUCIBLE_VLLM_PYTHON", str(tmp_path / "missing" / "bin" / "python"))
    r = _post(client_alice, problem_set, {**TINY_OVERRIDES, "sampling": {"engine": "vllm"}})
    assert r.status_code == 400
    body = json.dumps(r.json())
    assert "sampling.engine" in body and "make vllm-env" in body and "engine: hf" in body
    assert not Run.objects.exists()


def test_vllm_url_is_only_a_server_the_operator_lists(client_alice, problem_set, settings):
    config = {**TINY_OVERRIDES, "sampling": {"engine": "vllm"}, "vllm": {"url": "http://10.0.0.7:8000"}}
    r = _post(client_alice, problem_set, config)
    assert r.status_code == 400 and "vllm.url" in json.dumps(r.json()) and "CRUCIBLE_VLLM_URLS" in json.dumps(r.json())
    settings.VLLM_URLS = ["http://10.0.0.7:8000"]
    assert _post(client_alice, problem_set, config).status_code == 201
    r = _post(client_alice, problem_set, {**config, "vllm": {"url": "file:///etc/passwd"}})
    assert r.status_code == 400 and "vllm.url" in json.dumps(r.json())


def test_a_run_on_a_listed_server_may_not_reload_its_weights_which_other_runs_share(client_alice, problem_set,
                                                                                     settings):
    settings.VLLM_URLS = ["http://10.0.0.7:8000"]
    config = {**TINY_OVERRIDES, "sampling": {"engine": "vllm"}, "vllm": {"url": "http://10.0.0.7:8000",
                                                                           "sync": "weights"}}
    r = _post(client_alice, problem_set, config)
    assert r.status_code == 400 and "vllm.sync" in json.dumps(r.json())
    assert "other runs sample from too" in json.dumps(r.json())
    r = _post(client_alice, problem_set, {**config, "model": {"lora": None}, "vllm": {"url": "http://10.0.0.7:8000"}})
    assert r.status_code == 400 and "a full fine-tune (model.lora null) syncs by weights" in json.dumps(r.json())
    assert not Run.objects.exists()
    assert _post(client_alice, problem_set, {**config, "vllm": {"url": "http://10.0.0.7:8000",
                                                                "sync": "adapter"}}).status_code == 201


def test_a_full_fine_tune_on_vllm_by_adapter_is_refused_naming_vllm_sync(client_alice, problem_set):
    config = {**TINY_OVERRIDES, "sampling": {"engine": "vllm"}, "model": {"lora": None}, "vllm": {"sync": "adapter"}}
    r = _post(client_alice, problem_set, config)
    assert r.status_code == 400
    body = json.dumps(r.json())
    assert "vllm.sync" in body and "weights" in body
    assert not Run.objects.exists()


def test_the_form_offers_the_engine_and_the_server_settings(client_alice, problem_set):
    r = client_alice.get(f"/runs/new?problem_set={problem_set.pk}")
    groups = dict(r.context["form"].groups())
    assert "sampling.engine" in [f.name for f in groups["Sampling"]]
    assert {"vllm.url", "vllm.gpu_memory_utilization", "vllm.dtype", "vllm.sync"} <= {
        f.name for f in groups["vLLM server (when sampling.engine is vllm)"]}
    assert 'value="vllm"' in r.content.decode()


def _engine_environment(tmp_path: Path, *, with_vllm: bool) -> Path:
    python = tmp_path / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.touch()
    site = tmp_path / "venv" / "lib" / "python3.12" / "site-packages"
    site.mkdir(parents=True)
    if with_vllm:
        (site / "vllm").mkdir()
        (site / "vllm" / "__init__.py").touch()
    return python


def test_the_form_and_the_api_say_when_vllm_is_not_installed_here(client_alice, problem_set, monkeypatch, tmp_path):
    monkeypatch.setenv("CRUCIBLE_VLLM_PYTHON", str(tmp_path / "missing" / "bin" / "python"))
    html = client_alice.get(f"/runs/new?problem_set={problem_set.pk}").content.decode()
    assert '<option value="vllm">vllm (not installed here)</option>' in html
    assert 'data-unavailable="vllm"' in html and 'id="engine-issue"' in html  # the launch bar names it when chosen
    assert '<option value="hf" selected>hf</option>' in html
    assert "⚠ vllm: the vLLM engine environment is not installed" in html and "make vllm-env" in html
    offers = client_alice.get("/api/engines").json()
    assert [(o["name"], o["available"]) for o in offers] == [("hf", True), ("vllm", False)]
    assert offers[0]["reason"] is None and "is not installed" in offers[1]["reason"]


def test_an_engine_environment_without_vllm_is_not_offered_as_installed(client_alice, monkeypatch, tmp_path):
    monkeypatch.setenv("CRUCIBLE_VLLM_PYTHON", str(_engine_environment(tmp_path, with_vllm=False)))
    assert "has no vllm package" in client_alice.get("/api/engines").json()[1]["reason"]


def test_a_listed_vllm_server_is_named_where_the_engine_is_missing(client_alice, monkeypatch, tmp_path, settings):
    monkeypatch.setenv("CRUCIBLE_VLLM_PYTHON", str(tmp_path / "missing" / "bin" / "python"))
    settings.VLLM_URLS = ["http://10.0.0.7:8000"]
    reason = client_alice.get("/api/engines").json()[1]["reason"]
    assert reason.endswith("a listed server still works: set vllm.url to one of http://10.0.0.7:8000")


def test_an_installed_vllm_is_offered_plainly(client_alice, problem_set, monkeypatch, tmp_path):
    monkeypatch.setenv("CRUCIBLE_VLLM_PYTHON", str(_engine_environment(tmp_path, with_vllm=True)))
    html = client_alice.get(f"/runs/new?problem_set={problem_set.pk}").content.decode()
    assert '<option value="vllm">vllm</option>' in html and "not installed" not in html
    assert 'data-unavailable=""' in html
    assert client_alice.get("/api/engines").json()[1] == {"name": "vllm", "available": True, "reason": None}


def test_the_error_banner_links_each_field_in_error(client_alice, problem_set, monkeypatch, tmp_path):
    monkeypatch.setenv("CRUCIBLE_VLLM_PYTHON", str(tmp_path / "missing" / "bin" / "python"))
    r = client_alice.post("/runs/new", form_data(problem_set, name="", **{"sampling.engine": "vllm",
                                                                          "ppo.clip_range": 0}))
    assert r.status_code == 200 and not Run.objects.exists()
    html = r.content.decode()
    banner = html[html.index('id="form-errors"'):]
    banner = " ".join(banner[:banner.index("</div>")].split())
    # In the page's order; the config check (the engine) runs once the form's own fields are valid.
    assert ('Fix the fields marked below: <a href="#id_name" class="field-link">Run: Name</a>, '
            '<a href="#id_ppo.clip_range" class="field-link">PPO: clip range</a>.') in banner
    r = client_alice.post("/runs/new", form_data(problem_set, **{"sampling.engine": "vllm"}))
    html = r.content.decode()
    assert '<a href="#id_sampling.engine" class="field-link">Sampling: engine</a>' in html
    assert 'id="id_sampling.engine"' in html


def test_the_9b_preset_samples_with_vllm():
    from webapp.runs.presets import get_preset

    assert get_preset("qwen3.5-9b-lora-80gb")["config"]["sampling"]["engine"] == "vllm"


def test_the_runtime_panel_shows_the_engine_and_links_its_log(client, client_alice, other_user, run):
    engine = {"name": "vllm", "version": "0.32.0", "url": "http://127.0.0.1:41234", "dtype": "bfloat16",
              "sync": "weights", "log": "engine/vllm.log"}
    ingest_event(run, start_event(engine=engine), seq=0)
    (Path(run.path) / "engine").mkdir(parents=True)
    (Path(run.path) / "engine" / "vllm.log").write_text("INFO starting\n" + "x" * 70_000 + "\nINFO ready\n")
    html = client_alice.get(f"/runs/{run.pk}/").content.decode()
    assert "vLLM 0.32.0 · bfloat16 · server started for this run · weights reloaded each step" in html
    assert f'href="/runs/{run.pk}/engine-log"' in html
    from webapp.runs.runtime import engine_text  # the reason auto chose the sync follows it

    why = "auto: on CPU vLLM's LoRA path sampled at a third of its base speed"
    assert engine_text({**engine, "sync_why": why}).endswith(f"weights reloaded each step ({why})")
    log = client_alice.get(f"/runs/{run.pk}/engine-log")
    assert log.status_code == 200 and log.content.decode().endswith("INFO ready\n")
    assert "earlier bytes left out" in log.content.decode() and len(log.content) < 70_000
    client.force_login(other_user)
    assert client.get(f"/runs/{run.pk}/engine-log").status_code == 404


def test_an_hf_run_has_no_engine_log(client_alice, run):
    ingest_event(run, start_event(engine={"name": "hf", "version": None, "url": None, "dtype": None}), seq=0)
    html = client_alice.get(f"/runs/{run.pk}/").content.decode()
    assert "the trainer&#x27;s own decoding loop" in html and "engine-log" not in html
    assert client_alice.get(f"/runs/{run.pk}/engine-log").status_code == 404


@pytest.fixture(scope="session")
def wide_models_dir(models_dir):
    """The session's models plus ``tiny-qwen3_5-wide``: Qwen3.5 with 128-wide linear-attention heads."""
    from training.tiny_model import build_tiny_model

    target = models_dir / "tiny-qwen3_5-wide"
    if not (target / "crucible_tiny.json").exists():
        build_tiny_model(target, arch="qwen3_5", linear_head_dim=128)
    return models_dir


def _wait_status(run, statuses, timeout_s=600):
    def status():
        run.refresh_from_db()
        return run.status if run.status in statuses else None
    return wait_for(status, timeout_s, f"run {run.pk} in {sorted(statuses)}", interval=0.3)


@pytest.mark.e2e
@pytest.mark.slow
def test_a_vllm_run_trains_cancels_resumes_and_exports_through_a_worker(celery_worker, user, wide_models_dir,
                                                                        settings, client_alice):
    from training.engines.vllm_server import unavailable_reason

    if unavailable_reason():
        if os.environ.get("CI"):
            pytest.fail(unavailable_reason())
        pytest.skip(unavailable_reason())
    settings.MODELS_DIR = wide_models_dir
    problem_set = make_problem_set(user, "demo", DEMO.read_bytes())
    config = json.loads(json.dumps(demo_config(steps=3, model="models/tiny-qwen3_5-wide")))
    config["sampling"]["engine"] = "vllm"
    run = create_run(user, "vllm run", problem_set, config)

    def first_step():
        assert Run.objects.get(pk=run.pk).status not in ("failed", "succeeded")
        return StepMetric.objects.filter(run=run).exists()
    wait_for(first_step, 600, "a first step stored", interval=0.3)
    assert client_alice.post(f"/api/runs/{run.pk}/cancel").status_code == 200
    assert _wait_status(run, {"cancelled", "failed"}) == "cancelled", run.error
    done_steps = set(StepMetric.objects.filter(run=run).values_list("step", flat=True))

    assert client_alice.post(f"/api/runs/{run.pk}/resume").status_code == 200
    assert _wait_status(run, {"succeeded", "failed", "cancelled"}) == "succeeded", run.error
    steps = list(StepMetric.objects.filter(run=run).order_by("step").values_list("step", flat=True))
    assert steps == [1, 2, 3] and done_steps <= set(steps)
    assert "time/sync_s" in StepMetric.objects.get(run=run, step=3).metrics
    assert Eval.objects.filter(run=run).exists()
    html = client_alice.get(f"/runs/{run.pk}/").content.decode()
    assert "vLLM 0.32.0" in html and f"/runs/{run.pk}/engine-log" in html
    assert "Uvicorn running" in client_alice.get(f"/runs/{run.pk}/engine-log").content.decode() or \
        "Application startup complete" in client_alice.get(f"/runs/{run.pk}/engine-log").content.decode()
    final = Checkpoint.objects.filter(run=run).order_by("-step").first()
    assert final.step == 3
    download = client_alice.get(f"/api/runs/{run.pk}/checkpoints")
    url = next(c["download_url"] for c in download.json() if c["step"] == 3)
    archive = client_alice.get(url)
    assert archive.status_code == 200 and archive["Content-Type"] in ("application/gzip", "application/x-gzip")
