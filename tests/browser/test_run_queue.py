"""A queued run's page says where it stands in the queue and carries no stale launch message."""
from tests.factories import TINY_OVERRIDES, make_problem_set

from .conftest import login, wait_until


def test_a_queued_run_shows_its_place_in_the_queue(page, live_server_url, user):
    from webapp.runs.models import Run
    from webapp.runs.services import create_run

    ps = make_problem_set(user)
    running = create_run(user, "running", ps, TINY_OVERRIDES)
    Run.objects.filter(pk=running.pk).update(status="running")
    create_run(user, "ahead", ps, TINY_OVERRIDES)
    mine = create_run(user, "mine", ps, TINY_OVERRIDES)
    login(page, live_server_url, "alice", "alice-password-1")
    page.goto(f"{live_server_url}/runs/{mine.pk}/")
    wait_until(page, "document.getElementById('run-eta').textContent.length > 0", 10)
    assert page.locator("#run-eta").inner_text() == "queued: number 2 in line (1 queued ahead, 1 run running)"
    assert page.locator(".messages").count() == 0
