"""The run state lines `make run`'s terminal shows (webapp.console.RUN_STATE): one per change, so a run
says "running at step 0" once although its supervisor's claim and its trainer's start both notify it."""
import logging

import pytest

from webapp.console import Echo, SeenWarnings
from webapp.runs import services
from webapp.runs.services import StateLines, ingest_event, notify_status

from tests.factories import start_event


@pytest.fixture(autouse=True)
def fresh_state_lines(monkeypatch):
    """This process's memory of the lines logged (run ids may recur across tests' databases)."""
    monkeypatch.setattr(services, "state_lines", StateLines())


def _state_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "crucible.runs" and "”: " in r.getMessage()]


def test_a_run_says_running_at_step_0_once_when_it_claims_and_its_trainer_starts(run, caplog):
    with caplog.at_level(logging.INFO, logger="crucible.runs"):
        notify_status(run)  # still queued, as created: said already
        run.claim(host="h", pid=1)
        notify_status(run)  # the supervisor's claim
        ingest_event(run, start_event(), seq=0)  # the trainer's start notifies the page again
    assert _state_lines(caplog) == [f"run #{run.pk} “{run.name}”: running at step 0"]
    assert all(Echo(False, SeenWarnings())(f"2026-12-06 04:00:00,000 INFO crucible.runs: {line}")
               for line in _state_lines(caplog))


def test_each_change_still_gets_its_line(run, caplog):
    with caplog.at_level(logging.INFO, logger="crucible.runs"):
        run.claim(host="h", pid=1)
        notify_status(run)
        run.finish("failed", "trainer exited with status 1\nTraceback ...")
        notify_status(run)
        notify_status(run)  # a repeat of the same state says nothing new
    assert _state_lines(caplog) == [f"run #{run.pk} “{run.name}”: running at step 0",
                                    f"run #{run.pk} “{run.name}”: failed at step 0 (trainer exited with status 1)"]
