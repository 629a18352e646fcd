"""The runs list as an experiment table in a browser: sort, search, clone."""
from tests.webapp.runs.conftest import TINY_OVERRIDES, eval_event, make_problem_set, write_events

from .conftest import login


def _with_evals(run, points):
    from webapp.runs.supervisor import EventFollower, ingest_new_events

    run.claim(host="h", pid=1)
    write_events(run.path / "events.jsonl", [eval_event(step, p) for step, p in points])
    follower = EventFollower(run.path / "events.jsonl")
    ingest_new_events(run, follower)
    follower.close()


def test_runs_sort_by_best_pass_and_filter_by_notes(page, live_server_url, user, settings, tmp_path, output_dir):
    from webapp.runs.services import create_run

    settings.RUNS_DIR = tmp_path / "runs"
    ps = make_problem_set(user)
    for name, points, notes in (("low", [(0, 0.2), (3, 0.3)], ""), ("high", [(0, 0.2), (3, 0.9)], "#sweep"),
                                ("mid", [(0, 0.2), (3, 0.5)], "#sweep")):
        run = create_run(user, name, ps, TINY_OVERRIDES)
        run.notes = notes
        run.save(update_fields=["notes"])
        _with_evals(run, points)
    login(page, live_server_url, "alice", "alice-password-1")
    page.goto(f"{live_server_url}/runs/")
    names = lambda: page.evaluate(  # noqa: E731
        "Array.from(document.querySelectorAll('#runs-table tbody tr[data-run]:not([hidden]) td:nth-child(3) a'))"
        ".map(a => a.textContent)")
    page.click("th[data-sort=best]")
    assert names() == ["high", "mid", "low"]
    page.click("th[data-sort=best]")
    assert names() == ["low", "mid", "high"]
    page.fill("#run-search", "#sweep")
    assert sorted(names()) == ["high", "mid"] and page.inner_text("#run-count") == "2 of 3 runs"
    page.screenshot(path=str(output_dir / "runs-table.png"))
    page.fill("#run-search", "")
    page.click("tr:has-text('high') >> text=clone")
    page.wait_for_url("**/runs/new?clone=*")
    assert page.input_value("input[name=name]") == "high (clone)"
