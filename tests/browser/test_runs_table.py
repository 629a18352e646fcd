"""The runs list as an experiment table in a browser: sort, search, clone."""
from tests.factories import TINY_OVERRIDES, eval_event, ingest, make_problem_set

from .conftest import login


def _with_evals(run, points):
    run.claim(host="h", pid=1)
    ingest(run, [eval_event(step, p) for step, p in points])


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


def test_at_1440_px_the_runs_table_fits_and_names_stay_on_one_or_two_lines(browser, live_server_url, staff_user,
                                                                           settings, tmp_path, output_dir):
    from webapp.runs.services import create_run

    # As `make run`'s admin sees it: staff, so with the Owner column too.
    settings.RUNS_DIR = tmp_path / "runs"
    ps = make_problem_set(staff_user, name="Demo problems (HumanEval-style)")
    for name in ("CPU demo — tiny model", "CPU demo — tiny Qwen3.5 (hybrid attention) lr 3e-5"):
        _with_evals(create_run(staff_user, name, ps, TINY_OVERRIDES), [(0, 0.36), (3, 0.69)])
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    try:
        login(page, live_server_url, "carol", "carol-password-1")
        page.goto(f"{live_server_url}/runs/")
        assert page.locator("#runs-table th[data-sort=owner]").count() == 1
        fits = page.evaluate("(() => { const s = document.querySelector('#runs-table').parentNode;"
                             " return [s.scrollWidth, s.clientWidth]; })()")
        assert fits[0] <= fits[1], f"the table is {fits[0]} px wide in {fits[1]} px: a column is cut"
        created = page.locator("#runs-table tbody tr[data-run] td:nth-last-child(2)").first
        assert len(created.inner_text()) == len("2026-12-02 00:00")
        lines = page.evaluate("Array.from(document.querySelectorAll('#runs-table tbody td:nth-child(3) a'))"
                              ".map(a => Math.round(a.getBoundingClientRect().height /"
                              " parseFloat(getComputedStyle(a).lineHeight)))")
        assert max(lines) <= 2, lines
        page.screenshot(path=str(output_dir / "runs-table-1440.png"))
    finally:
        context.close()
