"""Fixtures for runs: a real problem set (W1's importer), run dirs under tmp, a run, tiny models (the
factories they use are tests/factories.py)."""
from __future__ import annotations

import pytest

from tests.factories import install_model_stub, make_problem_set, make_run, make_user


@pytest.fixture(autouse=True)
def runs_dir(settings, tmp_path):
    settings.RUNS_DIR = tmp_path / "runs"
    settings.MODELS_DIR = tmp_path / "models"
    install_model_stub(settings.MODELS_DIR / "tiny")  # what the web default, models/tiny, names
    install_model_stub(settings.MODELS_DIR / "tiny-qwen3_5")  # the tiny Qwen3.5 demo preset's model
    return settings.RUNS_DIR


@pytest.fixture
def problem_set(user):
    return make_problem_set(user)


@pytest.fixture
def run(user, problem_set):
    return make_run(user, "first run", problem_set)


@pytest.fixture(scope="session")
def models_dir(tmp_path_factory):
    """A models directory holding both tiny models, each built once per session (untrained: they fail
    nearly every problem, which is fine): ``tiny`` (dense Qwen3) and ``tiny-qwen3_5`` (hybrid Qwen3.5),
    the names the CPU demo presets use."""
    from training.tiny_model import build_tiny_model

    root = tmp_path_factory.mktemp("models")
    build_tiny_model(root / "tiny")
    build_tiny_model(root / "tiny-qwen3_5", arch="qwen3_5")
    return root


@pytest.fixture(scope="session")
def tiny_model_dir(models_dir):
    """The tiny Qwen3 model (``models/tiny``)."""
    return models_dir / "tiny"


def demo_config(steps=2, model=None):
    """The CPU demo preset (models/tiny: point settings.MODELS_DIR at ``models_dir``), shrunk to a few
    seconds a step; ``model`` names another installed model (``models/tiny-qwen3_5``)."""
    from webapp.runs.presets import get_preset
    from webapp.runs.config import merge_config

    if model is not None:
        return merge_config(demo_config(steps), {"model": {"name_or_path": model}})
    return merge_config(get_preset("cpu-demo")["config"], {
        "sampling": {"problems_per_step": 2, "candidates_per_problem": 2, "max_new_tokens": 24},
        "train": {"steps": steps, "eval_every": 1, "eval_samples": 1, "checkpoint_every": 1},
    })


# ---- websocket clients of /ws/runs/<id>/ -------------------------------------------------------------

ORIGIN = (b"origin", b"http://127.0.0.1")


def setup_run(username="wsowner"):
    """A user (password ``ws-password-1``), a run of theirs and an API token for them."""
    from webapp.accounts.models import ApiToken

    user = make_user(username, password="ws-password-1")
    run = make_run(user, "ws run")
    return user, run, ApiToken.issue(user, "test")[1]


def token_header(token):
    return (b"authorization", f"Bearer {token}".encode())


async def connect(run, token, query=""):
    from channels.testing import WebsocketCommunicator

    from webapp.asgi import application

    communicator = WebsocketCommunicator(application, f"/ws/runs/{run.pk}/{query}",
                                         headers=[ORIGIN, token_header(token)])
    connected, code = await communicator.connect(timeout=10)  # default 1 s: too short on a loaded machine
    return communicator, connected, code


async def receive_all(communicator, timeout=1.0):
    # receive_nothing (unlike a timed-out receive) leaves the application running.
    out = []
    while not await communicator.receive_nothing(timeout=timeout):
        out.append(await communicator.receive_json_from(timeout=5))
    return out
