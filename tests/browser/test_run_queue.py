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
    assert page.locator("#run-eta").inner_text() == (f"queued: 2nd in line on the gpu workers; waiting for run "
                                                     f"#{running.pk} (step 0/3) to end")
    assert page.locator(".messages").count() == 0


def test_a_pending_probe_says_it_waits_for_a_worker_while_the_gpu_workers_hold_a_run(page, live_server_url, user,
                                                                                     monkeypatch):
    from webapp.probes import services as probes
    from webapp.runs.models import Run
    from webapp.runs.services import create_run

    ps = make_problem_set(user)
    running = create_run(user, "running", ps, TINY_OVERRIDES)
    Run.objects.filter(pk=running.pk).update(status="running", step=1)
    monkeypatch.setattr(probes, "publish_probe", lambda pk: True)  # no worker here: it stays pending
    probes.request_probe(ps, user, "models/tiny", None, 2)
    login(page, live_server_url, "alice", "alice-password-1")
    page.goto(f"{live_server_url}/problem-sets/{ps.pk}/")
    expected = (f"1st in line on the short-job lane of the gpu workers; waiting for a worker to take it (the gpu "
                f"workers are busy with run #{running.pk} (step 1/3")
    assert page.locator("#probe-summary").inner_text().startswith(expected)
    Run.objects.filter(pk=running.pk).update(step=2)  # the page's poll follows the run it waits for
    wait_until(page, "document.getElementById('probe-summary').textContent.includes('(step 2/3')", 10)
