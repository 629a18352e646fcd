from django.db import models


class OwnedQuerySet(models.QuerySet):
    """Users see only their own objects; staff see everyone's."""

    def visible_to(self, user):
        if not user.is_authenticated:
            return self.none()
        if user.is_staff:
            return self.all()
        return self.filter(owner=user)
