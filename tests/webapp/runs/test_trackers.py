"""Experiment trackers in the web app: the new-run form offers them, the run page says where each one's run is."""
import json

from webapp.runs.models import Run
from webapp.runs.services import ingest_event

from tests.factories import form_data, line, make_run
from training.events import warning_event


def test_the_form_offers_the_trackers_all_off_by_default(client_alice, problem_set):
    r = client_alice.get(f"/runs/new?problem_set={problem_set.pk}")
    html = r.content.decode()
    form = r.context["form"]
    names = [f.name for f in dict(form.groups())[form.tracking_group]]
    assert names[:1] == ["tracking.tensorboard"] and {"tracking.wandb", "tracking.wandb.project", "tracking.wandb.mode",
                                                     "tracking.mlflow", "tracking.mlflow.tracking_uri",
                                                     "tracking.mlflow.experiment"} <= set(names)
    assert form["tracking.tensorboard"].initial is False and form["tracking.wandb"].initial is False
    assert form["tracking.wandb.mode"].initial == "offline"
    assert 'id="tracking-note"' in html and "WANDB_API_KEY" in html
    assert 'name="tracking.wandb.api_key"' not in html  # credentials are never a form field


def test_a_run_without_trackers_launches_with_them_off(client_alice, problem_set):
    assert client_alice.post("/runs/new", form_data(problem_set)).status_code == 302
    run = Run.objects.get()
    assert run.config["tracking"] == {"tensorboard": False, "wandb": None, "mlflow": None}
    assert 'id="trackers-card"' not in client_alice.get(f"/runs/{run.pk}/").content.decode()


def test_the_trackers_reach_the_run_config(client_alice, problem_set):
    data = form_data(problem_set, **{"tracking.tensorboard": "on", "tracking.wandb": "on",
                                     "tracking.wandb.project": "code-rl", "tracking.wandb.entity": "",
                                     "tracking.wandb.mode": "offline", "tracking.mlflow": "on",
                                     "tracking.mlflow.tracking_uri": "", "tracking.mlflow.experiment": "crucible"})
    assert client_alice.post("/runs/new", data).status_code == 302
    run = Run.objects.get()
    assert run.config["tracking"] == {"tensorboard": True,
                                      "wandb": {"project": "code-rl", "entity": None, "mode": "offline"},
                                      "mlflow": {"tracking_uri": None, "experiment": "crucible"}}


def test_a_file_store_outside_the_run_is_refused_on_its_field(client_alice, problem_set):
    data = form_data(problem_set, **{"tracking.mlflow": "on", "tracking.mlflow.tracking_uri": "file:/etc/crucible",
                                     "tracking.mlflow.experiment": "crucible"})
    r = client_alice.post("/runs/new", data)
    assert r.status_code == 200 and not Run.objects.exists()
    assert "relative path inside the run" in r.context["form"]["tracking.mlflow.tracking_uri"].errors[0]
    r = client_alice.post("/runs/new", form_data(problem_set, **{
        "tracking.wandb": "on", "tracking.wandb.project": "a/b", "tracking.wandb.mode": "offline"}))
    assert "letters, digits" in r.context["form"]["tracking.wandb.project"].errors[0]


def test_only_this_servers_mlflow_servers_may_be_named(client_alice, problem_set, monkeypatch):
    """The worker sends its MLflow credentials to a run's server: a web user may not name one of their own."""
    data = form_data(problem_set, **{"tracking.mlflow": "on", "tracking.mlflow.experiment": "crucible",
                                     "tracking.mlflow.tracking_uri": "https://collector.example"})
    monkeypatch.delenv("CRUCIBLE_MLFLOW_SERVERS", raising=False)
    r = client_alice.post("/runs/new", data)
    errors = r.context["form"]["tracking.mlflow.tracking_uri"].errors
    assert "not one of this server's MLflow tracking servers" in errors[0]
    monkeypatch.setenv("CRUCIBLE_MLFLOW_SERVERS", "https://mlflow.internal:5000")
    assert "https://mlflow.internal:5000" in client_alice.post("/runs/new", data).context["form"][
        "tracking.mlflow.tracking_uri"].errors[0]
    data["tracking.mlflow.tracking_uri"] = "https://mlflow.internal:5000/"
    assert client_alice.post("/runs/new", data).status_code == 302
    assert Run.objects.get().config["tracking"]["mlflow"]["tracking_uri"] == "https://mlflow.internal:5000/"


def test_the_run_page_links_each_trackers_run_and_shows_a_dropped_one(client_alice, user, problem_set, monkeypatch):
    monkeypatch.setenv("CRUCIBLE_MLFLOW_SERVERS", "https://mlflow.example:5000")
    run = make_run(user, "tracked", problem_set, overrides={
        "train": {"steps": 3}, "sampling": {"problems_per_step": 2, "candidates_per_problem": 2},
        "tracking": {"tensorboard": True, "wandb": {"project": "code-rl"},
                     "mlflow": {"tracking_uri": "https://mlflow.example:5000"}}})
    html = client_alice.get(f"/runs/{run.pk}/").content.decode()
    assert 'id="trackers-card"' in html and html.count("appears when the trainer starts") == 3
    run.path.mkdir(parents=True, exist_ok=True)
    (run.path / "trackers.json").write_text(json.dumps({
        "tensorboard": {"dir": "tensorboard"},
        "wandb": {"mode": "offline", "project": "code-rl", "entity": None, "run_id": "ab12",
                  "dir": "wandb/offline-run-20261206_070314-ab12", "url": None},
        "mlflow": {"tracking_uri": "https://mlflow.example:5000", "store": None, "experiment": "crucible",
                   "experiment_id": "4", "run_id": "f00d",
                   "url": "https://mlflow.example:5000/#/experiments/4/runs/f00d"}}))
    ingest_event(run, line(warning_event("tracking.mlflow", "MLflow logging failed and is off: ConnectionError")),
                 seq=0, broadcast=False)
    html = client_alice.get(f"/runs/{run.pk}/").content.decode()
    assert f"{run.path}/tensorboard" in html and "tensorboard --logdir" in html
    assert f"wandb sync {run.path}/wandb/offline-run-20261206_070314-ab12" in html
    assert 'href="https://mlflow.example:5000/#/experiments/4/runs/f00d"' in html
    assert "⚠ MLflow logging failed and is off: ConnectionError" in html


def test_online_wandb_streams_only_into_an_entity_this_server_lists(client_alice, problem_set, monkeypatch):
    """The worker's WANDB_API_KEY writes wherever a run streams: a web user may not choose another tenant's entity."""
    data = form_data(problem_set, **{"tracking.wandb": "on", "tracking.wandb.project": "mine",
                                     "tracking.wandb.mode": "online", "tracking.wandb.entity": "their-team"})
    monkeypatch.delenv("CRUCIBLE_WANDB_ENTITIES", raising=False)
    errors = client_alice.post("/runs/new", data).context["form"]["tracking.wandb.mode"].errors
    assert "online W&B is not offered by this server" in errors[0] and "mode: offline" in errors[0]
    monkeypatch.setenv("CRUCIBLE_WANDB_ENTITIES", "our-team")
    errors = client_alice.post("/runs/new", data).context["form"]["tracking.wandb.entity"].errors
    assert "'their-team' is not one of this server's W&B entities (our-team)" in errors[0]
    assert not Run.objects.exists()
    data["tracking.wandb.entity"] = "our-team"
    assert client_alice.post("/runs/new", data).status_code == 302
    data["tracking.wandb.mode"], data["tracking.wandb.entity"] = "offline", "their-team"  # files in the run's own dir
    assert client_alice.post("/runs/new", data).status_code == 302
    assert [r.config["tracking"]["wandb"]["mode"] for r in Run.objects.order_by("pk")] == ["online", "offline"]


def test_a_link_is_only_ever_an_http_url(client_alice, user, problem_set, monkeypatch):
    monkeypatch.setenv("CRUCIBLE_WANDB_ENTITIES", "our-team")
    run = make_run(user, "tracked", problem_set,
                   overrides={"tracking": {"wandb": {"mode": "online", "entity": "our-team"}}})
    run.path.mkdir(parents=True, exist_ok=True)
    (run.path / "trackers.json").write_text(json.dumps({"wandb": {
        "mode": "online", "run_id": "x", "dir": "wandb/run-x", "url": "javascript:alert(1)"}}))
    html = client_alice.get(f"/runs/{run.pk}/").content.decode()
    assert 'id="trackers-card"' in html and 'href="javascript:' not in html


def test_another_users_run_page_is_not_shown(client, django_user_model, user, problem_set):
    run = make_run(user, "tracked", problem_set, overrides={"tracking": {"tensorboard": True}})
    client.force_login(django_user_model.objects.create_user("mallory", password="x" * 12))
    assert client.get(f"/runs/{run.pk}/").status_code == 404
