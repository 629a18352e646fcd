"""Divergence warnings on the run page: a ``warning`` event reaches the browsers watching live, a page
(re)loaded later renders it, and the ``done`` event carries the run's warnings."""
import pytest
from asgiref.sync import sync_to_async

from training import events as run_events
from webapp.runs.queries import run_warnings
from webapp.runs.services import ingest_event

from tests.factories import line, step_event

from .conftest import connect, receive_all, setup_run

KL_MESSAGE = ("KL to the reference model at step 8 is 90 nats/token, past monitor.kl_max 10: the policy has moved "
              "far from the model it started as (raise ppo.kl_coef, lower ppo.learning_rate)")


def warning(step=8):
    return line(run_events.warning_event("monitor.kl_max", KL_MESSAGE, step, condition="kl", metric="kl", value=90.0,
                                         bound=10.0))


@pytest.mark.django_db(transaction=True)
async def test_a_warning_event_reaches_the_page_live_and_on_a_replay():
    _, run, token = await sync_to_async(setup_run)()
    await sync_to_async(ingest_event)(run, step_event(8), seq=0)
    live, connected, _ = await connect(run, token, "?since=8")
    assert connected
    assert await receive_all(live, timeout=0.5) == []
    await sync_to_async(ingest_event)(run, warning(), seq=1)
    [message] = await receive_all(live, timeout=1.0)
    assert message["event"] == "warning" and message["seq"] == 1 and message["run_id"] == run.pk
    assert (message["condition"], message["step"], message["value"], message["bound"]) == ("kl", 8, 90.0, 10.0)
    assert message["message"] == KL_MESSAGE
    done = line(run_events.done_event("succeeded", warnings=[run_events.warning_summary(warning())]))
    await sync_to_async(ingest_event)(run, done, seq=2)
    [message] = [m for m in await receive_all(live, timeout=1.0) if m["event"] == "done"]  # and a status message
    assert message["warnings"] == [{"source": "monitor.kl_max", "condition": "kl", "step": 8, "message": KL_MESSAGE}]
    await live.disconnect()

    replay, connected, _ = await connect(run, token)
    assert [m["event"] for m in await receive_all(replay, timeout=0.5)] == ["step", "warning", "done"]
    await replay.disconnect()


def test_the_run_page_renders_its_stored_warnings(client_alice, run, caplog):
    html = client_alice.get(f"/runs/{run.pk}/").content.decode()
    assert 'id="run-warnings" hidden' in html  # the block is there for live warnings, hidden until one comes
    ingest_event(run, step_event(8), seq=0, broadcast=False)
    with caplog.at_level("WARNING", logger="crucible.runs"):
        ingest_event(run, warning(), seq=1, broadcast=False)
        ingest_event(run, warning(), seq=1, broadcast=False)  # stored before: said once
    # the `make run` terminal (webapp.console shows warnings) says it too
    assert [r.getMessage() for r in caplog.records] == [
        f"run #{run.pk} “first run”: divergence warning at step 8: {KL_MESSAGE}"]
    assert run_warnings(run) == [{"source": "monitor.kl_max", "condition": "kl", "step": 8, "metric": "kl",
                                  "value": 90.0, "bound": 10.0, "message": KL_MESSAGE}]
    html = client_alice.get(f"/runs/{run.pk}/").content.decode()
    assert 'id="run-warnings" hidden' not in html and 'id="run-warnings"' in html
    assert '<li data-condition="kl" data-step="8">⚠ step 8: ' + KL_MESSAGE + "</li>" in html


def test_the_turns_field_carries_the_configs_refusal_and_says_repair_needs_a_model_that_follows_feedback(
        client_alice, problem_set):
    from html import unescape

    from training.config import TURNS_NEED_CHAT

    r = client_alice.get(f"/runs/new?problem_set={problem_set.pk}")
    field = r.context["form"]["sampling.turns"]
    assert field.field.widget.attrs["data-needs-chat"] == TURNS_NEED_CHAT
    html = unescape(r.content.decode())
    assert f'data-needs-chat="{TURNS_NEED_CHAT}"' in html
    assert "Repair needs a model that can follow feedback" in html
    # the server refuses what the page refuses, on the same field and in the same words
    from tests.factories import form_data

    r = client_alice.post("/runs/new", form_data(problem_set, **{"sampling.turns": "2"}))
    assert r.context["form"]["sampling.turns"].errors == [TURNS_NEED_CHAT.format(turns=2, prompt_style="completion")]


def test_the_runs_list_marks_a_run_with_a_divergence_warning(client_alice, run, user, problem_set):
    from tests.factories import make_run

    calm = make_run(user, "calm run", problem_set)
    ingest_event(run, warning(), seq=0, broadcast=False)
    html = client_alice.get("/runs/").content.decode()
    row = lambda r: html[html.index(f'<tr data-run="{r.pk}"'):].split("</tr>", 1)[0]  # noqa: E731
    assert "⚠ diverging" in row(run) and f"/runs/{run.pk}/#run-warnings" in row(run)
    assert "diverging" not in row(calm)


def test_a_warning_without_a_condition_is_no_divergence_warning(client_alice, run, caplog):
    # an experiment tracker's warning (source tracking.*) is the trackers card's, not the divergence block's
    with caplog.at_level("WARNING", logger="crucible.runs"):
        ingest_event(run, line(run_events.RunWarning(source="tracking.wandb", message="W&B logging failed", step=3)),
                     seq=0, broadcast=False)
    assert run_warnings(run) == [] and not caplog.records
    assert 'id="run-warnings" hidden' in client_alice.get(f"/runs/{run.pk}/").content.decode()
    assert "⚠ diverging" not in client_alice.get("/runs/").content.decode()
