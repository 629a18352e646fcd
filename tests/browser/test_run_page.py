"""The run page of a finished run in a browser: its config, per-problem table and charts."""
import pytest

from tests.webapp.runs.conftest import TINY_OVERRIDES, full_run_events, make_problem_set, write_events

from .conftest import login


@pytest.fixture
def finished(user, settings, tmp_path):
    from webapp.runs.services import create_run
    from webapp.runs.supervisor import EventFollower, ingest_new_events

    settings.RUNS_DIR = tmp_path / "runs"
    run = create_run(user, "finished run", make_problem_set(user), TINY_OVERRIDES)
    run.claim(host="h", pid=1)
    events = full_run_events(run.path, steps=3)
    for e in events:
        for c in e.get("candidates", []):  # every reward dimension, as the trainer reports them
            passed = c["result"]["status"] == "passed"
            c["rewards"] |= {"efficiency": 0.9 if passed else 0.0, "conciseness": 1.0, "format": 1.0}
    for e in events:  # the held-out problem's own pass@1 at each evaluation, as the trainer reports it
        if e["event"] == "eval":
            e["per_problem"] = {"add-3": {"n": 4, "c": 1 if e["step"] == 0 else 3, "pass@1": 0.25 if e["step"] == 0 else 0.75}}
    write_events(run.path / "events.jsonl", events)
    follower = EventFollower(run.path / "events.jsonl")
    ingest_new_events(run, follower)
    follower.close()
    return run


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
    row = page.locator("#problems tr[data-problem='add-3']")
    assert row.locator("td").nth(1).inner_text() == "heldout"
    assert row.locator("td").nth(3).inner_text() == "25% → 75%"
    row.click()
    page.wait_for_selector("#heldout-evaluations")
    assert "step 0: 25% → step 3: 75%" in page.locator("#heldout-evaluations").inner_text()
    page.locator("div.grid.two", has=page.locator("#problems-table")).screenshot(path=str(output_dir / "run-problems-heldout.png"))


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
