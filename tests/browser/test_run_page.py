"""The run page of a finished run in a browser: its config, per-problem table and charts."""
import pytest

from tests.factories import (TINY_OVERRIDES, eval_event, ingest, make_problem_set, problem_event)

from .conftest import heldout_samples, login, wait_until


def test_the_config_is_yaml_and_copies_with_one_click(page, live_server_url, finished, output_dir):
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    login(page, live_server_url, "alice", "alice-password-1")
    page.goto(f"{live_server_url}/runs/{finished.pk}/")
    page.click("#config-details summary")
    assert "ppo:\n  learning_rate:" in page.locator("#config-yaml").inner_text()
    page.click("#copy-config")
    page.wait_for_selector("#copy-config-done:not([hidden])")
    assert page.evaluate("navigator.clipboard.readText()").startswith("# problems:")
    page.locator("#config-details").screenshot(path=str(output_dir / "run-config-yaml.png"))


def test_held_out_problems_are_in_the_table_with_before_and_after(page, live_server_url, finished, output_dir):
    login(page, live_server_url, "alice", "alice-password-1")
    page.goto(f"{live_server_url}/runs/{finished.pk}/")
    order = page.evaluate("Array.from(document.querySelectorAll('#problems tr[data-problem]'))"
                          ".map(r => r.dataset.problem)")
    assert order[-1] == "add-3"  # held-out rows after the train rows, whose candidates can be inspected
    row = page.locator("#problems tr[data-problem='add-3']")
    assert row.locator("td").nth(1).inner_text() == "heldout"
    assert row.locator("td").nth(3).inner_text() == "25% → 75%"
    row.click()
    page.wait_for_selector("#heldout-evaluations")
    assert "step 0: 25% → step 3: 75%" in page.locator("#heldout-evaluations").inner_text()
    panes = page.locator("div.grid.two", has=page.locator("#problems-table"))
    panes.screenshot(path=str(output_dir / "run-problems-heldout.png"))


def _listed(page):
    return page.evaluate("Array.from(document.querySelectorAll('#candidates details.candidate'))"
                         ".map(d => [d.dataset.phase, Number(d.dataset.step),"
                         "           d.querySelector('.outcome').textContent])")


def test_a_held_out_problems_samples_before_and_after_training_open_from_its_row(page, live_server_url, finished,
                                                                                 output_dir):
    login(page, live_server_url, "alice", "alice-password-1")
    page.goto(f"{live_server_url}/runs/{finished.pk}/")
    row = page.locator("#problems tr[data-problem='add-3']")
    row.locator("a.eval-samples.before").click()  # the 25% of "25% → 75%"
    wait_until(page, "document.getElementById('candidates').dataset.step === '0'", 10)
    assert _listed(page) == [["eval", 0, "passed"], ["eval", 0, "wrong answer"], ["eval", 0, "timeout"],
                             ["eval", 0, "runtime error"]]
    assert row.evaluate("r => r.classList.contains('selected')")
    assert page.locator("#candidates .eval-filters a.active").inner_text() == "before training (step 0)"
    failing = page.locator("#candidates details.candidate").nth(1)
    failing.locator("summary").click()
    assert "eval at step 0 · sample #1" in failing.locator("summary").inner_text()
    assert "return a - b" in failing.locator("pre, .highlight").first.inner_text()  # the code it ran
    assert "AssertionError" in failing.locator("table.tests").inner_text()  # which test failed
    assert "Traceback: boom" in failing.inner_text()  # its stderr
    page.locator("#candidates").screenshot(path=str(output_dir / "heldout-samples-before.png"))

    row.locator("a.eval-samples.after").click()  # the 75%
    wait_until(page, "document.getElementById('candidates').dataset.step === '3'", 10)
    assert [o for _, _, o in _listed(page)] == ["passed", "passed", "passed", "wrong answer"]
    page.locator("#candidates a[data-status=failed]").click()  # the viewer's filters keep the evaluation
    wait_until(page, "document.getElementById('candidates').dataset.status === 'failed'", 10)
    assert _listed(page) == [["eval", 3, "wrong answer"]]
    page.locator("#candidates .eval-filters a[data-eval-step='']").click()
    wait_until(page, "document.getElementById('candidates').dataset.step === ''", 10)
    assert [s for _, s, _ in _listed(page)] == [3, 0, 0, 0]  # failing samples of every evaluation, newest first


def test_a_live_evaluation_adds_its_samples_to_an_open_held_out_problem(page, live_server_url, user, settings,
                                                                         tmp_path):
    from webapp.runs.services import create_run

    settings.RUNS_DIR = tmp_path / "runs"
    run = create_run(user, "live run", make_problem_set(user), TINY_OVERRIDES)
    run.claim(host="h", pid=1)
    first = eval_event(0, 0.25, {"add-3": 0.25})
    first["per_problem"]["add-3"]["candidates"] = heldout_samples(("passed", "failed", "failed", "failed"))
    ingest(run, [first], thread=True)

    login(page, live_server_url, "alice", "alice-password-1")
    page.goto(f"{live_server_url}/runs/{run.pk}/")
    wait_until(page, "document.body.dataset.live === '1'", 10)
    page.locator("#problems tr[data-problem='add-3'] td").first.click()  # the row: every evaluation's samples
    wait_until(page, "document.querySelectorAll('#candidates details.candidate').length === 4", 10)
    later = eval_event(2, 0.75, {"add-3": 0.75})
    later["per_problem"]["add-3"]["candidates"] = heldout_samples(("passed", "passed", "passed", "failed"))
    ingest(run, [later], thread=True)
    wait_until(page, "document.querySelectorAll('#candidates details.candidate').length === 8", 10)
    assert [s for _, s, _ in _listed(page)] == [2] * 4 + [0] * 4
    after_step = "document.querySelector(\"#problems tr[data-problem='add-3'] a.after\").dataset.evalStep"
    wait_until(page, after_step + " === '2'", 10)  # the table redraws after the pane reloads
    after = page.locator("#problems tr[data-problem='add-3'] a.eval-samples.after")
    assert after.inner_text() == "75%"
    after.click()
    wait_until(page, "document.getElementById('candidates').dataset.step === '2'", 10)
    assert page.locator("#candidates .eval-filters a.active").inner_text() == "latest (step 2)"


def test_a_failing_candidates_zero_efficiency_is_explained(page, live_server_url, finished, output_dir):
    login(page, live_server_url, "alice", "alice-password-1")
    page.goto(f"{live_server_url}/runs/{finished.pk}/")
    page.locator("#problems tr[data-problem='HumanEval/0']").click()
    page.wait_for_selector("#candidates details.candidate")
    first = page.locator("#candidates details.candidate").first
    if not first.evaluate("d => d.open"):
        first.locator("summary").click()
    note = page.locator("#candidates [data-dimension=efficiency] .reward-note").first
    assert note.is_visible() and "by design" in note.inner_text()
    page.locator("#candidates").screenshot(path=str(output_dir / "candidate-efficiency-note.png"))


def _chart(page, chart_id):
    return page.evaluate(f"""(() => {{ const gd = document.getElementById('{chart_id}');
        return {{data: gd.data.map(t => ({{name: t.name, x: Array.from(t.x), y: Array.from(t.y),
                                           meta: t.meta || null}})),
                 layout: {{hovermode: gd.layout.hovermode, xtitle: gd.layout.xaxis.title.text,
                          dtick: gd.layout.xaxis.dtick,
                          tickformat: gd.layout.xaxis.tickformat, ytype: gd.layout.yaxis.type,
                          title_x: gd.layout.title.x, title_anchor: gd.layout.title.xanchor}},
                 folded: gd.dataset.folded, parent: gd.parentNode.id}}; }})()""")


def test_the_charts_have_smoothing_log_y_wall_time_and_a_unified_hover(page, live_server_url, finished, output_dir):
    login(page, live_server_url, "alice", "alice-password-1")
    page.goto(f"{live_server_url}/runs/{finished.pk}/")
    page.evaluate("localStorage.removeItem('crucible.charts')")
    page.reload()
    wait_until(page, "document.getElementById('chart-reward').data !== undefined", 10)
    chart = _chart(page, "chart-reward")
    assert chart["layout"]["hovermode"] == "x unified"
    assert chart["layout"]["dtick"] == 1 and chart["layout"]["tickformat"] == "d"  # whole steps
    assert chart["layout"]["title_x"] < 0.1 and chart["layout"]["title_anchor"] == "left"  # clear of the toolbar
    total = next(t for t in chart["data"] if t["name"] == "total (weighted)")
    assert total["x"] == [1, 2, 3] and total["y"] == pytest.approx([0.4, 0.5, 0.6])

    page.fill("#chart-smoothing", "0.5")
    page.dispatch_event("#chart-smoothing", "input")
    chart = _chart(page, "chart-reward")
    total = next(t for t in chart["data"] if t["name"] == "total (weighted)")
    raw = next(t for t in chart["data"] if t["name"] == "total (weighted) (raw)")
    assert raw["meta"] == "raw" and raw["y"] == pytest.approx([0.4, 0.5, 0.6])
    assert total["y"][0] == 0.4 and abs(total["y"][1] - (0.25 * 0.4 + 0.5 * 0.5) / 0.75) < 1e-9  # debiased EMA

    page.check("#chart-log-y")
    assert _chart(page, "chart-kl")["layout"]["ytype"] == "log"
    page.select_option("#chart-x", "time")
    chart = _chart(page, "chart-reward")
    assert chart["layout"]["xtitle"] == "wall time (min)"
    page.select_option("#chart-x", "tokens")  # step_event: 500 tokens/s over 1 s of rollout a step
    reward = _chart(page, "chart-reward")
    assert reward["layout"]["xtitle"] == "generated tokens"
    assert next(t for t in reward["data"] if t["name"] == "total (weighted)")["x"] == [500, 1000, 1500]
    page.select_option("#chart-x", "time")
    page.reload()  # the choices are remembered in this browser
    assert page.input_value("#chart-x") == "time" and page.is_checked("#chart-log-y")
    page.locator("#charts-main").screenshot(path=str(output_dir / "run-charts-controls.png"))


def test_a_chart_exports_its_data_as_csv(page, live_server_url, finished):
    login(page, live_server_url, "alice", "alice-password-1")
    page.goto(f"{live_server_url}/runs/{finished.pk}/")
    page.evaluate("localStorage.removeItem('crucible.charts')")
    page.reload()
    wait_until(page, "document.getElementById('chart-kl').data !== undefined", 10)
    # The toolbar shows without a hover (on hover only, its CSV button went unfound).
    button = page.locator("#chart-kl .modebar-btn[data-title='Download the data as CSV']")
    page.mouse.move(0, 0)
    assert page.evaluate("getComputedStyle(document.querySelector('#chart-kl .modebar-group')).opacity") == "1"
    assert button.is_visible() and "CSV" in page.inner_text("#chart-export-hint")
    with page.expect_download() as info:
        page.click("#chart-kl .modebar-btn[data-title='Download the data as CSV']")
    download = info.value
    assert download.suggested_filename == f"run-{finished.pk}-kl.csv"
    assert open(download.path()).read().splitlines() == ["step,KL", "1,0.001", "2,0.002", "3,0.003"]
    titles = page.evaluate("Array.from(document.querySelectorAll('#chart-kl .modebar-btn')).map(b => b.dataset.title)")
    assert any("png" in t.lower() for t in titles), titles


def test_a_clip_fraction_that_is_zero_by_construction_is_folded_with_its_reason(page, live_server_url, user, settings,
                                                                               tmp_path, output_dir):
    from tests.factories import step_event
    from webapp.runs.services import create_run

    settings.RUNS_DIR = tmp_path / "runs"
    run = create_run(user, "one epoch", make_problem_set(user), TINY_OVERRIDES)
    run.claim(host="h", pid=1)
    events = [step_event(s) for s in (1, 2)]
    for e in events:
        e["metrics"]["clip_frac"] = 0.0
    ingest(run, events)
    login(page, live_server_url, "alice", "alice-password-1")
    page.goto(f"{live_server_url}/runs/{run.pk}/")
    wait_until(page, "document.getElementById('chart-clip').data !== undefined", 10)
    clip = _chart(page, "chart-clip")
    assert clip["folded"] == "true" and clip["parent"] == "charts-folded"
    assert _chart(page, "chart-kl")["parent"] == "charts-main"  # KL moved off 0: not folded
    more = page.locator("#charts-more")
    assert more.is_visible() and "1 panel" in more.locator("summary").inner_text()
    more.locator("summary").click()
    assert "one PPO epoch over the whole batch" in page.locator("#charts-more-reasons").inner_text()
    page.locator("#charts-more").screenshot(path=str(output_dir / "run-charts-folded.png"))


def test_the_best_checkpoint_is_marked(page, live_server_url, finished, output_dir):
    login(page, live_server_url, "alice", "alice-password-1")
    page.goto(f"{live_server_url}/runs/{finished.pk}/")
    row = page.locator("#checkpoints tr.best-checkpoint")
    assert row.count() == 1 and "75%" in row.inner_text() and "best" in row.inner_text()
    row.locator("xpath=ancestor::section[1]").screenshot(path=str(output_dir / "run-checkpoints.png"))


def test_the_curves_start_above_the_fold_under_a_headline_strip(browser, live_server_url, finished, output_dir):
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    try:
        login(page, live_server_url, "alice", "alice-password-1")
        page.goto(f"{live_server_url}/runs/{finished.pk}/")
        wait_until(page, "document.getElementById('chart-reward').data !== undefined", 10)
        first_chart = page.locator("#charts-main .chart").first
        assert first_chart.get_attribute("id") == "chart-reward"
        box = first_chart.bounding_box()
        # At least half of the 300 px chart shows without scrolling.
        assert box["y"] + 150 <= 900, f"the first chart starts at y={box['y']}, below the fold of a 1440x900 window"
        charts_bottom = page.locator("#charts-main").bounding_box()
        for section in ("#runtime-card", "#checkpoints"):
            assert page.locator(section).bounding_box()["y"] > charts_bottom["y"] + charts_bottom["height"], section
        strip = page.locator("#headline-strip")
        assert "25% → 75%" in strip.locator("#headline").inner_text()
        assert page.locator("#stat-reward").inner_text() == "0.600"  # the newest step's
        assert page.locator("#stat-kl").inner_text() == "0.0030"
        assert page.locator("#stat-train-pass").inner_text() == "—"  # not reported by these events
        page.screenshot(path=str(output_dir / "run-above-the-fold.png"))
    finally:
        context.close()


def test_folded_sections_stay_folded_in_this_browser(browser, page, live_server_url, finished):
    login(page, live_server_url, "alice", "alice-password-1")
    page.goto(f"{live_server_url}/runs/{finished.pk}/")
    checkpoints = page.locator("details[data-fold='run-checkpoints']")
    assert checkpoints.get_attribute("open") is not None and page.locator("#checkpoints").is_visible()
    checkpoints.locator("summary").click()
    assert not page.locator("#checkpoints").is_visible()
    page.reload()
    assert not page.locator("#checkpoints").is_visible()
    assert page.locator("#runtime").is_visible() and page.locator("#health").is_visible()  # the others stay open
    page.locator("details[data-fold='run-checkpoints'] summary").click()
    page.locator("details[data-fold='run-runtime'] summary").click()
    page.reload()
    assert page.locator("#checkpoints").is_visible() and not page.locator("#runtime").is_visible()

    other = browser.new_context()  # another browser keeps its own choices
    try:
        fresh = other.new_page()
        login(fresh, live_server_url, "alice", "alice-password-1")
        fresh.goto(f"{live_server_url}/runs/{finished.pk}/")
        assert fresh.locator("#runtime").is_visible()
    finally:
        other.close()


def test_the_groups_chart_has_a_legend_and_the_groups_a_step_samples(page, live_server_url, user, settings, tmp_path):
    from tests.factories import step_event
    from webapp.runs.services import create_run

    settings.RUNS_DIR = tmp_path / "runs"
    run = create_run(user, "no dynamic sampling", make_problem_set(user), TINY_OVERRIDES)  # 2 problems a step
    run.claim(host="h", pid=1)
    events = [step_event(s) for s in (1, 2, 3)]
    for e, zero_variance in zip(events, (2, 1, 0)):
        e["metrics"]["zero_variance_groups"] = zero_variance
    ingest(run, events)
    login(page, live_server_url, "alice", "alice-password-1")
    page.goto(f"{live_server_url}/runs/{run.pk}/")
    wait_until(page, "document.getElementById('chart-groups').data !== undefined", 10)
    groups = _chart(page, "chart-groups")
    names = [t["name"] for t in groups["data"]]
    assert names == ["zero variance (no signal)", "sampled = used: 2 (no dynamic sampling)"]
    assert groups["data"][1]["y"] == [2, 2, 2] and groups["data"][0]["y"] == [2, 1, 0]
    assert page.evaluate("document.getElementById('chart-groups').layout.showlegend") is True
    assert page.locator("#chart-groups .legend .traces").count() == 2  # drawn, not only configured


def test_the_candidate_inspector_pages_through_every_candidate(page, live_server_url, user, settings, tmp_path):
    from tests.factories import step_event
    from webapp.runs.services import create_run

    settings.RUNS_DIR = tmp_path / "runs"
    run = create_run(user, "many candidates", make_problem_set(user), TINY_OVERRIDES)
    run.claim(host="h", pid=1)
    events = []
    for s in (1, 2, 3):  # 3 steps x 25 failed candidates of one problem: 75, more than a page of 50
        events += [step_event(s), problem_event(s, "HumanEval/0", ("failed",) * 25)]
    ingest(run, events)

    def listed():
        return page.evaluate("Array.from(document.querySelectorAll('#candidates details.candidate'))"
                             ".map(d => d.dataset.step + ':' + d.dataset.index)")

    login(page, live_server_url, "alice", "alice-password-1")
    page.goto(f"{live_server_url}/runs/{run.pk}/")
    page.locator("#problems tr[data-problem='HumanEval/0']").click()
    page.wait_for_selector("#candidate-pages")
    assert "75 failed candidates, 1–50 shown" in page.inner_text("#candidates")
    first = listed()
    assert len(first) == 50 and first[0] == "3:0"  # newest first
    page.click("#candidate-pages a:has-text('older 25')")
    wait_until(page, "document.querySelectorAll('#candidates details.candidate').length === 25", 10)
    second = listed()
    assert "51–75 shown" in page.inner_text("#candidates") and second[-1] == "1:24"
    assert not set(first) & set(second) and len(set(first) | set(second)) == 75  # every candidate, once
    page.click("#candidate-pages a:has-text('newer 50')")
    wait_until(page, "document.querySelectorAll('#candidates details.candidate').length === 50", 10)
    assert listed() == first


def test_a_series_under_another_stays_visible_with_markers_and_a_legend_note(page, live_server_url, user,
                                                                               settings, tmp_path):
    """The reward chart's "format" at 1.0 every step lay under "syntax" at 1.0: in the legend, never seen."""
    from tests.factories import install_model_stub, line, make_run
    from training import events as run_events

    settings.RUNS_DIR, settings.MODELS_DIR = tmp_path / "runs", tmp_path / "models"
    install_model_stub(settings.MODELS_DIR / "tiny")
    run = make_run(user, "format under syntax")
    run.claim(host="h", pid=1)
    ingest(run, [line(run_events.step_event(s, {"reward/mean": 0.5 + 0.1 * s, "reward/pass_rate": 0.1 * s,
                                                   "reward/syntax": 1.0, "reward/format": 1.0}))
                 for s in (1, 2, 3)])
    login(page, live_server_url, "alice", "alice-password-1")
    page.goto(f"{live_server_url}/runs/{run.pk}/")
    wait_until(page, "Number(document.getElementById('chart-reward').dataset.points) === 3", 10)
    traces = {t["name"]: t for t in page.evaluate(
        "document.getElementById('chart-reward').data.map(t => ({name: t.name, plain: t.plainName || t.name, "
        "mode: t.mode, marker: t.marker ? t.marker.symbol : null}))")}
    under = next(t for t in traces.values() if t["plain"] == "format")
    assert under["name"] == "format (under syntax)"  # the legend says where it is
    assert under["mode"] == "lines+markers" and under["marker"] == "circle-open"  # rings the line on top
    on_top = next(t for t in traces.values() if t["plain"] == "syntax")
    assert on_top["name"] == "syntax" and on_top["marker"] is None
    assert all("(under" not in t["name"] for t in traces.values() if t["plain"] not in ("format",))
