"""Personal API tokens: shown once at creation, stored only as a SHA-256 digest."""
from __future__ import annotations

import hashlib
import secrets

from django.conf import settings
from django.db import models
from django.utils import timezone

TOKEN_PREFIX = "cru_"


def digest(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


class ApiTokenQuerySet(models.QuerySet):
    def active(self):
        return self.filter(revoked__isnull=True)


class ApiToken(models.Model):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100, blank=True)
    key_digest = models.CharField(max_length=64, unique=True)
    hint = models.CharField(max_length=12, help_text="first characters, to recognise a token in the list")
    created = models.DateTimeField(default=timezone.now)
    last_used = models.DateTimeField(null=True, blank=True)
    revoked = models.DateTimeField(null=True, blank=True)

    objects = ApiTokenQuerySet.as_manager()

    class Meta:
        ordering = ["-created"]

    def __str__(self) -> str:
        return f"{self.hint}… ({self.name or 'unnamed'})"

    @classmethod
    def issue(cls, user, name: str = "") -> tuple["ApiToken", str]:
        """Create a token; the raw value is returned once and never stored."""
        raw = TOKEN_PREFIX + secrets.token_urlsafe(32)
        token = cls.objects.create(user=user, name=name[:100], key_digest=digest(raw), hint=raw[:10])
        return token, raw

    @classmethod
    def authenticate(cls, raw: str):
        """The active user owning ``raw``, or None."""
        if not raw or not raw.startswith(TOKEN_PREFIX) or len(raw) > 200:
            return None
        token = cls.objects.active().select_related("user").filter(key_digest=digest(raw)).first()
        if token is None or not token.user.is_active:
            return None
        now = timezone.now()
        if token.last_used is None or (now - token.last_used).total_seconds() > 60:
            cls.objects.filter(pk=token.pk).update(last_used=now)  # at most one write a minute
        return token.user

    def revoke(self) -> None:
        if self.revoked is None:
            self.revoked = timezone.now()
            self.save(update_fields=["revoked"])
