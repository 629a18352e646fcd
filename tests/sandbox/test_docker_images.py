"""The docker backend runs a problem environment as an image of its own, built once per content.

No Docker engine runs on the development machines, so these tests drive the backend's real code
against a recording fake of the Docker SDK client (tests/sandbox/fake_docker.py): they check the
build context and tag, the reuse, and the options of the containers (image, no host mounts, the
same isolation as without an environment). The fake's containers are local unisolated processes
running the real relay worker, and its images have no content: whether pip installs the packages
in a real image, and whether the isolation holds in a real container, is for the docker
conformance suite on a machine with an engine (skipped here with its reason)."""

from __future__ import annotations

import json
import re

import pytest

from sandbox.backends.docker import DockerExecutor
from sandbox.backends.docker_images import image_key
from sandbox.problems import Environment, Problem

from .fake_docker import FakeDocker

BASE = "python:3.11-slim"
SIX = Environment(("six",))
NUMPY = Environment(("numpy==2.*", "pandas>=2,<3"))
# Inside a fake container the image's packages do not exist; their place on sys.path does.
ON_PATH = "import sys\ndef f():\n    return '/opt/crucible-env' in sys.path\n"


def problem(pid: str, env: Environment | None = None) -> Problem:
    return Problem(id=pid, kind="function", entry_point="f", tests=("assert f() is True",),
                   environment=env or Environment(()))


@pytest.fixture
def engine():
    return FakeDocker(BASE)


@pytest.fixture
def executor(engine):
    ex = DockerExecutor(image=BASE, client=engine)
    yield ex
    ex.close()


def test_an_environment_runs_in_an_image_built_from_a_generated_dockerfile(engine, executor):
    res = executor.run(problem("np", NUMPY), ON_PATH)
    assert res.passed, res.to_dict()
    (build,) = engine.builds
    assert set(build.files) == {"Dockerfile"}  # nothing from the host goes into the image
    lines = build.files["Dockerfile"].splitlines()
    assert lines[0] == f"FROM {BASE}"
    runs = [json.loads(line[len("RUN "):]) for line in lines if line.startswith("RUN ")]
    pip = runs[0]
    assert pip[:4] == ["python3", "-m", "pip", "install"]
    assert pip[-2:] == ["numpy==2.*", "pandas<3,>=2"]  # normalized; exec form: no shell reads it
    assert "--only-binary=:all:" in pip and pip[pip.index("--target") + 1] == "/opt/crucible-env"
    assert runs[1] == ["chmod", "-R", "a+rX,go-w", "/opt/crucible-env"]
    kw = build.kwargs
    assert re.fullmatch(r"crucible-env:[0-9a-f]{32}", kw["tag"])
    assert kw["custom_context"] is True and kw["pull"] is False
    assert kw["labels"]["crucible.env.key"] == kw["tag"].split(":")[1]
    assert json.loads(kw["labels"]["crucible.env.packages"]) == ["numpy==2.*", "pandas<3,>=2"]
    (container,) = engine.created
    assert container.image == kw["tag"]


def test_the_image_is_built_once_and_reused_for_the_same_content(engine, executor):
    same = Environment((" six",))  # the same requirement list, written differently
    for p in (problem("a", SIX), problem("b", same), problem("a", SIX)):
        assert executor.run(p, ON_PATH).passed
    assert len(engine.builds) == 1
    # Another process (a fresh executor) on the same engine finds the image there and builds nothing.
    other = DockerExecutor(image=BASE, client=engine)
    try:
        assert other.run(problem("c", SIX), ON_PATH).passed
    finally:
        other.close()
    assert len(engine.builds) == 1
    assert {c.image for c in engine.created} == {engine.builds[0].kwargs["tag"]}


def test_each_distinct_environment_gets_an_image_of_its_own(engine, executor):
    for p in (problem("six", SIX), problem("np", NUMPY), problem("plain")):
        res = executor.run(p, ON_PATH)
        assert res.passed is (p.id != "plain"), res.to_dict()  # the plain one has no /opt/crucible-env
    tags = [b.kwargs["tag"] for b in engine.builds]
    assert len(set(tags)) == 2
    assert [c.image for c in engine.created] == [*tags, BASE]


def test_environment_containers_have_the_isolation_of_plain_ones_and_no_host_mount(engine, executor):
    executor.run(problem("plain"), ON_PATH)
    executor.run(problem("six", SIX), ON_PATH)
    plain, env = (c.kwargs for c in engine.created)
    assert env == plain  # every option but the image
    for key in ("volumes", "mounts", "binds", "devices", "privileged", "cap_add"):
        assert not env.get(key), key
    assert env["network_mode"] == "none" and env["read_only"] is True and env["cap_drop"] == ["ALL"]
    assert env["security_opt"] == ["no-new-privileges:true"] and env["user"] == "65534:65534"
    assert env["ipc_mode"] == "private" and env["pids_limit"] > 0 and env["mem_limit"] > 0
    assert env["environment"]["OPENBLAS_NUM_THREADS"] == "1"  # numpy must not start a thread per host core


def test_a_new_base_image_builds_a_new_environment_image(engine, executor):
    executor.run(problem("six", SIX), ON_PATH)
    engine.images_held[0].id = "sha256:base2"  # `docker pull` brought a newer base under the same name
    again = DockerExecutor(image=BASE, client=engine)
    try:
        assert again.run(problem("six", SIX), ON_PATH).passed
    finally:
        again.close()
    first, second = (b.kwargs["tag"] for b in engine.builds)
    assert first != second
    assert second == f"crucible-env:{image_key(SIX, 'sha256:base2', 'python3')}"


def test_an_image_under_the_tag_that_this_recipe_did_not_build_is_rebuilt(engine, executor):
    executor.run(problem("six", SIX), ON_PATH)
    tag = engine.builds[0].kwargs["tag"]
    engine.images_held[-1].labels = {}  # someone tagged another image with our name
    other = DockerExecutor(image=BASE, client=engine)
    try:
        assert other.run(problem("six", SIX), ON_PATH).passed
    finally:
        other.close()
    assert [b.kwargs["tag"] for b in engine.builds] == [tag, tag]


def test_a_failed_build_is_an_error_result_naming_the_packages_and_quoting_pip(engine, executor):
    engine.fail_builds = "ERROR: No matching distribution found for six==0.0.0.1"
    broken = Environment(("six==0.0.0.1",))
    res = executor.run(problem("broken", broken), ON_PATH)
    assert res.status.value == "error"
    assert "six==0.0.0.1" in res.detail and "pip install failed in the docker image build" in res.detail
    assert "No matching distribution found" in res.detail, res.detail
    assert engine.created == []  # nothing ran


def test_a_failed_build_is_not_retried_by_every_candidate_of_the_batch(engine, executor, monkeypatch):
    engine.fail_builds = "ERROR: Could not find a version that satisfies the requirement six==0.0.0.1"
    broken = problem("broken", Environment(("six==0.0.0.1",)))
    details = {executor.run(broken, ON_PATH).detail for _ in range(3)}
    assert len(engine.builds) == 1 and len(details) == 1
    # After the pause (here: none) the next candidate tries again, and a build that now works is used.
    monkeypatch.setattr("sandbox.backends.docker_images.RETRY_FAILED_AFTER_S", 0.0)
    engine.fail_builds = None
    assert executor.run(broken, ON_PATH).passed
    assert len(engine.builds) == 2
