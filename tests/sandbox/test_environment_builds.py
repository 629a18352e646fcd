"""How problem environments are built and kept: package specs are names and versions only, pip runs
in the sandbox as the sandbox user from wheels alone, and the cache keeps to its quotas.

Builds here install from a local wheel directory (CRUCIBLE_ENV_FIND_LINKS), never from the network."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile

import pytest

from sandbox.environments import (EnvironmentBuildError, EnvironmentCache, EnvironmentSettings,
                                  past_user_limit)
from sandbox.backends.process import start_sandboxed
from sandbox.problems import Environment, Problem, ProblemError
from sandbox.service import RequestRefused, parse_batch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FILE_SPECS = ["probe-1.0-py3-none-any.whl", "probe-1.0.tar.gz", "probe-1.0.zip", "probe-1.0.tgz",
              "probe.tar.bz2", "probe==1.0.whl", "wheels\\probe.whl", "probe[./x]", "probe; os_name=='posix'"]


def public_dir(prefix: str) -> str:
    """A directory the sandbox user can read (pytest's tmp_path is private to root)."""
    path = tempfile.mkdtemp(prefix=prefix)
    os.chmod(path, 0o755)
    return path


@pytest.fixture
def wheels():
    path = public_dir("crucible-wheels-test-")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def env_dir():
    path = public_dir("crucible-envs-test-")
    yield path
    shutil.rmtree(path, ignore_errors=True)


def make_wheel(directory: str, name: str, version: str = "1.0", payload_bytes: int = 0) -> str:
    """A pure-Python wheel `name` whose module has `VALUE = 'ok'` and `payload_bytes` of random data."""
    dist = f"{name}-{version}.dist-info"
    files = {f"{name}/__init__.py": b"VALUE = 'ok'\n",
             f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
             f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    if payload_bytes:
        files[f"{name}/payload.bin"] = os.urandom(payload_bytes)
    files[f"{dist}/RECORD"] = "".join(f"{path},,\n" for path in [*files, f"{dist}/RECORD"]).encode()
    path = os.path.join(directory, f"{name}-{version}-py3-none-any.whl")
    with zipfile.ZipFile(path, "w") as z:
        for arcname, data in files.items():
            z.writestr(arcname, data)
    os.chmod(path, 0o644)
    return path


def make_marker_sdist(directory: str, name: str, marker: str) -> str:
    """An sdist `name-1.0.tar.gz` whose setup.py, if it ever runs, writes `marker`."""
    setup = (f"open({marker!r}, 'w').write('setup.py ran as uid %d' % __import__('os').getuid())\n"
             f"from setuptools import setup\nsetup(name={name!r}, version='1.0')\n").encode()
    path = os.path.join(directory, f"{name}-1.0.tar.gz")
    with tarfile.open(path, "w:gz") as tar:
        for arcname, data in {f"{name}-1.0/setup.py": setup,
                              f"{name}-1.0/PKG-INFO": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n".encode()
                              }.items():
            info = tarfile.TarInfo(arcname)
            info.size = len(data)
            tar.addfile(info, __import__("io").BytesIO(data))
    os.chmod(path, 0o644)
    return path


def local(wheels: str, **quotas) -> EnvironmentSettings:
    return EnvironmentSettings(find_links=wheels, **quotas)


FUNCTION = {"id": "p1", "kind": "function", "entry_point": "f", "tests": ["assert f() == 'ok'"],
            "reference_solution": "import probe\ndef f():\n    return probe.VALUE\n"}


@pytest.mark.parametrize("spec", FILE_SPECS)
def test_a_file_like_spec_is_refused_naming_the_problem_the_field_and_the_value(spec):
    with pytest.raises(ProblemError) as err:
        Problem.from_dict({**FUNCTION, "environment": {"python_packages": ["six", spec]}})
    assert err.value.field == "environment.python_packages[1]"
    assert "problem 'p1'" in str(err.value) and repr(spec)[:40] in str(err.value)


def test_the_service_refuses_a_batch_whose_problem_names_a_file():
    body = json.dumps({"problems": [{**FUNCTION, "environment": {"python_packages": ["probe-1.0.tar.gz"]}}],
                       "candidates": [{"problem_id": "p1", "code": "def f():\n    return 'ok'\n"}]}).encode()
    with pytest.raises(RequestRefused) as err:
        parse_batch(body, 16)
    assert "problems[0]: environment.python_packages[0]: problem 'p1'" in str(err.value)
    assert "probe-1.0.tar.gz" in str(err.value)


def test_check_of_a_set_naming_a_local_sdist_refuses_it_and_its_setup_never_runs(tmp_path):
    marker = str(tmp_path / "setup-py-ran")
    make_marker_sdist(str(tmp_path), "probe", marker)
    problem = {**FUNCTION, "environment": {"python_packages": ["probe-1.0.tar.gz"]}}
    (tmp_path / "p.jsonl").write_text(json.dumps(problem) + "\n")
    env = {**os.environ, "PYTHONPATH": ROOT, "CRUCIBLE_ENV_DIR": public_dir("crucible-envs-test-")}
    try:
        out = subprocess.run([sys.executable, "-m", "sandbox", "check", "p.jsonl"], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=300)
    finally:
        shutil.rmtree(env["CRUCIBLE_ENV_DIR"], ignore_errors=True)
    assert out.returncode == 1, out
    assert "environment.python_packages[0]" in out.stderr and "probe-1.0.tar.gz" in out.stderr, out.stderr
    assert "looks like a file name" in out.stderr
    assert not os.path.exists(marker)


def test_the_same_packages_spelled_differently_are_one_build(env_dir, wheels):
    make_wheel(wheels, "probe")
    cache = EnvironmentCache(env_dir, local(wheels), start_sandboxed)
    spellings = [("probe",), ("Probe",), ("probe>=1",), ("PROBE >= 1.0",), ("probe>=1.0.0", "probe")]
    keys = {cache.key(Environment(s)) for s in spellings[2:]}
    assert len(keys) == 1 and cache.key(Environment(spellings[0])) == cache.key(Environment(spellings[1]))
    sites = {cache.site(Environment(s)) for s in spellings}
    assert len(sites) == 2  # `probe` and `probe>=1` are two lists; each spelling of either is one build
    assert len([e for e in cache.entries()]) == 2


def test_a_build_installs_wheels_as_the_sandbox_user_and_hands_root_the_result(env_dir, wheels, monkeypatch):
    if os.geteuid() != 0:
        pytest.skip("the sandbox user differs from ours only when we are root")
    import sandbox.environments as environments

    make_wheel(wheels, "probe")
    owners = []
    original = environments._own_and_open_to_the_sandbox

    def recording(path):
        for dirpath, _, files in os.walk(os.path.join(path, "site")):
            owners.extend(os.lstat(os.path.join(dirpath, f)).st_uid for f in files)
        original(path)

    monkeypatch.setattr(environments, "_own_and_open_to_the_sandbox", recording)
    site = EnvironmentCache(env_dir, local(wheels), start_sandboxed).site(Environment(("probe",)))
    assert owners and set(owners) == {65534}  # what pip wrote, before it was made ours
    assert os.stat(os.path.join(site, "probe", "__init__.py")).st_uid == 0


def test_pip_is_sandboxed_away_from_the_working_directory_the_data_and_the_variables(env_dir, monkeypatch):
    monkeypatch.setenv("CRUCIBLE_SANDBOX_TOKEN", "secret")
    probe = ("import os, sys; sys.stderr.write(repr((os.getuid(), os.path.exists(%r), os.path.exists(%r), "
             "sorted(k for k in os.environ if k.startswith('CRUCIBLE')))))" % (ROOT, env_dir))
    proc = start_sandboxed(["/usr/bin/python3", "-I", "-c", probe], scratch_mb=16, network=False)
    _, err = proc.communicate(timeout=60)
    uid, sees_cwd, sees_cache, variables = eval(err.decode())
    assert (sees_cwd, sees_cache, variables) == (False, False, [])
    if os.geteuid() == 0:
        assert uid == 65534


def test_an_sdist_in_the_index_is_never_built(env_dir, wheels):
    marker = os.path.join(public_dir("crucible-marker-"), "ran")
    os.chmod(os.path.dirname(marker), 0o777)  # were setup.py to run as the sandbox user, it could write here
    make_marker_sdist(wheels, "probe", marker)
    with pytest.raises(EnvironmentBuildError, match="pip install failed"):
        EnvironmentCache(env_dir, local(wheels), start_sandboxed).site(Environment(("probe",)))
    assert not os.path.exists(marker)
    shutil.rmtree(os.path.dirname(marker))


def test_a_build_past_the_size_limit_is_removed_and_refused_naming_the_package(env_dir, wheels, monkeypatch):
    from sandbox.runner import Candidate, Runner

    make_wheel(wheels, "probe", payload_bytes=3 << 20)
    monkeypatch.setenv("CRUCIBLE_ENV_DIR", env_dir)
    monkeypatch.setenv("CRUCIBLE_ENV_FIND_LINKS", wheels)
    monkeypatch.setenv("CRUCIBLE_ENV_MAX_MB", "1")
    problem = Problem.from_dict({**FUNCTION, "id": "big", "environment": {"python_packages": ["probe"]}})
    with Runner(workers=1) as runner:
        res = runner.run_batch([problem], [Candidate("big", code=FUNCTION["reference_solution"])])[0]
    assert res.status.value == "error"
    assert "problem 'big'" in res.detail and "[probe]" in res.detail and "CRUCIBLE_ENV_MAX_MB" in res.detail, \
        res.detail
    assert [n for n in os.listdir(env_dir) if not n.startswith(".")] == []


def test_past_the_cache_total_the_least_recently_used_go_and_one_in_use_stays(env_dir, wheels):
    for name in ("pa", "pb", "pc", "pd"):
        make_wheel(wheels, name, payload_bytes=400 << 10)
    settings = local(wheels, cache_max_mb=1)
    in_use = EnvironmentCache(env_dir, settings, start_sandboxed)
    a = in_use.site(Environment(("pa",)))  # held by a live cache: in use
    other = EnvironmentCache(env_dir, settings, start_sandboxed)
    b = other.site(Environment(("pb",)))
    other.close()  # b is no longer used by anyone
    long_ago = time.time() - 3600
    for site in (a, b):
        os.utime(os.path.join(os.path.dirname(site), "crucible-env.json"), (long_ago, long_ago))
    c = EnvironmentCache(env_dir, settings, start_sandboxed).site(Environment(("pc",)))
    assert os.path.exists(a) and not os.path.exists(b) and os.path.exists(c)
    with pytest.raises(EnvironmentBuildError, match="cache is full"):  # a and c are both in use
        EnvironmentCache(env_dir, settings, start_sandboxed).site(Environment(("pd",)))
    assert os.path.exists(a) and os.path.exists(c)
    assert sorted(n for n in os.listdir(env_dir) if not n.startswith(".")) == sorted(
        os.path.basename(os.path.dirname(s)) for s in (a, c))


def test_an_environment_unused_past_the_idle_time_is_removed(env_dir, wheels):
    make_wheel(wheels, "pa")
    make_wheel(wheels, "pb")
    settings = local(wheels, max_idle_days=30)
    first = EnvironmentCache(env_dir, settings, start_sandboxed)
    old = first.site(Environment(("pa",)))
    first.close()
    forty_days_ago = time.time() - 40 * 86400
    os.utime(os.path.join(os.path.dirname(old), "crucible-env.json"), (forty_days_ago, forty_days_ago))
    EnvironmentCache(env_dir, settings, start_sandboxed).site(Environment(("pb",)))
    assert not os.path.exists(old)


def test_an_environment_is_released_after_a_while_unasked(env_dir, wheels, monkeypatch):
    import sandbox.environments as environments

    make_wheel(wheels, "pa")
    make_wheel(wheels, "pb")
    cache = EnvironmentCache(env_dir, local(wheels), start_sandboxed)
    cache.site(Environment(("pa",)))
    monkeypatch.setattr(environments, "IN_USE_S", 0.0)
    cache.site(Environment(("pb",)))
    key = cache.key(Environment(("pa",)))
    assert key not in cache._held and cache._evict(key)  # nobody uses it any more: evictable


def test_a_user_past_the_limit_of_distinct_environments_is_refused_naming_problem_and_package():
    problems = [Problem.from_dict({**FUNCTION, "id": pid, "environment": {"python_packages": packages}})
                for pid, packages in (("same", ["NumPy>=1.0"]), ("new", ["scipy"]), ("newer", ["pandas"]))]
    existing = {Environment(("numpy>=1",)).requirements(), Environment(("six",)).requirements()}
    assert past_user_limit(existing, problems[:1], limit=2) == []  # one it has, spelled otherwise
    refused = past_user_limit(existing, problems, limit=3)
    assert [pid for pid, _ in refused] == ["newer"]
    assert "problem 'newer'" in refused[0][1] and "[pandas]" in refused[0][1] and "at most 3" in refused[0][1]


@pytest.mark.parametrize("variable,value", [("CRUCIBLE_ENV_MAX_MB", "0"), ("CRUCIBLE_ENV_CACHE_MAX_MB", "lots"),
                                            ("CRUCIBLE_ENV_INDEX_URL", "file:///etc"),
                                            ("CRUCIBLE_ENV_FIND_LINKS", "relative/dir")])
def test_a_bad_setting_names_the_variable_and_its_value(variable, value):
    import re
    with pytest.raises(ValueError, match=f"{variable}='?{re.escape(value)}"):
        EnvironmentSettings.from_environ({variable: value})
