from django.conf import settings
from django.db import models

from webapp.core.models import OwnedQuerySet


class Run(models.Model):
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="runs")
    name = models.CharField(max_length=200)
    status = models.CharField(max_length=20, default="queued")
    created = models.DateTimeField(auto_now_add=True)

    objects = OwnedQuerySet.as_manager()
