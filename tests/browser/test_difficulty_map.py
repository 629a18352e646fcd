"""The run page's difficulty map in a browser: the heatmap and its marks, the three sort orders, a
click on a cell that opens that step's candidates (a set-aside group's marked as not in the update),
and a live step that joins the map."""
from tests.factories import (TINY_OVERRIDES, difficulty_events, ingest, install_model_stub, make_problem_set,
                             problem_event, step_event)

from .conftest import login, wait_until


def _map(page):
    return page.evaluate("""(() => { const gd = document.getElementById('chart-difficulty');
        if (!gd.data || !gd.data.length) return null;
        const h = gd.data[0];
        return {x: Array.from(h.x), y: Array.from(h.y), z: h.z.map(r => Array.from(r)),
                ticks: gd.layout.yaxis.ticktext.slice(), aside: gd.data[1] ? Array.from(gd.data[1].y) : []}; })()""")


def _click_cell(page, problem_id, step):
    """A real mouse click in the middle of the cell (Plotly maps the point to data itself)."""
    page.locator("#chart-difficulty").scroll_into_view_if_needed()
    x, y = page.evaluate("""([pid, step]) => { const gd = document.getElementById('chart-difficulty');
        const fl = gd._fullLayout, box = gd.getBoundingClientRect();
        return [box.left + fl.xaxis._offset + fl.xaxis.d2p(step), box.top + fl.yaxis._offset + fl.yaxis.d2p(pid)]; }""",
                         [problem_id, step])
    page.mouse.click(x, y)


def _listed(page):
    return page.evaluate("Array.from(document.querySelectorAll('#candidates details.candidate'))"
                         ".map(d => d.dataset.step + ':' + d.dataset.index)")


def test_the_difficulty_map_sorts_marks_solved_and_unsolved_and_opens_a_cells_candidates(
        page, live_server_url, user, settings, tmp_path, output_dir):
    from webapp.runs.services import create_run

    settings.RUNS_DIR, settings.MODELS_DIR = tmp_path / "runs", tmp_path / "models"
    install_model_stub(settings.MODELS_DIR / "tiny")  # the run is never trained: its model is only named
    run = create_run(user, "mapped run", make_problem_set(user),
                     TINY_OVERRIDES | {"train": {"steps": 4}, "sampling": {"dynamic": True, "problems_per_step": 2,
                                                                            "candidates_per_problem": 2}})
    run.claim(host="h", pid=1)
    events = difficulty_events()
    ingest(run, events, thread=True)

    login(page, live_server_url, "alice", "alice-password-1")
    page.goto(f"{live_server_url}/runs/{run.pk}/")
    wait_until(page, "(document.getElementById('chart-difficulty').data || []).length > 0", 10)
    shown = _map(page)
    # Worst final pass rate first: add-1 (0%), add-2 (50%), HumanEval/0 (100%).
    assert shown["y"] == ["add-1", "add-2", "HumanEval/0"] and shown["x"] == [1, 2, 3]
    assert shown["z"] == [[0.0, None, 0.0], [None, 0.5, None], [0.0, 0.5, 1.0]]
    assert "✗" in shown["ticks"][0] and "▲" in shown["ticks"][2] and "▲" not in shown["ticks"][1]
    assert shown["aside"] == ["add-1", "add-1"]  # its two set-aside groups are circled
    summary = page.locator("#difficulty-summary").inner_text()
    assert "▲ 1 became solved: HumanEval/0" in summary and "✗ 1 never solved: add-1" in summary
    assert "1 solved from the first time sampled, of 3 train problems" in summary
    # what "solved" counts, beside rows whose pass rate fell later
    assert page.inner_text("#difficulty-solved-means") == (
        "Solved: at least one candidate passed every test at some step (not the pass rate now); "
        "0 of the solved had no passing candidate the last time they were sampled.")
    page.locator("#difficulty").screenshot(path=str(output_dir / "run-difficulty-map.png"))

    page.select_option("#difficulty-sort", "first_solved")  # step 2 for both solved ones, never solved last
    wait_until(page, "JSON.parse(document.getElementById('chart-difficulty').dataset.order)[2] === 'add-1'", 10)
    assert _map(page)["y"] == ["HumanEval/0", "add-2", "add-1"]
    page.select_option("#difficulty-sort", "zero_variance")  # two zero-variance steps each, then none
    wait_until(page, "JSON.parse(document.getElementById('chart-difficulty').dataset.order)[2] === 'add-2'", 10)
    assert _map(page)["y"] == ["HumanEval/0", "add-1", "add-2"]

    # A cell opens that step's candidates of that problem, every status; "all steps" widens it.
    _click_cell(page, "HumanEval/0", 2)
    wait_until(page, "document.getElementById('candidates').dataset.step === '2'", 10)
    assert page.evaluate("document.getElementById('candidates').dataset.problem") == "HumanEval/0"
    assert _listed(page) == ["2:0", "2:1"]
    assert "step 2 only" in page.locator("#candidates-step").inner_text()
    page.locator("#candidates a[data-step-filter]").click()
    wait_until(page, "document.getElementById('candidates').dataset.step === ''", 10)
    assert _listed(page) == ["3:0", "3:1", "2:0", "2:1", "1:0", "1:1"]

    # A set-aside group's candidates say they were not in the update.
    _click_cell(page, "add-1", 3)
    wait_until(page, "document.getElementById('candidates').dataset.problem === 'add-1'", 10)
    assert _listed(page) == ["3:0", "3:1"]
    badge = page.locator("#candidates details.candidate .set-aside").first
    assert badge.inner_text() == "not in the update (zero variance)"
    assert "no learning signal" in badge.get_attribute("title")
    page.locator(".candidates-card").screenshot(path=str(output_dir / "candidates-set-aside.png"))

    # A live step: add-2 solved by both candidates at step 4 joins the map.
    wait_until(page, "document.body.dataset.live === '1'", 10)
    ingest(run, [step_event(4), problem_event(4, "add-2", ("passed", "passed"))], thread=True)
    wait_until(page, "document.getElementById('chart-difficulty').dataset.steps === '4'", 10)
    shown = _map(page)
    assert shown["x"] == [1, 2, 3, 4] and shown["z"][shown["y"].index("add-2")] == [None, 0.5, None, 1.0]
    page.screenshot(path=str(output_dir / "run-page-difficulty.png"), full_page=True)


def test_the_title_of_a_tall_map_stays_above_its_first_rows_labels(page, live_server_url, user, settings, tmp_path):
    from tests.factories import problem_lines
    from webapp.runs.services import create_run

    settings.RUNS_DIR, settings.MODELS_DIR = tmp_path / "runs", tmp_path / "models"
    install_model_stub(settings.MODELS_DIR / "tiny")
    run = create_run(user, "tall map", make_problem_set(user, data=problem_lines(60, 1)), TINY_OVERRIDES)
    run.claim(host="h", pid=1)
    events = [step_event(1)] + [problem_event(1, f"add-{i}", ("failed", "passed")) for i in range(1, 60)]
    ingest(run, events, thread=True)
    login(page, live_server_url, "alice", "alice-password-1")
    page.goto(f"{live_server_url}/runs/{run.pk}/")
    wait_until(page, "(document.getElementById('chart-difficulty').data || []).length > 0", 10)
    title, first_label = page.evaluate("""(() => {
        const gd = document.getElementById('chart-difficulty');
        const title = gd.querySelector('.gtitle').getBoundingClientRect();
        const labels = Array.from(gd.querySelectorAll('.ytick text')).map(t => t.getBoundingClientRect());
        const top = labels.reduce((a, b) => (b.top < a.top ? b : a));
        return [[title.top, title.bottom], [top.top, top.bottom]]; })()""")
    assert len(_map(page)["y"]) == 59
    assert title[1] <= first_label[0], f"the title (y {title}) overlaps the first row's label (y {first_label})"
