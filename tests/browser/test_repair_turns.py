"""A multi-turn repair run's page in a browser: a two-turn candidate opens as its turns one under the
other (code, what the model was told, the next code and its diff), and the turn metrics are drawn."""
import pytest

from tests.factories import (FEEDBACK, TINY_OVERRIDES, discounted_repair_run, eval_event, ingest, make_problem_set,
                             repair_event, step_event)

from .conftest import login, wait_until


@pytest.fixture
def repair_run(user, settings, tmp_path):
    from webapp.runs.services import create_run

    settings.RUNS_DIR = tmp_path / "runs"
    config = {**TINY_OVERRIDES, "sampling": {**TINY_OVERRIDES["sampling"], "prompt_style": "chat", "turns": 2}}
    run = create_run(user, "repair run", make_problem_set(user), config)
    run.claim(host="h", pid=1)
    events = []
    for s in (1, 2):
        step = step_event(s)
        step["metrics"].update({"pass@1/turn1": 0.5, "pass@1/final": 1.0, "repair/rate": 1.0, "turns/mean": 1.5,
                                "reward/turn1": 0.65, "reward/turn2": 1.0})
        events += [step, repair_event(s)]
    evaluation = eval_event(2, 0.75)
    evaluation["pass@1/turn1"] = 0.5
    events.append(evaluation)
    ingest(run, events)
    return run


def test_a_two_turn_candidate_shows_both_turns_and_the_feedback_between_them(page, live_server_url, repair_run,
                                                                            output_dir):
    login(page, live_server_url, "alice", "alice-password-1")
    page.goto(f"{live_server_url}/runs/{repair_run.pk}/")
    row = page.locator("#problems tr[data-problem='HumanEval/0']")
    assert "(turn 1: 50%)" in row.locator("td").nth(2).inner_text()
    row.click()
    page.locator("#candidates a[data-status='']").click()  # every candidate (both passed by the end)
    wait_until(page, "document.querySelectorAll('#candidates details.candidate').length === 4", 10)  # 2 steps x 2
    candidate = page.locator("#candidates details.candidate").first
    assert candidate.get_attribute("open") is not None
    assert "2 turns" in candidate.locator(":scope > summary").inner_text()
    turns = candidate.locator(".trajectory section.turn")
    assert turns.count() == 2
    first, second = turns.nth(0), turns.nth(1)
    assert "Turn 1" in first.locator("h4").inner_text() and "wrong answer" in first.locator("h4").inner_text()
    assert "return a - b" in first.inner_text()
    told = first.locator("pre.feedback")
    assert told.is_visible() and told.inner_text() == FEEDBACK
    assert "Turn 2" in second.locator("h4").inner_text() and "passed" in second.locator("h4").inner_text()
    assert "return a + b" in second.locator(".codehilite, pre").last.inner_text()
    assert second.locator(".diff-add").inner_text() == "+    return a + b"
    assert second.locator(".diff-del").inner_text() == "-    return a - b"
    # Turn 2 sits under turn 1, the feedback between them.
    y = [el.bounding_box()["y"] for el in (first.locator("h4"), told, second.locator("h4"))]
    assert y == sorted(y)
    candidate.screenshot(path=str(output_dir / "repair-trajectory.png"))

    wait_until(page, "document.getElementById('chart-repair').dataset.points === '2'", 10)
    # plainName: a series' own name, without the legend's "(under …)" where it lies under another
    names = page.evaluate("document.getElementById('chart-repair').data.map(t => t.plainName || t.name)")
    assert {"train: pass at turn 1", "train: pass by the last turn", "repaired (of those failing turn 1)",
            "held-out pass@1 at turn 1"} <= set(names)
    reward_names = page.evaluate("document.getElementById('chart-reward').data.map(t => t.plainName || t.name)")
    assert not any("turn" in n for n in reward_names)


def test_the_what_if_panel_shows_each_turns_reward_and_advantage_of_a_discounted_run(page, live_server_url, user,
                                                                                     settings, tmp_path):
    settings.RUNS_DIR = tmp_path / "runs"
    run = discounted_repair_run(user, make_problem_set(user))
    login(page, live_server_url, "alice", "alice-password-1")
    page.goto(f"{live_server_url}/runs/{run.pk}/")
    page.locator("#whatif").scroll_into_view_if_needed()
    page.fill("#whatif-form input[name=pass_rate]", "1")
    page.fill("#whatif-form input[name=syntax]", "0")
    page.click("#whatif-run")
    page.wait_for_selector("#whatif-problems tr")
    page.locator("#whatif-problems tr").first.click()
    page.wait_for_selector("#whatif-problem:not([hidden])")
    row = page.locator("#whatif-candidates tr").first
    reward, advantage = row.locator("td").nth(3), row.locator("td").nth(4)
    assert reward.locator(".whatif-turn").all_inner_texts() == ["turn 1: 0.500 → 0.000", "turn 2: 1.000 → 1.000"]
    assert advantage.locator(".whatif-turn").all_inner_texts() == ["turn 1: 0.083 → -0.167", "turn 2: 0.083 → 0.333"]
    assert advantage.locator(".whatif-turn.whatif-flip").count() == 1  # turn 1's advantage changes sign
    assert "discounted credit" in page.inner_text("#whatif-problem")
