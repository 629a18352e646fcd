"""The executor interface, the backend registry, and the base class of the pooled backends.

Every backend starts the same in-sandbox worker (sandbox/harness.py) somewhere isolated and hands it
executions through a `Channel` (sandbox/protocol/channel.py); `PooledExecutor.run` borrows a worker
and `sandbox.protocol.driver.drive_execution` runs the execution over it. Backends differ only in
how they isolate and start workers.
"""

from __future__ import annotations

from typing import Callable

from .. import flags
from ..limits import Limits
from ..protocol.channel import Channel, WorkerBroken
from ..protocol.driver import drive_execution
from ..result import ExecutionResult, Outcome, TestResult

BACKENDS: dict[str, Callable[..., "Executor"]] = {}


def register(name: str):
    def deco(factory):
        BACKENDS[name] = factory
        return factory
    return deco


def backend_names() -> list[str]:
    """Names of the registered backends (whether or not each can run on this machine)."""
    import importlib
    for module in ("process", "docker"):  # registration
        try:
            importlib.import_module(f"{__package__}.{module}")
        except ImportError:
            pass
    return sorted(BACKENDS)


def get_executor(name: str = "process", **options) -> "Executor":
    """An executor of backend `name`; an unknown name raises and lists the valid ones."""
    backend_names()
    if name not in BACKENDS:
        raise ValueError(f"unknown sandbox backend {name!r}; valid: {', '.join(sorted(BACKENDS))}")
    return BACKENDS[name](**options)


class SandboxUnavailable(RuntimeError):
    """The backend cannot run here (no engine, no permission); the message says why."""


def unavailable_reason(name: str) -> str | None:
    """Why backend ``name`` cannot run on this machine (a few seconds at most to find out), or None.

    What a launcher asks before it starts anything costly (a model load) on top of a sandbox that
    would fail at the first execution.
    """
    backend_names()
    if name not in BACKENDS:
        return f"unknown sandbox backend {name!r}; valid: {', '.join(sorted(BACKENDS))}"
    check = getattr(BACKENDS[name], "unavailable", None)
    return check() if check is not None else None


class Executor:
    """One interface for every backend: run one candidate program against one problem."""

    name = "base"

    @classmethod
    def unavailable(cls) -> str | None:
        """Why this backend cannot run here, or None; a cheap check, never an execution."""
        return None

    def run(self, problem, code: str, limits: Limits | None = None, *, syntax_ok: bool | None = None,
            format_ok: bool = True, assembly_detail: str = "") -> ExecutionResult:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _not_run(problem, status: Outcome, detail: str, why: str) -> ExecutionResult:
    names = ([f"case {i + 1}" for i in range(len(problem.test_cases))] if problem.kind == "stdio"
             else [f"test {i + 1}" for i in range(len(problem.tests))])
    return ExecutionResult(status=status, detail=detail, tests=[TestResult(name=n, error=f"not run: {why}")
                                                                for n in names])


def _environment_site(executor, problem) -> tuple[str | None, ExecutionResult | None]:
    """(what the executor's workers need for the problem's environment, None), built on first use (see
    `PooledExecutor.environment_site`); or (None, an `error` result saying why it cannot run) when this
    backend has no environments or the build failed."""
    from ..environments import EnvironmentBuildError
    env = problem.environment
    if not getattr(executor, "supports_environments", False):
        return None, _not_run(problem, Outcome.ERROR, f"problem {problem.id!r} needs the environment "
                              f"[{env.describe()}], which the {executor.name} backend cannot run yet; "
                              "use the process backend", "no environment")
    try:
        return executor.environment_site(env), None
    except (EnvironmentBuildError, OSError, ValueError) as e:
        return None, _not_run(problem, Outcome.ERROR, f"problem {problem.id!r}: {e}", "environment build failed")


class PooledExecutor(Executor):
    """An executor that lends started workers (`_borrow`) and takes them back (`_give_back`): the
    process and docker backends. `run` is the same for both."""

    mode = "warm"
    """`warm`: a worker serves many executions; `cold`: one each."""
    max_executions = 500
    """Executions a warm worker serves before it is recycled."""
    _closed = False
    """Set by `close`: nothing given back is kept any more."""

    def _borrow(self, limits: Limits, site: str | None = None) -> Channel:
        """A started worker for an execution under `limits` (idle, or started now), with the environment
        `site` (from `environment_site`; None: the standard library only)."""
        raise NotImplementedError

    def environment_site(self, env) -> str:
        """What a worker of `env` needs, built on first use, as `_borrow(limits, site)` takes it: here the
        host directory of its packages (sandbox.environments); the docker backend answers an image tag."""
        from ..environments import default_cache
        return default_cache().site(env, self.start_sandboxed)

    def start_sandboxed(self, argv: list[str], **how):
        """Start a program that must not run on the host as us (an environment's pip) in this backend's
        sandbox (sandbox.backends.process `start_sandboxed`); OSError where the backend has none."""
        raise OSError(f"the {self.name} backend cannot sandbox an environment build")

    def _give_back(self, worker: Channel, healthy: bool) -> None:
        """Take `worker` back: kept for the next execution when healthy, else closed."""
        raise NotImplementedError

    def _keeps(self, worker: Channel, healthy: bool) -> bool:
        """Whether a worker given back may serve the next execution: warm mode, an open pool, and a
        healthy, live worker without anomaly and under its execution budget."""
        return (self.mode == "warm" and healthy and not self._closed and worker.alive()
                and worker.anomaly is None and worker.executions < self.max_executions)

    def run(self, problem, code: str, limits: Limits | None = None, *, syntax_ok: bool | None = None,
            format_ok: bool = True, assembly_detail: str = "") -> ExecutionResult:
        """Judge `code` on a borrowed worker: a program that does not compile is judged here without
        a worker; a worker found broken at the start of an execution is replaced once."""
        limits = limits or Limits.for_problem(problem)
        if syntax_ok is None:
            from ..candidate import parse
            tree, why = parse(code)
            syntax_ok, assembly_detail = tree is not None, why or assembly_detail
        if not syntax_ok:
            names = ([f"case {i + 1}" for i in range(len(problem.test_cases))] if problem.kind == "stdio"
                     else [f"test {i + 1}" for i in range(len(problem.tests))])
            tests = [TestResult(name=n, error="not run: the program does not compile") for n in names]
            result = ExecutionResult(status=Outcome.SYNTAX_ERROR, syntax_ok=False, format_ok=False,
                                     tests=tests, detail=assembly_detail)
            result.flags = flags.detect(problem, code, result)
            return result
        env = getattr(problem, "environment", None)
        site = None
        if env is not None and env.python_packages:
            site, failure = _environment_site(self, problem)
            if failure is not None:
                return failure
        for attempt in (1, 2):
            w = self._borrow(limits, site) if site else self._borrow(limits)
            try:
                result, healthy = drive_execution(w, problem, code, limits)
            except WorkerBroken:
                self._give_back(w, False)
                if attempt == 2:
                    raise
                continue  # a worker that was already broken before this execution
            except BaseException:
                self._give_back(w, False)
                raise
            if w.anomaly:
                result.detail = "; ".join(filter(None, [result.detail, w.anomaly]))
            self._give_back(w, healthy)
            break
        result.syntax_ok, result.format_ok = True, format_ok
        if assembly_detail and not format_ok:
            result.detail = "; ".join(filter(None, [result.detail, f"format: {assembly_detail}"]))
        result.flags = flags.detect(problem, code, result)
        return result
