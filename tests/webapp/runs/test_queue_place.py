"""A queued run says where it stands in the queue and what it waits for; launching leaves no message
that goes stale."""
import json
from datetime import timedelta

from django.utils import timezone

from webapp.core import queueing
from webapp.runs.models import Run, StepMetric
from webapp.runs.services import create_run

from tests.factories import TINY_OVERRIDES, form_data, make_user


def _queued(user, problem_set, name):
    return create_run(user, name, problem_set, TINY_OVERRIDES)


def _running_at(run, step, steps, s_per_step, *, timed=20):
    """``run`` running at ``step`` of ``steps``, its last ``timed`` steps ``s_per_step`` apart."""
    Run.objects.filter(pk=run.pk).update(status="running", step=step, steps=steps, started=timezone.now())
    now = timezone.now().timestamp()
    StepMetric.objects.bulk_create(StepMetric(run=run, step=s, metrics={}, time=now - (step - s) * s_per_step)
                                   for s in range(step - timed + 1, step + 1))
    run.refresh_from_db()
    return run


def test_the_api_gives_a_queued_runs_place_and_nothing_once_it_runs(client_alice, user, problem_set):
    first, second = _queued(user, problem_set, "first"), _queued(user, problem_set, "second")
    Run.objects.filter(pk=first.pk).update(status="running")
    place = client_alice.get(f"/api/runs/{second.pk}").json()["queue"]
    assert (place["position"], place["running"], place["ahead"], place["queue"]) == (1, 1, 0, "gpu")
    third = _queued(user, problem_set, "third")
    place = client_alice.get(f"/api/runs/{third.pk}").json()["queue"]
    assert (place["position"], place["running"], place["ahead"]) == (2, 1, 1)
    assert client_alice.get(f"/api/runs/{first.pk}").json()["queue"] is None


def test_a_queued_run_names_the_run_it_waits_for_with_its_step_and_time_left(client_alice, user, problem_set):
    first = _running_at(_queued(user, problem_set, "first"), step=40, steps=200, s_per_step=2.25)
    _queued(user, problem_set, "second")
    third = _queued(user, problem_set, "third")
    place = client_alice.get(f"/api/runs/{third.pk}").json()["queue"]
    assert place["text"] == f"2nd in line on the gpu workers; waiting for run #{first.pk} (step 40/200, ~6 min left) to end"
    waiting_for = place["waiting_for"]
    assert [(w["kind"], w["id"], w["progress"]) for w in waiting_for] == [("run", first.pk, "step 40/200")]
    assert abs(waiting_for[0]["eta_s"] - 160 * 2.25) < 1


def test_another_users_run_is_neither_named_nor_described_but_its_time_left_is_given(client_alice, user, problem_set):
    bob = make_user("bob")
    theirs = _running_at(_queued(bob, problem_set, "bob's"), step=10, steps=20, s_per_step=30, timed=5)
    mine = _queued(user, problem_set, "mine")
    place = client_alice.get(f"/api/runs/{mine.pk}").json()["queue"]
    assert place["text"] == "1st in line on the gpu workers; waiting for another user's run (~5 min left) to end"
    assert place["waiting_for"][0]["id"] is None and place["waiting_for"][0]["progress"] is None
    assert f"#{theirs.pk}" not in place["text"] and "bob" not in json.dumps(place)


def test_a_run_without_a_pace_yet_is_waited_for_without_a_time(user, problem_set):
    first, second = _queued(user, problem_set, "first"), _queued(user, problem_set, "second")
    Run.objects.filter(pk=first.pk).update(status="running", started=timezone.now())
    assert queueing.place(second)["text"] == f"1st in line on the gpu workers; waiting for run #{first.pk} (step 0/3) to end"


def test_a_run_first_in_line_that_no_worker_takes_says_who_should(user, problem_set):
    run = _queued(user, problem_set, "alone")
    assert queueing.place(run)["text"] == "1st in line on the gpu workers; waiting for a worker to take it"
    Run.objects.filter(pk=run.pk).update(queued=timezone.now() - timedelta(minutes=3))
    run.refresh_from_db()
    assert queueing.place(run)["text"] == ("1st in line on the gpu workers; waiting for a worker to take it; none has "
                                           "for 3 min: is a gpu worker (`make run` starts one; compose: the "
                                           "worker-gpu service) running?")


def test_a_resumed_run_goes_behind_the_runs_queued_meanwhile_and_has_waited_since_its_resume(user, problem_set):
    first, second = _queued(user, problem_set, "first"), _queued(user, problem_set, "second")
    Run.objects.filter(pk=first.pk).update(status="failed", queued=timezone.now() - timedelta(hours=2))
    first.refresh_from_db()
    first.requeue()
    assert (queueing.place(second)["position"], queueing.place(first)["position"]) == (1, 2)
    assert queueing.place(first)["waited_s"] < 60
    # The sweep that publishes queued runs again publishes them in that order too.
    from webapp.runs.services import RUN_JOB
    assert [pending.args[0] for pending in RUN_JOB.pending()] == [second.pk, first.pk]


def test_the_run_page_embeds_the_queue_place_and_its_line(client_alice, user, problem_set):
    first = _running_at(_queued(user, problem_set, "first"), step=40, steps=200, s_per_step=2.25)
    run = _queued(user, problem_set, "second")
    html = client_alice.get(f"/runs/{run.pk}/").content.decode()
    assert '"queue": {"position": 1, "running": 1' in html
    assert f"1st in line on the gpu workers; waiting for run #{first.pk} (step 40/200, ~6 min left) to end" in html


def test_launching_leaves_no_queued_message_behind(client_alice, problem_set):
    r = client_alice.post("/runs/new", form_data(problem_set), follow=True)
    assert "queued." not in r.content.decode()


def test_with_several_runs_running_the_one_that_ends_first_is_named_first(user, problem_set):
    slow = _running_at(_queued(user, problem_set, "slow"), step=10, steps=200, s_per_step=60)
    fast = _running_at(_queued(user, problem_set, "fast"), step=190, steps=200, s_per_step=3)
    waiting = _queued(user, problem_set, "waiting")
    assert queueing.place(waiting)["text"] == (
        f"1st in line on the gpu workers; waiting for run #{fast.pk} (step 190/200, ~30 s left) and run "
        f"#{slow.pk} (step 10/200, ~3.2 h left), the first to end")


def test_places_are_written_as_ordinals():
    assert [queueing.ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 22, 101, 111)] == [
        "1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "101st", "111th"]
