"""How many CPU threads torch may use in each phase of a step, judged by what else runs on the machine.

While the sandbox executes candidates its workers need their cores, and OpenMP threads competing with
them spin and wait (measured on 2 busy cores: 2 threads made the overlapping log-prob passes 4-5x slower
than 1). Generation and the update run while the sandbox is idle; there every core helps when nothing
else is running (the update ~1.5x faster with 2 threads than 1 on 2 idle cores) and hurts badly when
something is (9x slower with 2 threads on 2 cores loaded by another process: each parallel region waits
for a descheduled thread). So the idle phases take every core only while the machine leaves them free,
judged by what is runnable at the phase's start (``cores_free``).

The trainer's rollout sources (rollout_sources.py) set the count around the phases of a step; nothing
inside a phase (the log-prob and PPO micro-batch loops) asks again. ``torch.set_num_threads`` is set
from the thread that runs the phase: OpenMP keeps the count per calling thread.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator

import torch


class PhaseThreads:
    """Torch CPU threads per phase of a step: ``busy`` while the sandbox (or a rollout sampled ahead)
    works beside it, ``idle`` while nothing of the run does. None: leave the thread count alone."""

    def __init__(self, busy: int | None, idle: int | None):
        self.busy_threads, self.idle_threads = busy, idle

    @classmethod
    def for_cpu(cls, sandbox_workers: int) -> "PhaseThreads":
        """Every core while the sandbox is idle (and the machine too), the cores its workers leave (at
        least 1) while it runs; nothing switched when ``OMP_NUM_THREADS`` is set or a GPU does the work."""
        if os.environ.get("OMP_NUM_THREADS") or torch.cuda.is_available():
            return cls(None, None)
        cores = len(os.sched_getaffinity(0))
        return cls(max(1, cores - sandbox_workers), cores)

    def busy(self) -> None:
        if self.busy_threads:
            torch.set_num_threads(self.busy_threads)

    def widen(self) -> bool:
        """Every core now, if the machine leaves them free (``busy`` goes back). -> False when the
        cores are taken"""
        if not self.idle_threads:
            return True
        if not cores_free(self.idle_threads, self.busy_threads or 1):
            return False
        torch.set_num_threads(self.idle_threads)
        return True

    @contextlib.contextmanager
    def idle(self) -> Iterator[None]:
        """A phase with nothing of the run beside it: every core the machine leaves free; busy after."""
        if self.idle_threads:
            torch.set_num_threads(self.idle_threads if cores_free(self.idle_threads, self.busy_threads or 1)
                                  else self.busy_threads or 1)
        try:
            yield
        finally:
            self.busy()

    @contextlib.contextmanager
    def beside(self, done: Callable[[], bool]) -> Iterator[None]:
        """A phase that starts beside background work (a rollout sampled ahead): the busy count, or
        every free core when ``done()`` says that work has ended by the phase's start; busy after."""
        if done():
            self.widen()
        else:
            self.busy()
        try:
            yield
        finally:
            self.busy()


def cores_free(wanted: int, own: int) -> bool:
    """Whether ``wanted`` cores are free for this process: the tasks runnable on the machine right now
    (``runnable_now``; else the 1-minute load average), less this process's own ``own`` running
    threads, leave them (with half a core of slack). Not the load average first: it still counts, for
    a minute, work that has just ended, such as this step's generation in a vLLM server that is now
    idle (measured: the update then ran on 1 thread of 2 free cores, 3.3 s instead of 1.9 s)."""
    load = runnable_now()
    if load is None:
        try:
            load = os.getloadavg()[0]
        except OSError:  # no load figure on this platform: do not risk oversubscription
            return False
    return load - own <= len(os.sched_getaffinity(0)) - wanted + 0.5


def runnable_now(samples: int = 3, gap_s: float = 0.002) -> float | None:
    """Tasks runnable on the machine now, the reader included: the median of a few reads of the running
    count in /proc/loadavg (one read can catch a short burst). None where that file is missing."""
    counts = []
    for i in range(samples):
        try:
            with open("/proc/loadavg") as f:
                counts.append(int(f.read().split()[3].split("/")[0]))
        except (OSError, IndexError, ValueError):
            return None
        if i + 1 < samples:
            time.sleep(gap_s)
    counts.sort()
    return float(counts[len(counts) // 2])
