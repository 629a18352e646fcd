"""Crucible's Django project: settings, URLs, ASGI/Celery entry points and the web apps."""
# Load the Celery app with Django so that @shared_task senders (web server, manage.py) use its
# broker settings instead of Celery's unconfigured default app.
from .celery import app as celery_app

__all__ = ("celery_app",)
