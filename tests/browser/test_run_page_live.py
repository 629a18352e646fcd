"""The run page while a run goes on: what a person reads stays where it is (issue #30 item 6), and the
checkpoints are one click from the headline."""
import time

import pytest

from tests.factories import ingest, install_model_stub, make_run, problem_event, result, step_event

from .conftest import login, wait_until


def test_checkpoints_and_the_best_download_are_reachable_from_the_headline(page, live_server_url, finished,
                                                                            output_dir):
    login(page, live_server_url, "alice", "alice-password-1")
    page.goto(f"{live_server_url}/runs/{finished.pk}/")
    page.evaluate("localStorage.setItem('crucible.folded', JSON.stringify({'run-checkpoints': true}))")
    page.reload()  # the checkpoints section folded away in this browser
    best = page.locator("#headline-checkpoints-links #download-best")
    assert best.is_visible() and best.inner_text() == "download best (step 3)"
    assert "75%" in best.get_attribute("title")
    checkpoint = finished.checkpoints.get()
    assert best.get_attribute("href") == f"/api/runs/{finished.pk}/checkpoints/{checkpoint.pk}/download"
    assert page.inner_text("#checkpoint-count") == "1"
    page.locator("#headline-checkpoints-links").locator("xpath=ancestor::section").screenshot(path=str(output_dir / "run-headline.png"))
    assert not page.locator("#checkpoints").is_visible()
    page.click("#headline-checkpoints")
    wait_until(page, "(() => { const r = document.getElementById('checkpoints-card').getBoundingClientRect();"
                     " return r.top >= -1 && r.top < 200; })()", 10)
    assert page.locator("#checkpoints tr.best-checkpoint").is_visible()  # the fold opened


@pytest.fixture
def live(user, settings, tmp_path):
    """A running run with three steps of HumanEval/0 and add-1 stored: HumanEval/0's failing candidates
    are two codes, one of them three times."""
    settings.RUNS_DIR, settings.MODELS_DIR = tmp_path / "runs", tmp_path / "models"
    install_model_stub(settings.MODELS_DIR / "tiny")
    run = make_run(user, "live run")
    run.claim(host="h", pid=1)
    ingest(run, [e for s in (1, 2, 3) for e in (step_event(s), failing_group(s),
                                                 problem_event(s, "add-1", ("passed", "passed", "failed")))])
    return run


def failing_group(step):
    codes = ["def add0(a, b):\n    return a - b\n"] * 3 + ["def add0(a, b):\n    return a * b\n", "def add0(a, b):\n    return a + b\n"]
    cands = [{"code": code, "reward": 0.3 if i < 4 else 1.0, "rewards": {"pass_rate": 0.5},
              "result": result("failed" if i < 4 else "passed", passed=1 if i < 4 else 2)} for i, code in enumerate(codes)]
    return {"event": "problem", "step": step, "problem_id": "HumanEval/0", "candidates": cands, "time": time.time()}


def _top(page, step, index):
    return page.evaluate(f"document.querySelector('#candidates details.candidate[data-step=\"{step}\"][data-index=\"{index}\"]')"
                         ".getBoundingClientRect().top")


def test_the_inspector_groups_failures_and_keeps_the_open_candidate_in_place_as_steps_arrive(page, live_server_url,
                                                                                           live, output_dir):
    page.set_viewport_size({"width": 1400, "height": 700})
    login(page, live_server_url, "alice", "alice-password-1")
    page.goto(f"{live_server_url}/runs/{live.pk}/")
    wait_until(page, "document.body.dataset.live === '1'", 10)
    page.click("#problems tr[data-problem='HumanEval/0']")
    page.wait_for_selector("#candidate-groups")
    assert page.inner_text("#candidate-groups summary") == "12 failing, in 2 distinct codes and 1 first error"
    by_code = page.locator("#groups-by-code li")
    assert by_code.nth(0).inner_text() == "9× def add0(a, b): ⏎ return a - b"
    assert by_code.nth(1).inner_text() == "3× def add0(a, b): ⏎ return a * b"
    assert page.locator("#groups-by-error li").first.inner_text().startswith("12×")
    by_code.nth(1).locator("a").click()  # the a * b group: its three marked, the newest opened
    marked = page.evaluate("Array.from(document.querySelectorAll('#candidates details.in-group'))"
                           ".map(d => d.dataset.step + ':' + d.dataset.index)")
    assert marked == ["3:3", "2:3", "1:3"]
    page.evaluate("document.querySelector('.candidates-card').scrollTop = 0")
    page.locator(".candidates-card").screenshot(path=str(output_dir / "run-inspector-groups.png"))
    page.locator("#candidates details.candidate[data-step='2'][data-index='1'] > summary").click()  # read one
    page.locator("#candidates details.candidate[data-step='2'][data-index='1']").scroll_into_view_if_needed()
    before = _top(page, 2, 1)

    ingest(live, [step_event(4), failing_group(4)], thread=True)  # four more failing candidates above it
    page.wait_for_selector("#candidates details.candidate.new-candidate")
    assert page.locator("#candidates details.new-candidate").count() == 4
    assert page.locator("#candidates details.new-candidate[open]").count() == 0  # marked, not opened
    assert page.evaluate("document.querySelector('#candidates details[data-step=\"2\"][data-index=\"1\"]').open")
    assert abs(_top(page, 2, 1) - before) <= 2, "the candidate being read moved"
    assert page.inner_text("#candidate-groups summary").startswith("16 failing")
    assert page.locator("#candidates details.in-group").count() == 4  # the picked group holds, with step 4's


def test_live_rows_change_in_place_new_ones_are_marked_and_sort_now_orders_them(page, live_server_url, live):
    login(page, live_server_url, "alice", "alice-password-1")
    page.goto(f"{live_server_url}/runs/{live.pk}/")
    wait_until(page, "document.body.dataset.live === '1'", 10)
    order = "Array.from(document.querySelectorAll('#problems tr[data-problem]')).map(r => r.dataset.problem)"
    assert page.evaluate(order) == ["HumanEval/0", "add-1"]  # worst first: 20% then 67%
    page.evaluate("document.querySelectorAll('#problems tr[data-problem]').forEach(r => { r.kept = true; })")
    assert not page.is_visible("#problems-sort")

    # HumanEval/0 becomes the best and a new problem arrives: nothing moves under the pointer.
    ingest(live, [step_event(4), problem_event(4, "HumanEval/0", ("passed",) * 4),
                  problem_event(4, "add-2", ("failed", "failed"))], thread=True)
    page.wait_for_selector("#problems tr[data-problem='add-2']")
    wait_until(page, "document.querySelector('#problems tr[data-problem=\"HumanEval/0\"] td:nth-child(3)')"
                     ".textContent === '100%'", 10)
    assert page.evaluate(order) == ["HumanEval/0", "add-1", "add-2"]
    assert page.evaluate("Array.from(document.querySelectorAll('#problems tr[data-problem]')).slice(0, 2)"
                         ".every(r => r.kept)")  # the same row elements, updated in place
    assert page.get_attribute("#problems tr[data-problem='add-2']", "class").split() == ["clickable", "new-row"]
    assert page.inner_text("#problems-sort") == "sort now (1 new)"

    page.click("#problems-sort")
    assert page.evaluate(order) == ["add-2", "add-1", "HumanEval/0"]  # 0%, 67%, 100%
    assert page.locator("#problems tr.new-row").count() == 0 and not page.is_visible("#problems-sort")
