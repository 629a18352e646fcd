"""The Celery app. Queues: `gpu` (training runs, one worker process per GPU) and `sandbox`."""
import os

from celery import Celery
from kombu import Queue

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings.local")

app = Celery("crucible")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf.task_queues = (Queue("gpu"), Queue("sandbox"))
app.autodiscover_tasks(["webapp.core", "webapp.problems", "webapp.runs"])
