"""The Celery app. Queues (contracts: add, never rename): `gpu` (training runs, one worker process per
GPU), `gpu_short` (short model jobs: difficulty probes, evaluations; a short-job worker beside the gpu
workers, and any idle gpu worker, takes them: webapp.core.queueing) and `sandbox`."""
import logging
import os

from celery import Celery, signals
from kombu import Exchange, Queue

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings.local")

app = Celery("crucible")
app.config_from_object("django.conf:settings", namespace="CELERY")
# Each queue on its own direct exchange and routing key. A bare Queue("gpu") takes the default
# exchange and key (both "sandbox", from CELERY_TASK_DEFAULT_QUEUE): a task routed to either queue
# was published with key "sandbox", matched both bindings and landed on both queues; the worker
# banner showed it as "gpu exchange=sandbox key=sandbox".
QUEUE_NAMES = ("gpu", "gpu_short", "sandbox")
app.conf.task_queues = tuple(Queue(name, Exchange(name, type="direct"), routing_key=name) for name in QUEUE_NAMES)


@signals.worker_init.connect
def drop_stale_bindings(**_) -> None:
    """Redis keeps exchange bindings between deployments: drop the ones the old declarations left
    (queue gpu bound to exchange sandbox), which would still copy sandbox tasks onto the gpu queue."""
    with app.connection_for_write() as conn:
        if conn.transport.driver_type != "redis":
            return
        client = conn.default_channel.client
        for name in QUEUE_NAMES:
            key = f"_kombu.binding.{name}"
            for member in client.smembers(key):
                queue = member.decode().split("\x06\x16")[-1]
                if queue != name:
                    client.srem(key, member)


@signals.worker_init.connect
def end_orphaned_engines(**_) -> None:
    """End the vLLM servers whose trainer is gone. A server's guardian ends it when its trainer dies; what a
    guardian killed together with its trainer leaves (engine core, workers: GBs each) is ended here, when a
    worker starts, as a gpu worker does after a crash. Every worker runs it: one pass over /proc, and it
    touches only processes marked as a server's whose trainer (pid and start time) no longer exists."""
    from training.engines.vllm_server import end_orphaned_servers

    end_orphaned_servers(log=logging.getLogger(__name__).warning)


app.autodiscover_tasks(["webapp.core", "webapp.problems", "webapp.runs", "webapp.probes", "webapp.evals"])
