"""The run page's reward-integrity panel in a browser: the flag chart and tables, a flagged candidate
opened from the panel with its badges, the viewer's flag filter, and a live step and its candidates."""
import threading

from sandbox.flags import VOCABULARY
from tests.webapp.runs.conftest import (TINY_OVERRIDES, install_model_stub, make_problem_set, problem_event,
                                       step_event)
from tests.webapp.runs.test_integrity import FLAGGED, PENALIZE

from .conftest import login
from .test_run_flow import wait_until


def _events(step, flagged):
    """A step and HumanEval/0's three candidates; ``flagged``: {index: flags}."""
    step_ev = step_event(step)
    step_ev["metrics"] |= {f"flags/{name}": sum(name in f for f in flagged.values()) for name in VOCABULARY}
    step_ev["metrics"]["candidates"] = 3
    event = problem_event(step, statuses=("passed", "failed", "failed"))
    for index, cand in enumerate(event["candidates"]):
        cand["result"]["flags"] = flagged.get(index, [])
        penalized = [f for f in PENALIZE if f in cand["result"]["flags"]]
        if penalized:
            cand |= {"penalized_flags": penalized, "reward": 0.0}
    return [step_ev, event]


def _ingest_elsewhere(run, events, first_seq):
    """Store and broadcast from another thread: Playwright's sync API keeps an event loop on this one,
    where the channel layer's async_to_sync refuses to run."""
    from django.db import connection

    from webapp.runs.services import ingest_event

    def work():
        try:
            for seq, event in enumerate(events, start=first_seq):
                ingest_event(run, event, seq=seq)
        finally:
            connection.close()

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()


def _chart(page):
    return page.evaluate("""(() => { const gd = document.getElementById('chart-flags');
        return gd.data ? gd.data.map(t => ({name: t.name, x: Array.from(t.x), y: Array.from(t.y)})) : null; })()""")


def test_the_integrity_panel_opens_flagged_candidates_filters_them_and_follows_live(page, live_server_url, user,
                                                                                  settings, tmp_path, output_dir):
    from webapp.runs.services import create_run

    settings.RUNS_DIR, settings.MODELS_DIR = tmp_path / "runs", tmp_path / "models"
    install_model_stub(settings.MODELS_DIR / "tiny")  # the run is never trained: its model is only named
    run = create_run(user, "flagged run", make_problem_set(user),
                     TINY_OVERRIDES | {"train": {"steps": 3}, "reward": {"penalize_flags": PENALIZE}})
    run.claim(host="h", pid=1)
    events = []
    for step in (1, 2):
        events += _events(step, {i: f for (s, i), f in FLAGGED.items() if s == step})
    _ingest_elsewhere(run, events, 0)

    login(page, live_server_url, "alice", "alice-password-1")
    page.goto(f"{live_server_url}/runs/{run.pk}/")
    wait_until(page, "document.getElementById('chart-flags').data !== undefined", 10)
    assert _chart(page) == [{"name": "spoofed_output", "x": [1, 2], "y": [2, 0]},
                            {"name": "broad_except", "x": [1, 2], "y": [1, 1]}]
    badge = page.locator("#integrity-flags tr[data-flag=spoofed_output] .flag-badge")
    assert "penalized" in badge.inner_text() and "imitate test verdicts" in badge.get_attribute("title")
    page.locator("#integrity").screenshot(path=str(output_dir / "run-integrity.png"))

    # The newest flagged candidate opens in the viewer, filtered by its flag, expanded.
    page.locator("#integrity-latest a.open-flagged").first.click()
    wait_until(page, "document.getElementById('candidates').dataset.flag === 'broad_except'", 10)
    listed = page.evaluate("Array.from(document.querySelectorAll('#candidates details.candidate'))"
                           ".map(d => [d.dataset.step, d.dataset.index, d.open])")
    assert listed == [["2", "1", True], ["1", "2", False]]
    assert page.locator("#candidates .flag-filters a.active").inner_text() == "broad_except (2)"
    notes = page.locator("#candidates details.candidate[data-step='2'] .flag-notes")
    assert notes.is_visible() and "bare or BaseException handler" in notes.inner_text()

    # The filter: any flag, then spoofed_output combined with "failing".
    page.locator("#candidates .flag-filters a[data-flag='']").click()
    wait_until(page, "document.querySelectorAll('#candidates details.candidate').length === 6", 10)
    page.locator("#candidates a[data-status=failed]").click()
    wait_until(page, "document.getElementById('candidates').dataset.status === 'failed'", 10)
    page.locator("#candidates .flag-filters a[data-flag=spoofed_output]").click()
    wait_until(page, "document.getElementById('candidates').dataset.flag === 'spoofed_output'", 10)
    assert page.evaluate("Array.from(document.querySelectorAll('#candidates details.candidate'))"
                         ".map(d => d.dataset.step + ':' + d.dataset.index)") == ["1:2"]
    summary = page.locator("#candidates details.candidate summary").first
    assert "spoofed_output · penalized" in summary.inner_text()
    page.locator("#candidates").screenshot(path=str(output_dir / "candidate-flag-badges.png"))

    # A live step: a new flag joins the chart, and its candidate heads the latest list.
    wait_until(page, "document.body.dataset.live === '1'", 10)
    _ingest_elsewhere(run, _events(3, {0: ["hardcoded_outputs"], 2: ["hardcoded_outputs"]}), len(events))
    wait_until(page, "(document.getElementById('chart-flags').data || [])"
                     ".some(t => t.name === 'hardcoded_outputs')", 10)
    chart = {t["name"]: t for t in _chart(page)}
    assert chart["hardcoded_outputs"]["x"] == [1, 2, 3] and chart["hardcoded_outputs"]["y"] == [0, 0, 2]
    wait_until(page, "document.querySelector('#integrity-latest tbody tr').dataset.step === '3'", 10)
    assert "step 3" in page.locator("#integrity-flags thead").inner_text().lower()  # th: uppercase
    page.locator("#integrity").screenshot(path=str(output_dir / "run-integrity-live.png"))
    page.screenshot(path=str(output_dir / "run-page-integrity.png"), full_page=True)
