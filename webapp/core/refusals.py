"""How a service's refusal reaches the user, the same way from every app.

A service refuses with one of two exceptions: ``training.config.ConfigError`` (a bad value, naming its
field) or a ``Conflict`` (the request is sound, but the state of what it names forbids it now: a set
still importing, a probe already under way, a run that is over). The JSON API answers them 400
``{detail, field}`` and 409 ``{detail}`` (``webapp.api``'s exception handlers); a page's form shows them
with ``add_refusal``.
"""
from __future__ import annotations

from django import forms

from training.config import ConfigError


class Conflict(Exception):
    """The request cannot be done now, whatever its values: the message says why (the API's 409)."""


def add_refusal(form: forms.BaseForm, exc: ConfigError | Conflict) -> None:
    """Show ``exc`` on ``form``: a bad value under its field when the form has that field, else (and a
    conflict) above the form, with the field it names."""
    if isinstance(exc, ConfigError) and exc.field in form.fields:
        form.add_error(exc.field, exc.message)
    else:
        form.add_error(None, str(exc))
