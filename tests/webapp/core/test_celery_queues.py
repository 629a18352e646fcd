"""The Celery queues are declared as what they are: each its own exchange and routing key."""
from webapp.celery import app


def test_each_queue_has_its_own_exchange_and_routing_key():
    declared = {name: (q.exchange.name, q.exchange.type, q.routing_key) for name, q in app.amqp.queues.items()}
    assert declared == {"gpu": ("gpu", "direct", "gpu"), "gpu_short": ("gpu_short", "direct", "gpu_short"),
                        "sandbox": ("sandbox", "direct", "sandbox")}


def test_a_training_task_is_published_only_where_gpu_workers_listen():
    route = app.amqp.router.route({}, "runs.supervise", args=(1,), kwargs={})
    assert route["queue"].name == "gpu" and route["queue"].routing_key == "gpu"
    route = app.amqp.router.route({}, "problems.validate", args=(1,), kwargs={})
    assert route["queue"].name == "sandbox" and route["queue"].routing_key == "sandbox"


def test_a_probe_goes_to_the_short_job_lane_not_behind_the_runs():
    route = app.amqp.router.route({}, "problems.probe", args=(1,), kwargs={})
    assert route["queue"].name == "gpu_short" and route["queue"].routing_key == "gpu_short"


def test_the_worker_banner_says_so():
    banner = app.amqp.queues.format()
    assert "gpu              exchange=gpu(direct) key=gpu" in banner


def test_a_worker_drops_the_binding_the_old_declarations_left_in_redis(settings):
    from webapp.celery import drop_stale_bindings

    with app.connection_for_write() as conn:
        client = conn.default_channel.client
        client.sadd("_kombu.binding.sandbox", "sandbox\x06\x16\x06\x16gpu", "sandbox\x06\x16\x06\x16sandbox")
        drop_stale_bindings()
        assert client.smembers("_kombu.binding.sandbox") == {b"sandbox\x06\x16\x06\x16sandbox"}
