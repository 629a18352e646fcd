"""Problem environments: packages built once per content, read-only in the sandbox, proven by validation.

Builds install real wheels from the package registry: `six` (tiny, pure Python) for the cache's own
behaviour and `numpy` for the end-to-end problem set of the README."""

from __future__ import annotations

import json
import os
import stat
import tempfile

import pytest

from sandbox.backends.process import start_sandboxed
from sandbox.checks import check_problems
from sandbox.environments import EnvironmentCache, default_cache
from sandbox.formats import load_problems_bytes
from sandbox.problems import Environment, Problem, ProblemError
from sandbox.runner import Candidate, Runner

NUMPY = Environment(("numpy==2.*",))
SIX = Environment(("six",))
MEAN = {"id": "np-mean", "kind": "function", "entry_point": "mean", "prompt": "import numpy as np\n\ndef mean(xs):\n",
        "tests": ["assert mean([1, 2, 3]) == 2.0", "assert mean([0.5]) == 0.5"],
        "reference_solution": "import numpy as np\n\ndef mean(xs):\n    return float(np.mean(np.array(xs)))\n",
        "time_limit_s": 10.0, "memory_limit_mb": 512}
ARGMAX = {"id": "np-argmax", "kind": "stdio", "prompt": "Print the index of the largest of the numbers on stdin.",
          "test_cases": [{"input": "3 9 4\n", "output": "1\n"}],
          "reference_solution": "import numpy as np\nprint(int(np.argmax(np.array(input().split(), dtype=int))))\n",
          "time_limit_s": 10.0, "memory_limit_mb": 512}


@pytest.fixture(scope="module", autouse=True)
def env_dir():
    """A cache the sandbox user can read (pytest's tmp_path is private to root)."""
    old = os.environ.get("CRUCIBLE_ENV_DIR")
    path = tempfile.mkdtemp(prefix="crucible-envs-test-")
    os.chmod(path, 0o755)
    os.environ["CRUCIBLE_ENV_DIR"] = path
    yield path
    if old is None:
        del os.environ["CRUCIBLE_ENV_DIR"]
    else:
        os.environ["CRUCIBLE_ENV_DIR"] = old
    import shutil
    shutil.rmtree(path, ignore_errors=True)


def numpy_set(with_environment: bool = True) -> bytes:
    lines = ([{"environment": NUMPY.to_dict()}] if with_environment else []) + [MEAN, ARGMAX]
    return "".join(json.dumps(line) + "\n" for line in lines).encode()


def test_a_numpy_problem_set_validates_in_its_environment():
    loaded = load_problems_bytes(numpy_set())
    assert loaded.errors == [] and loaded.environment == NUMPY
    assert all(p.environment == NUMPY for p in loaded.problems)
    rows = check_problems(loaded.problems, workers=2)
    assert [(r["reference_passed"], r["empty_failed"]) for r in rows] == [(True, True), (True, True)], rows


def test_without_its_environment_validation_names_the_problem_and_the_module():
    loaded = load_problems_bytes(numpy_set(with_environment=False))
    rows = check_problems(loaded.problems, workers=2)
    for row in rows:
        assert not row["reference_passed"]
        assert f"problem {row['problem_id']!r} needs module 'numpy'" in row["detail"], row
        assert "environment.python_packages" in row["detail"]


@pytest.mark.parametrize("mode", ["warm", "cold"])
def test_candidates_of_different_environments_share_a_batch(mode):
    with_np = Problem.from_dict({**MEAN, "environment": NUMPY.to_dict()})
    without = Problem.from_dict({**MEAN, "id": "plain"})
    code = MEAN["reference_solution"]
    cands = [Candidate(problem_id=pid, code=code) for pid in ("np-mean", "plain") * 3]
    with Runner(workers=2, mode=mode) as runner:
        results = runner.run_batch({"np-mean": with_np, "plain": without}, cands)
    assert [r.status.value for r in results] == ["passed", "error"] * 3, [r.detail for r in results]


def test_an_environment_is_built_once_and_reused_across_caches(monkeypatch, env_dir):
    builds = []
    original = EnvironmentCache._build

    def counting(self, final, env):
        builds.append(env)
        return original(self, final, env)

    monkeypatch.setattr(EnvironmentCache, "_build", counting)
    first = EnvironmentCache(env_dir, start=start_sandboxed).site(SIX)
    again = EnvironmentCache(env_dir, start=start_sandboxed).site(Environment(("six",)))  # a fresh cache: another process
    same_content = EnvironmentCache(env_dir, start=start_sandboxed).site(Environment(("six ",)))
    assert first == again == same_content
    assert builds == [SIX]
    problem = Problem(id="six", kind="function", entry_point="f", tests=("assert f() == 'ok'",), environment=SIX)
    with Runner(workers=1) as runner:
        for _ in range(2):
            assert runner.run_batch([problem], [Candidate("six", code="import six\ndef f():\n    return 'ok'\n")]
                                    )[0].passed
    assert builds == [SIX]
    manifest = EnvironmentCache(env_dir, start=start_sandboxed).manifest(SIX)
    assert manifest["python_packages"] == ["six"] and any(n.startswith("six-") for n in manifest["installed"])


def test_the_environment_is_read_only_for_candidates():
    problem = Problem(id="ro", kind="function", entry_point="f", tests=("assert f() == []",), environment=SIX)
    code = ("import os, six\ndef f():\n    root = os.path.dirname(six.__file__)\n    wrote = []\n"
            "    for name in ('six.py', 'planted.py'):\n        try:\n"
            "            open(os.path.join(root, name), 'a').close()\n            wrote.append(name)\n"
            "        except OSError:\n            pass\n    return wrote\n")
    with Runner(workers=1) as runner:
        res = runner.run_batch([problem], [Candidate("ro", code=code)])[0]
    assert res.passed, res.to_dict()
    site = default_cache().site(SIX)
    assert not os.path.exists(os.path.join(site, "planted.py"))
    assert not stat.S_IMODE(os.stat(site).st_mode) & 0o022


def test_a_package_pip_cannot_install_is_an_error_naming_it():
    broken = Environment(("six==0.0.0.1",))
    problem = Problem(id="broken", kind="function", entry_point="f", tests=("assert f()",), environment=broken)
    with Runner(workers=1) as runner:
        res = runner.run_batch([problem], [Candidate("broken", code="def f():\n    return 1\n")])[0]
    assert res.status.value == "error"
    assert "six==0.0.0.1" in res.detail and "pip install failed" in res.detail, res.detail


@pytest.mark.parametrize("value,field", [
    ({"python_packages": "numpy"}, "environment.python_packages"),
    ({"python_packages": ["--index-url=http://evil"]}, "environment.python_packages[0]"),
    ({"python_packages": ["numpy @ https://example.com/n.whl"]}, "environment.python_packages[0]"),
    ({"python_packages": ["../wheels/numpy.whl"]}, "environment.python_packages[0]"),
    ({"packages": ["numpy"]}, "environment.packages"),
])
def test_an_environment_takes_requirement_names_only(value, field):
    with pytest.raises(ProblemError) as err:
        Problem.from_dict({**MEAN, "environment": value})
    assert err.value.field == field


def test_a_problems_own_environment_wins_over_its_sets():
    lines = [{"environment": NUMPY.to_dict()}, MEAN, {**ARGMAX, "environment": {"python_packages": []}}]
    loaded = load_problems_bytes("".join(json.dumps(x) + "\n" for x in lines).encode())
    assert [p.environment for p in loaded.problems] == [NUMPY, Environment(())]
    assert Problem.from_dict(loaded.problems[0].to_dict()) == loaded.problems[0]


def test_a_second_set_environment_line_is_an_error():
    lines = [{"environment": NUMPY.to_dict()}, MEAN, {"environment": SIX.to_dict()}]
    loaded = load_problems_bytes("".join(json.dumps(x) + "\n" for x in lines).encode())
    assert [(e.line, e.field) for e in loaded.errors] == [(3, "environment")]


@pytest.mark.e2e
def test_a_replica_runs_the_environment_of_the_problems_it_is_sent():
    from sandbox.remote import RemoteRunner

    from .replicas import TOKEN, replicas

    loaded = load_problems_bytes(numpy_set())
    with replicas(1, workers=1) as (replica,):
        rows = check_problems(loaded.problems, runner=RemoteRunner([replica.url], TOKEN))
    assert [(r["reference_passed"], r["empty_failed"]) for r in rows] == [(True, True), (True, True)], rows


def test_the_docker_backends_relay_workers_run_an_environment_too():
    from sandbox.backends.docker import LocalRelayExecutor

    code = "import six\ndef f():\n    return 'ok'\n"
    with_six = Problem(id="six", kind="function", entry_point="f", tests=("assert f() == 'ok'",), environment=SIX)
    plain = Problem(id="plain", kind="function", entry_point="f", tests=("assert f() == 'ok'",))
    ex = LocalRelayExecutor()
    try:
        assert [ex.run(p, code).status.value for p in (with_six, plain, with_six)] == ["passed", "error", "passed"]
    finally:
        ex.close()


def test_every_backend_runs_an_environment_importable_and_read_only(executor):
    """Parametrized over the backends (tests/sandbox/conftest.py): on a machine with a Docker engine
    this builds and runs a real environment image; here the docker case is skipped with its reason."""
    code = ("import os, six\ndef f():\n    root = os.path.dirname(six.__file__)\n    wrote = []\n"
            "    for name in ('six.py', 'planted.py'):\n        try:\n"
            "            open(os.path.join(root, name), 'a').close()\n            wrote.append(name)\n"
            "        except OSError:\n            pass\n    return wrote\n")
    problem = Problem(id="ro", kind="function", entry_point="f", tests=("assert f() == []",), environment=SIX)
    plain = Problem(id="plain", kind="function", entry_point="f", tests=("assert f() == []",))
    res = executor.run(problem, code)
    assert res.passed, res.to_dict()
    without = executor.run(plain, code)
    assert without.status.value == "error" and "six" in " ".join([without.detail, *(t.error or "" for t in
                                                                                   without.tests)]), without.to_dict()


def test_a_failed_build_is_not_retried_by_every_candidate_of_the_batch(monkeypatch, env_dir):
    from sandbox.environments import EnvironmentBuildError

    tries = []

    def failing(self, key, env):
        tries.append(key)
        raise EnvironmentBuildError(f"environment [{env.describe()}]: pip install failed (wheels only): no network")

    monkeypatch.setattr(EnvironmentCache, "_build_once", failing)
    cache = EnvironmentCache(env_dir)
    for _ in range(3):
        with pytest.raises(EnvironmentBuildError, match="no network"):
            cache.site(Environment(("six==1.16.0",)))
    assert len(tries) == 1
    monkeypatch.setattr("sandbox.environments.RETRY_FAILED_AFTER_S", 0.0)  # the pause is over: tried again
    with pytest.raises(EnvironmentBuildError):
        cache.site(Environment(("six==1.16.0",)))
    assert len(tries) == 2
