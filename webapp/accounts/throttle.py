"""Login throttling: after too many failed logins for one account or from one address, refuse more
attempts for a while, with a message that says so (issue 13, finding 7).

Counts live in Django's default cache (a per-process memory cache unless settings say otherwise:
no Redis needed, and daphne serves the app from one process).
"""
from __future__ import annotations

import hashlib

from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.forms import AuthenticationForm
from django.core.cache import cache
from django.core.exceptions import ValidationError

MAX_FAILURES_PER_ACCOUNT = 5    # a guessed password needs far more tries than a typo
MAX_FAILURES_PER_ADDRESS = 20   # one address trying many accounts
WINDOW_S = 15 * 60              # failures count this long; a blocked login waits this long


def _key(kind: str, value: str) -> str:
    return f"login-failures:{kind}:{hashlib.sha256(value.encode()).hexdigest()}"


def _keys(username: str, address: str) -> list[tuple[str, int]]:
    return [(_key("account", username.strip().lower()), MAX_FAILURES_PER_ACCOUNT),
            (_key("address", address or "unknown"), MAX_FAILURES_PER_ADDRESS)]


def is_blocked(username: str, address: str) -> bool:
    return any((cache.get(key) or 0) >= limit for key, limit in _keys(username, address))


def record_failure(username: str, address: str) -> None:
    for key, _ in _keys(username, address):
        cache.add(key, 0, WINDOW_S)
        try:
            cache.incr(key)
        except ValueError:  # expired between add and incr
            cache.set(key, 1, WINDOW_S)


def clear_account(username: str) -> None:
    cache.delete(_key("account", username.strip().lower()))


class ThrottledLoginMixin:
    """For Django's authentication forms: refuse while blocked, count failures, forget them on success."""

    blocked_message = ("Too many failed logins for this account or from this address. "
                       f"Try again in {WINDOW_S // 60} minutes.")

    def clean(self):
        username = self.cleaned_data.get("username") or ""
        address = self.request.META.get("REMOTE_ADDR", "") if self.request else ""
        if is_blocked(username, address):
            raise ValidationError(self.blocked_message, code="throttled")
        try:
            cleaned = super().clean()
        except ValidationError:
            record_failure(username, address)
            raise
        clear_account(username)
        return cleaned


class ThrottledAuthenticationForm(ThrottledLoginMixin, AuthenticationForm):
    pass


class ThrottledAdminAuthenticationForm(ThrottledLoginMixin, AdminAuthenticationForm):
    pass
