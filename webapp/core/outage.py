"""Log a failing dependency once per outage, not once per failed call.

While Redis is down a running run keeps storing its events, and every one of them fails to
broadcast: a traceback each time buried the log (45,000 lines in 90 s). ``OutageLog`` logs the
first failure of an outage with its traceback, counts the rest, and logs the recovery (with the
count) at the first success after it.
"""
from __future__ import annotations

import logging
import threading


class OutageLog:
    def __init__(self, logger: logging.Logger, what: str):
        self.logger, self.what = logger, what
        self.failures = 0
        self._lock = threading.Lock()

    def failed(self, message: str, *args) -> None:
        """Call from an ``except`` block: logs the first failure of an outage with its traceback."""
        with self._lock:
            self.failures += 1
            first = self.failures == 1
        if first:
            self.logger.exception(f"{message} ({self.what} unavailable; further failures are counted until "
                                  "it is back)", *args)

    def succeeded(self) -> None:
        if not self.failures:  # the common case, without taking the lock
            return
        with self._lock:
            failures, self.failures = self.failures, 0
        if failures:
            self.logger.warning("%s is back after %d failed call(s)", self.what, failures)
