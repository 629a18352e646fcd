from django.conf import settings
from django.db import models

from webapp.core.models import OwnedQuerySet


class ProblemSet(models.Model):
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="problem_sets")
    name = models.CharField(max_length=200)
    created = models.DateTimeField(auto_now_add=True)

    objects = OwnedQuerySet.as_manager()
