"""Compare in a browser: the list's button needs two runs; the metric picker shows names, not keys."""
import pytest

from tests.factories import TINY_OVERRIDES, ingest, make_problem_set

from .conftest import login, wait_until


def test_the_compare_button_waits_for_two_runs(page, live_server_url, user):
    from webapp.runs.services import create_run

    ps = make_problem_set(user)
    for name in ("a", "b"):
        create_run(user, name, ps, TINY_OVERRIDES)
    login(page, live_server_url, "alice", "alice-password-1")
    page.goto(f"{live_server_url}/runs/")
    button = page.locator("#compare-button")
    assert button.is_disabled() and button.inner_text() == "Compare: tick 2 more runs"
    page.locator(".compare-pick").nth(0).check()
    assert button.is_disabled() and button.inner_text() == "Compare: tick 1 more run"
    page.locator(".compare-pick").nth(1).check()
    assert button.is_enabled() and button.inner_text() == "Compare 2 runs"
    button.click()
    page.wait_for_url("**/runs/compare?ids=*")


def test_the_metric_picker_lists_names(page, live_server_url, user, finished, output_dir):
    from webapp.runs.services import create_run

    other = create_run(user, "other", finished.problem_set, TINY_OVERRIDES)
    login(page, live_server_url, "alice", "alice-password-1")
    page.goto(f"{live_server_url}/runs/compare?ids={finished.pk},{other.pk}")
    wait_until(page, "document.querySelectorAll('#metric-pick option').length > 0", 10)
    options = page.evaluate("Array.from(document.querySelectorAll('#metric-pick option'))"
                            ".map(o => [o.value, o.textContent])")
    names = dict(options)
    assert names["reward/pass_rate"] == "reward: tests passed (train)" and names["kl"] == "KL to the reference model"
    assert all(text != key for key, text in options)  # no raw keys
    page.screenshot(path=str(output_dir / "compare.png"), full_page=True)


def test_a_run_keeps_its_colour_whatever_the_order_and_steps_are_whole(page, live_server_url, user, finished):
    from webapp.runs.services import create_run

    other = create_run(user, "other", finished.problem_set, TINY_OVERRIDES)
    login(page, live_server_url, "alice", "alice-password-1")
    colours = []
    for ids in (f"{finished.pk},{other.pk}", f"{other.pk},{finished.pk}"):
        page.goto(f"{live_server_url}/runs/compare?ids={ids}")
        wait_until(page, "document.getElementById('compare-reward').data !== undefined", 10)
        colours.append(page.evaluate("Object.fromEntries(document.getElementById('compare-reward').data"
                                     ".map(t => [t.name, t.line.color]))"))
        layout = page.evaluate("(() => { const l = document.getElementById('compare-reward').layout;"
                               " return [l.hovermode, l.xaxis.dtick, l.xaxis.tickformat]; })()")
        assert layout == ["x unified", 1, "d"]
    assert colours[0] == colours[1]
    assert colours[0][f"#{finished.pk} finished run"] == page.evaluate(f"CrucibleCharts.runColour({finished.pk})")


def test_compare_smooths_and_logs_like_the_run_page(page, live_server_url, user, finished):
    from webapp.runs.services import create_run

    other = create_run(user, "other", finished.problem_set, TINY_OVERRIDES)
    login(page, live_server_url, "alice", "alice-password-1")
    page.goto(f"{live_server_url}/runs/compare?ids={finished.pk},{other.pk}")
    wait_until(page, "document.getElementById('compare-reward').data !== undefined", 10)
    page.fill("#chart-smoothing", "0.5")
    page.dispatch_event("#chart-smoothing", "input")
    page.check("#chart-log-y")
    data = page.evaluate("document.getElementById('compare-reward').data"
                         ".map(t => [t.name, t.meta || null, Array.from(t.y)])")
    raw = [d for d in data if d[1] == "raw"]
    assert len(raw) == 1 and raw[0][2] == pytest.approx([0.4, 0.5, 0.6])  # the finished run's raw rewards
    assert page.evaluate("document.getElementById('compare-reward').layout.yaxis.type") == "log"
    page.reload()
    assert page.is_checked("#chart-log-y") and page.input_value("#chart-smoothing") == "0.5"


def test_compare_puts_each_run_on_its_own_wall_time_and_tokens(page, live_server_url, user, finished):
    from tests.factories import step_event
    from webapp.runs.services import create_run

    other = create_run(user, "slower", finished.problem_set, TINY_OVERRIDES)
    other.claim(host="h", pid=1)
    steps = [step_event(s) for s in (1, 2)]
    for s, event in enumerate(steps, start=1):  # 100 tokens a step; a step a minute, the first from t = 1000
        event["metrics"] |= {"tokens_per_s": 50.0, "time/rollout_s": 2.0, "time/step_s": 60.0}
        event["time"] = 1000.0 + 60 * s
    ingest(other, steps)

    login(page, live_server_url, "alice", "alice-password-1")
    page.goto(f"{live_server_url}/runs/compare?ids={finished.pk},{other.pk}")
    wait_until(page, "document.getElementById('compare-reward').data !== undefined", 10)

    def xs(chart):
        return page.evaluate(f"(() => {{ const gd = document.getElementById('{chart}');"
                             " return [gd.layout.xaxis.title.text, Object.fromEntries(gd.data"
                             ".filter(t => t.meta !== 'raw').map(t => [t.name, Array.from(t.x)]))]; })()")

    assert xs("compare-reward") == ["step", {f"#{finished.pk} finished run": [1, 2, 3], f"#{other.pk} slower": [1, 2]}]
    page.select_option("#chart-x", "tokens")  # the finished run: 500 tokens/s over 1 s of rollout a step
    assert xs("compare-reward") == ["generated tokens", {f"#{finished.pk} finished run": [500, 1000, 1500],
                                                         f"#{other.pk} slower": [100, 200]}]
    title, evals = xs("compare-eval")  # the evaluation before training sits at 0 on every axis
    assert evals[f"#{finished.pk} finished run"] == [0, 1500] and evals[f"#{other.pk} slower"] == []
    page.select_option("#chart-x", "time")
    title, reward = xs("compare-reward")
    assert title == "wall time (min)" and reward[f"#{other.pk} slower"] == pytest.approx([1, 2])
    page.reload()  # remembered in this browser, with the run page's choice
    assert page.input_value("#chart-x") == "time"
    assert page.evaluate("JSON.parse(localStorage.getItem('crucible.charts')).x") == "time"


def test_the_summary_table_sorts_and_a_run_page_compares_with_a_picked_run(page, live_server_url, user, finished,
                                                                          output_dir):
    from webapp.runs.services import create_run

    other = create_run(user, "not started", finished.problem_set, TINY_OVERRIDES)
    login(page, live_server_url, "alice", "alice-password-1")
    page.goto(f"{live_server_url}/runs/{finished.pk}/")
    page.click("#compare-with summary")
    assert page.locator("#compare-with button[type=submit]").is_disabled()  # until another run is ticked
    page.check(f"#compare-with input[name=ids][value='{other.pk}']")
    page.click("#compare-with button[type=submit]")
    page.wait_for_url("**/runs/compare?*")

    def column(n):
        return page.evaluate(f"Array.from(document.querySelectorAll('#compare-summary tbody tr'))"
                             f".map(tr => tr.cells[{n}].innerText)")

    summary = page.locator("#compare-summary")
    assert summary.bounding_box()["y"] < page.locator("#compare-main").bounding_box()["y"]  # above the charts
    names = column(0)
    assert names[0].startswith(f"#{finished.pk} finished run") and names[1].startswith(f"#{other.pk} not started")
    assert column(1) == ["25%", "—"] and column(2) == ["75%", "—"] and column(3)[0].startswith("75% step 3")
    assert column(4) == ["0.600", "—"] and column(6) == ["3 / 3", "0 / 3"] and column(7) == ["hf", "hf"]
    page.click("#compare-summary th:has-text('Steps')")
    assert column(6) == ["0 / 3", "3 / 3"]
    page.click("#compare-summary th:has-text('Steps')")  # again: the other way
    assert column(6) == ["3 / 3", "0 / 3"]
    page.click("#compare-summary th:has-text('Held-out after')")
    page.click("#compare-summary th:has-text('Held-out after')")
    assert column(2) == ["75%", "—"]  # a run without a value stays last either way
    summary.screenshot(path=str(output_dir / "compare-summary.png"))
