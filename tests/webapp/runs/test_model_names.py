"""Which models a web user may name (docs/design.md "Web (webapp/)"): a hub id, models/<name>, or run:<id>/step-<n> of
an own run; every other name, another user's checkpoint directory included, is one 400 that reveals
nothing about the server's files. The run keeps the name; the trainer's run.yaml gets the resolution."""
import os
from pathlib import Path

import pytest
import yaml

from webapp.runs.models import Checkpoint, Run

from tests.factories import TINY_OVERRIDES, finished_run, form_data, install_model_stub, make_problem_set


def post_run(client, problem_set, name_or_path, **model):
    config = {**TINY_OVERRIDES, "model": {"name_or_path": name_or_path, **model}}
    return client.post("/api/runs", {"name": "named model", "problem_set": problem_set.pk, "config": config},
                       content_type="application/json")


def trainer_model(run_id: int) -> dict:
    return yaml.safe_load((Run.objects.get(pk=run_id).path / "run.yaml").read_text())["model"]


@pytest.fixture
def alice_run(run):
    """Alice's finished run: an adapter checkpoint at step 2, and a merged export at step 2 on disk."""
    return finished_run(run)


def add_merged_checkpoint(run) -> Path:
    merged = run.path / "checkpoints" / "final-merged"
    install_model_stub(merged)
    Checkpoint.objects.create(run=run, step=2, kind="merged", path="checkpoints/final-merged", size_bytes=2)
    return merged


@pytest.fixture
def bob_client(client, other_user):
    client.force_login(other_user)
    return client


@pytest.fixture
def bob_set(other_user):
    return make_problem_set(other_user, "bob's set")


def test_another_users_checkpoint_directory_is_refused_exactly_like_a_missing_path(alice_run, bob_client, bob_set):
    merged = add_merged_checkpoint(alice_run)
    adapter = alice_run.path / "checkpoints" / "step-2"
    answers = {name: post_run(bob_client, bob_set, name, lora=None)
               for name in (str(merged), str(adapter), "/etc/passwd", "/nonexistent", "/root/.ssh/id_rsa")}
    assert {r.status_code for r in answers.values()} == {400}
    assert {r.json()["field"] for r in answers.values()} == {"model.name_or_path"}
    details = {r.json()["detail"] for r in answers.values()}
    assert len(details) == 1, details  # whether a path exists, is a file or holds a model is not told
    assert str(alice_run.path) not in details.pop()
    assert not Run.objects.filter(owner__username="bob").exists()


def test_another_users_run_by_id_is_refused_like_a_run_that_does_not_exist(alice_run, bob_client, bob_set):
    add_merged_checkpoint(alice_run)
    theirs = post_run(bob_client, bob_set, f"run:{alice_run.pk}/step-2")
    missing = post_run(bob_client, bob_set, "run:999999/step-2")
    path = post_run(bob_client, bob_set, "/etc/passwd")
    assert theirs.status_code == missing.status_code == 400
    assert theirs.json() == missing.json() == path.json()
    assert theirs.json()["field"] == "model.name_or_path"


def test_an_own_merged_checkpoint_is_used_as_it_is(client_alice, alice_run, problem_set):
    merged = add_merged_checkpoint(alice_run)
    r = post_run(client_alice, problem_set, f"run:{alice_run.pk}/step-2", lora=None)
    assert r.status_code == 201, r.content
    assert Run.objects.get(pk=r.json()["id"]).config["model"]["name_or_path"] == f"run:{alice_run.pk}/step-2"
    model = trainer_model(r.json()["id"])
    assert model["name_or_path"] == str(merged.resolve()) and model["adapters"] == []


def test_an_own_adapter_checkpoint_is_merged_into_its_runs_base(client_alice, alice_run, problem_set, settings):
    r = post_run(client_alice, problem_set, f"run:{alice_run.pk}/step-2")
    assert r.status_code == 201, r.content
    model = trainer_model(r.json()["id"])
    assert model["name_or_path"] == str((settings.MODELS_DIR / "tiny").resolve())  # the first run's base
    assert model["adapters"] == [str((alice_run.path / "checkpoints" / "step-2").resolve())]
    # A run trained from that run carries the whole chain: base, then each adapter in order.
    second = finished_run(Run.objects.get(pk=r.json()["id"]))
    r = post_run(client_alice, problem_set, f"run:{second.pk}/step-2")
    assert trainer_model(r.json()["id"])["adapters"] == [*model["adapters"],
                                                         str((second.path / "checkpoints" / "step-2").resolve())]


def test_an_own_run_without_that_step_says_which_steps_it_has(client_alice, alice_run, problem_set):
    r = post_run(client_alice, problem_set, f"run:{alice_run.pk}/step-7")
    assert r.status_code == 400 and r.json()["field"] == "model.name_or_path"
    assert "no checkpoint at step 7" in r.json()["detail"] and "2" in r.json()["detail"]


@pytest.fixture
def hub(monkeypatch, settings, tmp_path):
    """The hub as this server sees it: reachable or not, and a cache under tmp_path (empty at first)."""
    from webapp.runs import model_refs

    class Hub:
        cache = tmp_path / "hf" / "hub"

        def reachable(self, value: bool) -> None:
            monkeypatch.setattr(model_refs, "hub_reachable", lambda: value)

        def download(self, repo_id: str) -> None:  # what `hf download` leaves in the cache
            repo = self.cache / ("models--" + repo_id.replace("/", "--"))
            (repo / "refs").mkdir(parents=True)
            (repo / "refs" / "main").write_text("0" * 40)
            install_model_stub(repo / "snapshots" / ("0" * 40))

    monkeypatch.setenv("HF_HUB_CACHE", str(Hub.cache))
    settings.HF_OFFLINE = False
    hub = Hub()
    hub.reachable(True)
    return hub


@pytest.mark.parametrize("hub_id", ["Qwen/Qwen3.5-9B", "meta-llama/Llama-3.1-8B", "org_1/model.v2"])
def test_hub_ids_are_accepted_and_reach_the_trainer_as_they_are(client_alice, problem_set, hub_id, hub):
    r = post_run(client_alice, problem_set, hub_id)
    assert r.status_code == 201, r.content
    assert trainer_model(r.json()["id"])["name_or_path"] == hub_id


def test_a_hub_id_missing_from_the_cache_of_a_server_without_network_is_refused_at_launch(
        client_alice, problem_set, hub):
    hub.reachable(False)
    r = post_run(client_alice, problem_set, "Qwen/Qwen3.5-9B")
    assert r.status_code == 400 and r.json()["field"] == "model.name_or_path"
    assert "not in this server's hub cache" in r.json()["detail"] and "cannot be reached" in r.json()["detail"]
    # where the server keeps its files (and so as whom it runs: /root/.cache/...) is not a user's business
    assert str(hub.cache) not in r.json()["detail"] and "/hub" not in r.json()["detail"]
    assert not Run.objects.exists()
    hub.download("Qwen/Qwen3.5-9B")
    assert post_run(client_alice, problem_set, "Qwen/Qwen3.5-9B").status_code == 201


def test_a_hub_id_missing_from_the_cache_is_refused_when_the_hub_is_switched_off(
        client_alice, problem_set, hub, settings):
    settings.HF_OFFLINE = True
    r = post_run(client_alice, problem_set, "org/model")
    assert r.status_code == 400 and "CRUCIBLE_HF_OFFLINE=1" in r.json()["detail"]
    assert str(hub.cache) not in r.json()["detail"]
    r = client_alice.post(f"/api/problem-sets/{problem_set.pk}/probe", {"model": "org/model", "samples": 2},
                          content_type="application/json")
    assert r.status_code == 400 and r.json()["field"] == "model"
    assert post_run(client_alice, problem_set, "models/tiny").status_code == 201  # installed models need no hub


def test_an_installed_model_resolves_to_its_directory(client_alice, problem_set, settings):
    nested = install_model_stub(settings.MODELS_DIR / "Qwen" / "Qwen3.5-9B")
    r = post_run(client_alice, problem_set, "models/Qwen/Qwen3.5-9B")
    assert r.status_code == 201, r.content
    assert Run.objects.get(pk=r.json()["id"]).config["model"]["name_or_path"] == "models/Qwen/Qwen3.5-9B"
    assert trainer_model(r.json()["id"])["name_or_path"] == str(nested.resolve())
    r = post_run(client_alice, problem_set, "models/tiny")  # also the default
    assert trainer_model(r.json()["id"])["name_or_path"] == str((settings.MODELS_DIR / "tiny").resolve())


def test_paths_and_tricks_are_all_refused_with_the_same_answer(client_alice, alice_run, problem_set, settings,
                                                               tmp_path):
    outside = install_model_stub(tmp_path / "outside-model")
    os.symlink(outside, settings.MODELS_DIR / "escape")
    os.symlink(alice_run.path / "checkpoints", settings.MODELS_DIR / "alices")
    names = [
        str(settings.MODELS_DIR / "tiny"), "../models/tiny", "./models/tiny", "var/models/tiny", "~/models/tiny",
        f"models/../runs/{alice_run.pk}/checkpoints/step-2", "models/../../../etc", "models/", "models/tiny/",
        "models//tiny", "models/./tiny", "models/tiny/config.json", "models/escape", "models/alices/step-2",
        "models/missing", "Qwen/../../etc", "Qwen/Qwen3.5-9B/../..", "org/name/more", "..", "../..", ".",
        f"run:{alice_run.pk}/step-2/../..", f"run:{alice_run.pk}/../step-2", "run:../1/step-2", "file:///etc/passwd",
        "C:\\models\\tiny", "models\\tiny", "org--x/name", "-org/name",
    ]
    answers = {name: post_run(client_alice, problem_set, name) for name in names}
    assert {n: r.status_code for n, r in answers.items()} == {n: 400 for n in names}
    assert {r.json()["field"] for r in answers.values()} == {"model.name_or_path"}
    assert len({r.json()["detail"] for r in answers.values()}) == 1
    assert "installed: models/tiny" in answers["models/missing"].json()["detail"]  # the escapes are not listed


def test_adapters_cannot_be_named_by_path(client_alice, problem_set, alice_run):
    r = post_run(client_alice, problem_set, "models/tiny", adapters=[str(alice_run.path / "checkpoints/step-2")])
    assert r.status_code == 400 and r.json()["field"] == "model.adapters"


def test_problems_cannot_be_named_by_path(client_alice, problem_set):
    r = client_alice.post("/api/runs", {"name": "x", "problem_set": problem_set.pk,
                                        "config": {**TINY_OVERRIDES, "problems": "/etc/passwd"}},
                          content_type="application/json")
    assert r.status_code == 400 and r.json()["field"] == "problems"


def test_the_new_run_form_applies_the_same_rule(client, other_user, alice_run, bob_set):
    client.force_login(other_user)
    own_tiny = form_data(bob_set, **{"model.name_or_path": "models/tiny"})
    assert client.post("/runs/new", own_tiny).status_code == 302
    for name in (str(alice_run.path / "checkpoints" / "step-2"), f"run:{alice_run.pk}/step-2", "/etc/passwd"):
        r = client.post("/runs/new", form_data(bob_set, **{"model.name_or_path": name}))
        assert r.status_code == 200
        errors = r.context["form"]["model.name_or_path"].errors
        assert errors and "hub id" in errors[0] and str(alice_run.path) not in errors[0]
    assert Run.objects.filter(owner=other_user).count() == 1
