"""Crucible's sandbox: problems and formats, candidate assembly, isolated execution with verdicts
that cannot be faked. Imports are lazy so `import sandbox` stays cheap (no subprocesses, no threads).
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    # problems (S1)
    "Problem": "problems", "TestCase": "problems", "ProblemError": "problems",
    # problem files (S1)
    "LoadError": "formats", "LoadResult": "formats", "load_problems": "formats",
    "load_problems_bytes": "formats", "dump_problems": "formats", "FORMATS": "formats",
    # candidate assembly (S1)
    "Assembled": "candidate", "assemble": "candidate", "extract_code": "candidate",
    # execution (S2)
    "Outcome": "result", "TestResult": "result", "ExecutionResult": "result",
    "Limits": "limits",
    "Executor": "backends.base", "BACKENDS": "backends.base", "get_executor": "backends.base",
    "SandboxUnavailable": "backends.base",
    "Candidate": "runner", "Runner": "runner", "BatchRunner": "runner", "run_batch": "runner",
    "check_problems": "checks",
    # execution at scale (issue 21)
    "Environment": "problems", "RemoteRunner": "remote", "RemoteUnavailable": "remote",
    "make_runner": "remote",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'sandbox' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__():
    return __all__
