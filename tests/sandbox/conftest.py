"""Sandbox fixtures: one executor per available backend, and the end-of-suite leak check."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sandbox.limits import Limits
from sandbox.problems import Problem
from training.engines.guardian import descendants

BACKEND_IDS = ("process-warm", "process-cold", "docker")
_SKIPPED: dict[str, str] = {}
_EXECUTORS: list = []


def _docker_reason() -> str | None:
    try:
        import docker  # noqa: F401
    except ImportError as e:
        return f"docker SDK not installed ({e})"
    try:
        import docker as d
        d.from_env(timeout=3).ping()
    except Exception as e:
        return f"no Docker engine answers docker.from_env().ping(): {type(e).__name__}: {str(e)[:120]}"
    return None


def _bwrap_reason() -> str | None:
    from sandbox.isolation.programs import find_bwrap
    return None if find_bwrap() else "bubblewrap not found: process backend runs with rlimits only"


def make_executor(backend_id: str):
    from sandbox.backends import get_executor
    if backend_id.startswith("process"):
        return get_executor("process", mode=backend_id.split("-")[1])
    if backend_id == "docker":
        return get_executor("docker")
    raise ValueError(backend_id)


@pytest.fixture(scope="session", params=BACKEND_IDS)
def executor(request):
    backend_id = request.param
    if backend_id == "docker":
        reason = _docker_reason()
        if reason:
            _SKIPPED[backend_id] = reason
            pytest.skip(f"docker backend skipped: {reason}")
    ex = make_executor(backend_id)
    ex.backend_id = backend_id
    _EXECUTORS.append(ex)
    yield ex
    ex.close()


def pytest_terminal_summary(terminalreporter):
    if _SKIPPED or _EXECUTORS:
        terminalreporter.section("sandbox backends")
        for ex in _EXECUTORS:
            terminalreporter.write_line(f"ran:     {ex.backend_id}")
        for name, reason in _SKIPPED.items():
            terminalreporter.write_line(f"skipped: {name}: {reason}")
        reason = _bwrap_reason()
        if reason:
            terminalreporter.write_line(f"note:    {reason}")


ROOT = Path(__file__).resolve().parents[2]


def cli(*args, cwd=None):
    """``python -m sandbox ARGS`` from the checkout's root: the CompletedProcess, output as text."""
    return subprocess.run([sys.executable, "-m", "sandbox", *map(str, args)], capture_output=True,
                          text=True, cwd=ROOT, timeout=120)


def fn_problem(tests, *, setup: str = "", entry_point: str = "f", time_limit_s: float = 2.0,
               memory_limit_mb: int = 128, pid: str = "p") -> Problem:
    return Problem(id=pid, kind="function", entry_point=entry_point, tests=tuple(tests), setup=setup,
                   time_limit_s=time_limit_s, memory_limit_mb=memory_limit_mb)


def stdio_problem(cases, *, checker: str = "tokens", time_limit_s: float = 1.0) -> Problem:
    return Problem(id="s", kind="stdio", test_cases=[{"input": i, "output": o} for i, o in cases],
                   checker=checker, time_limit_s=time_limit_s, memory_limit_mb=128)


def limits(problem, **kw) -> Limits:
    return Limits.for_problem(problem).with_(**kw)


# --- the leak check ----------------------------------------------------------------------------

def processes_in_cgroups_of(pid: int) -> set[int]:
    """The processes in the sandbox cgroups that the process `pid` created (`crucible-<pid>/...`)."""
    tag = f"crucible-{pid}/"
    found = set()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cgroup") as f:
                if tag in f.read():
                    found.add(int(name))
        except OSError:
            continue
    return found


def _is_sandbox_process(pid: int) -> bool:
    try:
        if os.stat(f"/proc/{pid}").st_uid == 65534:
            return True
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read()
        return b"bwrap" in cmd or b"harness.py" in cmd
    except OSError:
        return False


def leftover_processes() -> set[int]:
    """Sandbox processes started by this test process (its descendants running as the sandbox user
    or bubblewrap/harness, or anything in its sandbox cgroups). Other fixtures' services (Redis...)
    are not ours to judge."""
    mine = {pid for pid in descendants(os.getpid()) if _is_sandbox_process(pid)}
    return (mine | processes_in_cgroups_of(os.getpid())) - {os.getpid()}


@pytest.fixture(scope="session", autouse=True)
def no_process_outlives_the_suite():
    os.environ["CRUCIBLE_TEST_SECRET"] = "hunter2-secret-token"
    yield
    for ex in _EXECUTORS:
        ex.close()
    end = time.monotonic() + 5
    left = leftover_processes()
    while left and time.monotonic() < end:
        time.sleep(0.1)
        left = leftover_processes()
    details = []
    for pid in left:
        try:
            details.append(f"{pid}: {open(f'/proc/{pid}/cmdline', 'rb').read()[:100]!r}")
        except OSError:
            pass
    assert not details, "processes started by the sandbox suite are still alive: " + "; ".join(details)
