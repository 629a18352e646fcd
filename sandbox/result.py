"""Outcome enum and the execution result that serializes to the JSON of docs/design.md "Execution result (sandbox/)"."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


class Outcome(str, Enum):
    """How an execution ended (judge0's outcome list, named as in docs/design.md)."""

    PASSED = "passed"
    FAILED = "failed"
    ERROR = "error"
    SYNTAX_ERROR = "syntax_error"
    TIMEOUT = "timeout"
    MEMORY = "memory"
    OUTPUT_LIMIT = "output_limit"
    KILLED = "killed"

    def __str__(self) -> str:
        return self.value

    @property
    def label(self) -> str:
        """How a person reads it (judge0's words): ``failed`` is a wrong answer."""
        return _LABELS[self]

    @property
    def infrastructure(self) -> bool:
        """The limit or signal that ended it is the sandbox's or the machine's doing, not the candidate's
        own failure (a memory or output cap, a kill from outside)."""
        return self in (Outcome.MEMORY, Outcome.OUTPUT_LIMIT, Outcome.KILLED)


_LABELS = {
    Outcome.PASSED: "passed", Outcome.FAILED: "wrong answer", Outcome.ERROR: "runtime error",
    Outcome.SYNTAX_ERROR: "syntax error", Outcome.TIMEOUT: "timeout", Outcome.MEMORY: "memory limit",
    Outcome.OUTPUT_LIMIT: "output limit", Outcome.KILLED: "killed",
}


@dataclass
class TestResult:
    """One test: an assertion of a function problem or one stdio case."""

    __test__ = False  # not a pytest test class

    name: str
    passed: bool = False
    error: str | None = None
    """Why it failed (exception, mismatch, 'not run: ...'); None when it passed."""
    time_s: float = 0.0

    def to_dict(self) -> dict:
        return {"name": self.name, "passed": self.passed, "error": self.error,
                "time_s": round(self.time_s, 6)}

    @classmethod
    def from_dict(cls, d: dict) -> "TestResult":
        return cls(name=str(d["name"]), passed=bool(d["passed"]), error=d.get("error"),
                   time_s=float(d.get("time_s") or 0.0))


_FIELDS = ("status", "tests_passed", "tests_total", "tests", "syntax_ok", "format_ok", "wall_time_s",
           "cpu_time_s", "peak_memory_mb", "stdout", "stderr", "stdout_truncated",
           "stderr_truncated", "exit_code", "detail", "isolation", "isolation_features", "flags")


@dataclass
class ExecutionResult:
    """The verdict on one candidate; `to_dict()` is exactly the documented JSON object."""

    status: Outcome
    tests: list[TestResult] = field(default_factory=list)
    syntax_ok: bool = True
    format_ok: bool = True
    wall_time_s: float = 0.0
    cpu_time_s: float = 0.0
    peak_memory_mb: float = 0.0
    stdout: str = ""
    stderr: str = ""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    exit_code: int | None = None
    """The program's exit status; negative for a signal (-9 = SIGKILL); None when it never started."""
    detail: str = ""
    """Harness notes (why a status was given), never mixed into stdout/stderr."""
    isolation: str = "none"
    isolation_features: list[str] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)
    """Reward-hacking signs (sandbox/flags.py vocabulary); descriptive, they never change `status`."""

    def __post_init__(self) -> None:
        self.status = Outcome(self.status)

    @property
    def tests_passed(self) -> int:
        return sum(1 for t in self.tests if t.passed)

    @property
    def tests_total(self) -> int:
        return len(self.tests)

    @property
    def passed(self) -> bool:
        return self.status is Outcome.PASSED

    def to_dict(self) -> dict:
        d = {}
        for name in _FIELDS:
            value = getattr(self, name)
            if name == "status":
                value = value.value
            elif name == "tests":
                value = [t.to_dict() for t in value]
            elif name in ("wall_time_s", "cpu_time_s", "peak_memory_mb"):
                value = round(float(value), 4)
            elif name in ("isolation_features", "flags"):
                value = list(value)
            d[name] = value
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "ExecutionResult":
        kwargs = {k: d[k] for k in _FIELDS if k in d and k not in ("tests", "tests_passed",
                                                                   "tests_total")}
        kwargs["tests"] = [TestResult.from_dict(t) for t in d.get("tests", [])]
        return cls(**kwargs)
