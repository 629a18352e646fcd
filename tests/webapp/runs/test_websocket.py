"""/ws/runs/<id>/: auth in connect, replay from the stored log, then stream without duplicates."""
import json

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth import get_user_model

from webapp.accounts.models import ApiToken
from webapp.asgi import application
from webapp.runs.models import RunEvent
from webapp.runs.services import ingest_event

from tests.factories import eval_event, problem_event, step_event

from .conftest import ORIGIN, connect, receive_all, setup_run


@pytest.mark.django_db(transaction=True)
async def test_anonymous_and_other_users_are_refused(settings, tmp_path):
    _, run, _ = await sync_to_async(setup_run)()
    anonymous = WebsocketCommunicator(application, f"/ws/runs/{run.pk}/", headers=[ORIGIN])
    connected, _ = await anonymous.connect()
    assert not connected
    _, _, bob_token = await sync_to_async(lambda: (None, None, ApiToken.issue(
        get_user_model().objects.create_user("bob2", password="bob-password-1"), "t")[1]))()
    communicator, connected, _ = await connect(run, bob_token)
    assert not connected


@pytest.mark.django_db(transaction=True)
async def test_staff_may_watch_any_run():
    _, run, _ = await sync_to_async(setup_run)()
    staff_token = await sync_to_async(lambda: ApiToken.issue(get_user_model().objects.create_user(
        "staff2", password="staff-password-1", is_staff=True), "t")[1])()
    communicator, connected, _ = await connect(run, staff_token)
    assert connected
    await communicator.disconnect()


@pytest.mark.django_db(transaction=True)
async def test_replay_then_stream_with_since_and_no_event_twice():
    _, run, token = await sync_to_async(setup_run)()
    events = [step_event(1), problem_event(1), step_event(2), problem_event(2), step_event(3)]
    for seq, e in enumerate(events[:4]):
        await sync_to_async(ingest_event)(run, e, seq=seq)

    communicator, connected, _ = await connect(run, token, "?since=1")
    assert connected
    replayed = await receive_all(communicator, timeout=2.0)
    assert [(m["event"], m["step"], m["seq"]) for m in replayed] == [("step", 2, 2), ("problem", 2, 3)]
    assert all(m["run_id"] == run.pk for m in replayed)

    # A re-broadcast of an already replayed line (the replay/stream seam) is not sent again.
    await sync_to_async(ingest_event)(run, events[3], seq=3)  # stored before: no broadcast
    from webapp.runs.services import broadcast_event
    await sync_to_async(broadcast_event)(run.pk, {**events[3], "run_id": run.pk, "seq": 3})
    await sync_to_async(ingest_event)(run, events[4], seq=4)
    streamed = await receive_all(communicator, timeout=1.0)
    assert [(m["event"], m.get("seq")) for m in streamed] == [("step", 4)]
    await communicator.disconnect()

    everything, connected, _ = await connect(run, token)
    assert [m["seq"] for m in await receive_all(everything, timeout=0.5)] == [0, 1, 2, 3, 4]
    await everything.disconnect()


@pytest.mark.django_db(transaction=True)
async def test_a_bad_since_refuses_the_handshake():
    _, run, token = await sync_to_async(setup_run)()
    communicator, connected, _ = await connect(run, token, "?since=abc")
    assert not connected


@pytest.mark.django_db(transaction=True)
async def test_after_seq_resumes_exactly_where_a_dropped_page_left_off():
    _, run, token = await sync_to_async(setup_run)()
    for seq, e in enumerate([step_event(1), problem_event(1), problem_event(1, "add-1")]):
        await sync_to_async(ingest_event)(run, e, seq=seq)
    communicator, connected, _ = await connect(run, token, "?since=1&after=1")
    assert connected
    assert [(m["seq"], m["problem_id"]) for m in await receive_all(communicator, timeout=2.0)] == [(2, "add-1")]
    await communicator.disconnect()


@pytest.mark.django_db
def test_a_stored_problem_event_is_replayed_as_stored(run):
    from webapp.runs.consumers import replay_message

    payload = {"event": "problem", "step": 1, "problem_id": "a", "solve_rate": 0.5, "zero_variance": False,
               "candidates": [{"index": 0, "reward": 1.0, "result": {"status": "passed"}}], "summarized": True}
    stored = RunEvent.objects.create(run=run, seq=3, kind="problem", step=1, payload=payload)
    stored.refresh_from_db()
    assert json.loads(replay_message(7, 3, "problem", json.dumps(stored.payload), {})) == {**payload, "run_id": 7, "seq": 3}


@pytest.mark.django_db(transaction=True)
async def test_live_problem_and_eval_messages_carry_the_rows_the_server_stored():
    from webapp.runs import queries

    _, run, token = await sync_to_async(setup_run)()
    communicator, connected, _ = await connect(run, token)
    assert connected
    await receive_all(communicator, timeout=0.3)
    await sync_to_async(ingest_event)(run, problem_event(1, statuses=("passed", "timeout")), seq=0)
    await sync_to_async(ingest_event)(run, problem_event(2, statuses=("failed", "failed")), seq=1)
    await sync_to_async(ingest_event)(run, eval_event(2, 0.5, per_problem={"add-3": 0.5}), seq=2)
    problem1, problem2, evaluation = await receive_all(communicator, timeout=1.0)
    stored = {row["problem_id"]: row for row in await sync_to_async(queries.problems)(run)}
    assert problem2["problem_row"] == stored["HumanEval/0"]
    assert problem2["problem_row"]["history"] == [[1, 0.5], [2, 0.0]]
    assert problem1["problem_row"]["history"] == [[1, 0.5]]  # as stored when that event was
    assert problem2["health"] == await sync_to_async(queries.sandbox_health)(run)
    assert problem2["health"]["counts"] == {"passed": 1, "timeout": 1, "failed": 2}
    assert evaluation["problem_rows"] == [stored["add-3"]]
    await communicator.disconnect()


@pytest.mark.django_db(transaction=True)
async def test_a_replayed_page_carries_each_changed_row_once_as_stored_now():
    from webapp.runs import queries

    _, run, token = await sync_to_async(setup_run)()
    events = [problem_event(1), problem_event(1, "add-1"), problem_event(2), step_event(2)]
    for seq, e in enumerate(events):
        await sync_to_async(ingest_event)(run, e, seq=seq, broadcast=False)
    communicator, connected, _ = await connect(run, token)
    replayed = await receive_all(communicator, timeout=2.0)
    stored = {row["problem_id"]: row for row in await sync_to_async(queries.problems)(run)}
    assert ["problem_row" in m for m in replayed] == [False, True, True, False]
    assert replayed[1]["problem_row"] == stored["add-1"] and replayed[2]["problem_row"] == stored["HumanEval/0"]
    assert ["health" in m for m in replayed] == [False, False, True, False]
    assert replayed[2]["health"] == await sync_to_async(queries.sandbox_health)(run)
    await communicator.disconnect()
