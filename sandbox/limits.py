"""Resource limits of one execution (docs/design.md "Execution result (sandbox/)": Limits)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

MAX_EXECUTION_TIME_S = 600.0
"""Upper bound of `Limits.time_limit_s`, which a caller may set above a problem's own limit (those stop at
`problems.MAX_TIME_LIMIT_S`)."""
MAX_MEMORY_MB = 65536


@dataclass(frozen=True)
class Limits:
    """What one execution may use. Every backend enforces each field or says in
    `ExecutionResult.isolation_features` which mechanisms it had."""

    time_limit_s: float = 2.0
    """Wall-clock limit of the whole execution; the CPU-time limit equals it."""
    memory_mb: int = 256
    """Memory of all processes of the execution together (cgroup), per process as a backstop (RLIMIT_AS)."""
    max_processes: int = 64
    """Processes plus threads alive at once."""
    file_size_mb: int = 16
    """Largest file the program may write (RLIMIT_FSIZE)."""
    scratch_mb: int = 64
    """Size of the writable tmpfs scratch directory (the working directory and /tmp)."""
    open_files: int = 256
    """Open file descriptors per process (RLIMIT_NOFILE)."""
    output_limit_bytes: int = 1 << 20
    """Cap on each of stdout and stderr; more output ends the run with status `output_limit`."""

    def __post_init__(self) -> None:
        def bad(field: str, value, want: str) -> ValueError:
            return ValueError(f"Limits.{field}={value!r}: {want}")

        t = self.time_limit_s
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) \
                or not 0 < t <= MAX_EXECUTION_TIME_S:
            raise bad("time_limit_s", t, f"must be a number of seconds in (0, {MAX_EXECUTION_TIME_S:g}]")
        object.__setattr__(self, "time_limit_s", float(t))
        for field, low, high in (("memory_mb", 16, MAX_MEMORY_MB), ("max_processes", 1, 4096),
                                 ("file_size_mb", 1, 4096), ("scratch_mb", 1, 16384),
                                 ("open_files", 16, 65536), ("output_limit_bytes", 1, 1 << 30)):
            v = getattr(self, field)
            if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= high:
                raise bad(field, v, f"must be an integer in [{low}, {high}]")

    @classmethod
    def for_problem(cls, problem, timeout_s: float | None = None, memory_mb: int | None = None,
                    **overrides) -> "Limits":
        """The problem's own time and memory limits unless the caller overrides them."""
        time_limit = timeout_s if timeout_s is not None else getattr(problem, "time_limit_s", 2.0)
        memory = memory_mb if memory_mb is not None else getattr(problem, "memory_limit_mb", 256)
        return cls(time_limit_s=time_limit, memory_mb=memory, **overrides)

    def with_(self, **changes) -> "Limits":
        return replace(self, **changes)

    def to_dict(self) -> dict:
        return {f: getattr(self, f) for f in self.__dataclass_fields__}
