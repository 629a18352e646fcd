"""Events of bounded size (issue 23, finding 1): the stored and streamed ``problem``/``eval`` events are
summaries, candidates are served by the candidates API, and a replay pages through the log."""
import asyncio
import json

import pytest
from asgiref.sync import sync_to_async

from webapp.runs import consumers
from webapp.runs.event_summary import summarize
from webapp.runs.models import Candidate, RunEvent
from webapp.runs.services import ingest_event

from tests.factories import eval_event, problem_event, step_event

from .conftest import connect, receive_all, setup_run

BIG = "x" * 200_000  # a candidate's captured stdout, as a chatty program prints it


def chatty_problem_event(step, problem_id="HumanEval/0"):
    event = problem_event(step, problem_id)
    for c in event["candidates"]:
        c["result"]["stdout"] = BIG
        c["result"]["flags"] = ["spoofed_output"]
        c["code"] = "print('x' * 200000)\n" + "# padding\n" * 1000
        c["turns"] = [{"reply": BIG, "code": c["code"]}]
    return event


def test_a_summary_keeps_ids_rewards_outcomes_and_flags_and_drops_code_tests_and_streams():
    event = chatty_problem_event(3)
    summary = summarize(event)
    assert summary["summarized"] is True and summary["problem_id"] == "HumanEval/0" and summary["step"] == 3
    assert summary["pass_rate"] == event["pass_rate"]
    first = summary["candidates"][0]
    assert first == {"index": 0, "reward": 1.0, "rewards": {"pass_rate": 1.0, "syntax": 1.0},
                     "result": {"status": "passed", "tests_passed": 2, "tests_total": 2, "flags": ["spoofed_output"]}}
    assert len(json.dumps(summary)) < 1000 < len(json.dumps(event)) // 100
    assert summarize(summary) == summary  # idempotent
    step = step_event(1)
    assert summarize(step) is step  # other events are stored as they are


def test_a_summary_keeps_the_per_component_normalized_reward():
    event = problem_event(3, "HumanEval/0")
    event["candidates"][0]["reward_normalized"] = -0.75
    assert summarize(event)["candidates"][0]["reward_normalized"] == -0.75
    assert "reward_normalized" not in summarize(problem_event(3, "HumanEval/0"))["candidates"][0]


def test_an_eval_summary_drops_each_problems_samples():
    event = eval_event(10, 0.5, {"add-3": 0.5})
    event["per_problem"]["add-3"]["candidates"] = [chatty_problem_event(10)["candidates"][0]]
    summary = summarize(event)
    assert summary["per_problem"] == {"add-3": {"n": 4, "c": 2, "pass@1": 0.5}}
    assert summary["pass@1"] == 0.5 and summary["pass@k"] == event["pass@k"]


def test_the_stored_and_broadcast_problem_event_is_the_summary_and_the_candidates_api_has_the_rest(
        client_alice, run, monkeypatch):
    from webapp.runs import services

    sent = []
    monkeypatch.setattr(services, "broadcast_event", lambda run_id, message: sent.append(message))
    assert ingest_event(run, chatty_problem_event(1), seq=0)
    stored = RunEvent.objects.get(run=run, seq=0).payload
    for payload in (stored, sent[0]):
        assert BIG not in json.dumps(payload) and "padding" not in json.dumps(payload)
        assert [c["result"]["status"] for c in payload["candidates"]] == ["passed", "failed"]
    assert sent[0]["seq"] == 0 and sent[0]["run_id"] == run.pk
    r = client_alice.get(f"/api/runs/{run.pk}/problems/HumanEval%2F0/candidates?step=1")
    assert r.status_code == 200
    candidates = r.json()
    assert candidates[0]["result"]["stdout"] == BIG and "padding" in candidates[0]["code"]
    assert candidates[0]["result"]["tests"][0]["name"] == "test 1"


def test_a_stored_eval_event_leaves_its_samples_to_the_candidate_rows(run):
    event = eval_event(0, 0.5, {"add-3": 0.5})
    event["per_problem"]["add-3"]["candidates"] = chatty_problem_event(0)["candidates"]
    assert ingest_event(run, event, seq=0)
    stored = RunEvent.objects.get(run=run, seq=0).payload
    assert "candidates" not in stored["per_problem"]["add-3"] and BIG not in json.dumps(stored)
    rows = Candidate.objects.filter(run=run, phase="eval", step=0, problem_id="add-3")
    assert rows.count() == 2 and rows.first().result["stdout"] == BIG


def store_log(run, steps):
    events = []
    for s in range(1, steps + 1):
        events += [step_event(s), chatty_problem_event(s), chatty_problem_event(s, "add-1")]
    for seq, e in enumerate(events):
        ingest_event(run, e, seq=seq, broadcast=False)
    return len(events)


@pytest.fixture
def pages(monkeypatch):
    """Records the size of every page the replay reads; REPLAY_PAGE is small so that runs span pages."""
    monkeypatch.setattr(consumers, "REPLAY_PAGE", 7)
    read = consumers._read_page
    sizes = []

    def recording(*args):
        page = read(*args)
        sizes.append(len(page))
        return page

    monkeypatch.setattr(consumers, "_replay_page", sync_to_async(recording, thread_sensitive=False))
    return sizes


@pytest.mark.django_db(transaction=True)
async def test_a_replay_pages_through_the_log_and_sends_every_event_once_in_order(pages):
    _, run, token = await sync_to_async(setup_run)()
    total = await sync_to_async(store_log)(run, 20)
    communicator, connected, _ = await connect(run, token)
    assert connected
    received = await receive_all(communicator, timeout=2.0)
    assert [m["seq"] for m in received] == list(range(total))
    assert max(pages) == 7 and len(pages) == total // 7 + 1
    assert all(BIG not in json.dumps(m) for m in received)
    await communicator.disconnect()


@pytest.mark.django_db(transaction=True)
async def test_live_events_during_a_replay_follow_it_once_in_order(pages, monkeypatch):
    from webapp.runs.services import broadcast_event

    _, run, token = await sync_to_async(setup_run)()
    total = await sync_to_async(store_log)(run, 10)
    read = consumers._replay_page
    live = []

    async def slow_page(*args):  # a new step arrives while the replay is at its first pages
        page = await read(*args)
        if len(pages) == 2:
            event = step_event(11)
            await sync_to_async(ingest_event)(run, event, seq=total)
            live.append(total)
            await sync_to_async(broadcast_event)(run.pk, {"event": "status", "run_id": run.pk, "status": "running"})
        return page

    monkeypatch.setattr(consumers, "_replay_page", slow_page)
    communicator, connected, _ = await connect(run, token)
    received = await receive_all(communicator, timeout=2.0)
    assert live == [total]
    assert [m["seq"] for m in received if "seq" in m] == list(range(total + 1))
    assert [m["event"] for m in received if "seq" not in m] == ["status"]
    await communicator.disconnect()


@pytest.mark.django_db(transaction=True)
async def test_a_replay_stops_reading_when_the_client_goes(pages, monkeypatch):
    _, run, token = await sync_to_async(setup_run)()
    await sync_to_async(store_log)(run, 30)
    read = consumers._replay_page

    async def slow_page(*args):
        await asyncio.sleep(0.05)
        return await read(*args)

    monkeypatch.setattr(consumers, "_replay_page", slow_page)
    communicator, connected, _ = await connect(run, token)
    assert connected
    await communicator.receive_json_from(timeout=5)
    await communicator.disconnect()
    read_when_gone = len(pages)
    await asyncio.sleep(0.5)
    assert len(pages) <= read_when_gone + 1  # at most the page in flight
    assert len(pages) < 90 // 7


@pytest.mark.django_db(transaction=True)
async def test_live_events_past_the_held_bound_are_read_from_the_log_not_lost(pages, monkeypatch):
    from webapp.runs.services import broadcast_event

    monkeypatch.setattr(consumers, "HELD_MAX", 2)
    _, run, token = await sync_to_async(setup_run)()
    total = await sync_to_async(store_log)(run, 5)
    read = consumers._replay_page

    burst = []

    async def page_with_a_burst(*args):  # five steps arrive just after the replay read its last page
        page = await read(*args)
        if len(page) < consumers.REPLAY_PAGE and not burst:
            burst.append(len(pages))
            for i in range(5):
                await sync_to_async(ingest_event)(run, step_event(6 + i), seq=total + i)
            await sync_to_async(broadcast_event)(run.pk, {"event": "status", "run_id": run.pk, "status": "running"})
        return page

    monkeypatch.setattr(consumers, "_replay_page", page_with_a_burst)
    communicator, connected, _ = await connect(run, token)
    received = await receive_all(communicator, timeout=2.0)
    assert [m["seq"] for m in received if "seq" in m] == list(range(total + 5))
    assert [m["event"] for m in received if "seq" not in m] == ["status"]
    assert len(pages) > burst[0]  # the dropped ones came from another read of the log
    await communicator.disconnect()
