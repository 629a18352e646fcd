"""Execution backends, registered by name (`process`, `docker`); see base.get_executor."""

from .base import BACKENDS, Executor, SandboxUnavailable, backend_names, get_executor, unavailable_reason

__all__ = ["BACKENDS", "Executor", "SandboxUnavailable", "backend_names", "get_executor", "unavailable_reason"]
