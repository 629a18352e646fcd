"""Helpers shared by the web app's tests."""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(predicate: Callable[[], T], timeout: float = 30.0, what: str = "condition", *,
             interval: float = 0.05) -> T:
    """Poll ``predicate`` every ``interval`` seconds until it returns something true, and return that;
    an AssertionError naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what} not met in {timeout} s")
        time.sleep(interval)
