"""A queued run says where it stands in the queue; launching leaves no message that goes stale."""
from webapp.runs.models import Run
from webapp.runs.services import create_run

from tests.factories import TINY_OVERRIDES, form_data


def _queued(user, problem_set, name):
    return create_run(user, name, problem_set, TINY_OVERRIDES)


def test_the_api_gives_a_queued_runs_place_and_nothing_once_it_runs(client_alice, user, problem_set):
    first, second = _queued(user, problem_set, "first"), _queued(user, problem_set, "second")
    Run.objects.filter(pk=first.pk).update(status="running")
    assert client_alice.get(f"/api/runs/{second.pk}").json()["queue"] == {"position": 1, "running": 1}
    third = _queued(user, problem_set, "third")
    assert client_alice.get(f"/api/runs/{third.pk}").json()["queue"] == {"position": 2, "running": 1}
    assert client_alice.get(f"/api/runs/{first.pk}").json()["queue"] is None


def test_the_run_page_embeds_the_queue_place(client_alice, user, problem_set):
    run = _queued(user, problem_set, "first")
    html = client_alice.get(f"/runs/{run.pk}/").content.decode()
    assert '"queue": {"position": 1, "running": 0}' in html


def test_launching_leaves_no_queued_message_behind(client_alice, problem_set):
    r = client_alice.post("/runs/new", form_data(problem_set), follow=True)
    assert "queued." not in r.content.decode()
