"""The run page's reward-integrity panel in a browser: the flag chart and tables, a flagged candidate
opened from the panel with its badges, the viewer's flag filter, and a live step and its candidates."""
from tests.factories import (PENALIZE, TINY_OVERRIDES, flagged_by_step, flagged_events, ingest, install_model_stub,
                             make_problem_set)

from .conftest import login, wait_until


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
    ingest(run, flagged_events(1, flagged_by_step(1)) + flagged_events(2, flagged_by_step(2)), thread=True)

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
    ingest(run, flagged_events(3, {0: ["hardcoded_outputs"], 2: ["hardcoded_outputs"]}), thread=True)
    wait_until(page, "(document.getElementById('chart-flags').data || [])"
                     ".some(t => t.name === 'hardcoded_outputs')", 10)
    chart = {t["name"]: t for t in _chart(page)}
    assert chart["hardcoded_outputs"]["x"] == [1, 2, 3] and chart["hardcoded_outputs"]["y"] == [0, 0, 2]
    wait_until(page, "document.querySelector('#integrity-latest tbody tr').dataset.step === '3'", 10)
    assert "step 3" in page.locator("#integrity-flags thead").inner_text().lower()  # th: uppercase
    page.locator("#integrity").screenshot(path=str(output_dir / "run-integrity-live.png"))
    page.screenshot(path=str(output_dir / "run-page-integrity.png"), full_page=True)
