"""The run page's what-if re-scoring panel in a browser: re-score, open a problem side by side, start a run."""
import pytest

from tests.factories import (TINY_OVERRIDES, ingest, install_model_stub, make_problem_set, scored_problem_event,
                             step_event, trained)

from .conftest import login, wait_until


@pytest.fixture
def stored(user, settings, tmp_path):
    from webapp.runs.services import create_run

    settings.RUNS_DIR = tmp_path / "runs"
    settings.MODELS_DIR = tmp_path / "models"
    install_model_stub(settings.MODELS_DIR / "tiny")  # the run's model need not load: nothing trains here
    return trained(create_run(user, "stored run", make_problem_set(user), TINY_OVERRIDES), steps=12)


def test_other_weights_show_sign_flips_rank_changes_and_candidates_side_by_side(page, live_server_url, stored,
                                                                                 output_dir):
    login(page, live_server_url, "alice", "alice-password-1")
    page.goto(f"{live_server_url}/runs/{stored.pk}/")
    panel = page.locator("#whatif")
    panel.scroll_into_view_if_needed()
    for name, value in (("pass_rate", "0"), ("syntax", "0"), ("efficiency", "0"), ("format", "0"),
                        ("conciseness", "1")):
        page.fill(f"#whatif-form input[name={name}]", value)
    page.click("#whatif-run")
    page.wait_for_selector("#whatif-steps tr")
    assert page.locator("#whatif-steps tr").count() == 10  # the last 10 steps by default
    assert page.locator("#whatif-steps tr").first.get_attribute("data-step") == "3"
    assert "Steps 3–12 (asked: the newest 10 stored steps): 80 candidates in 20 groups" in \
        page.inner_text("#whatif-status")

    page.locator("#whatif-problems tr").first.click()
    page.wait_for_selector("#whatif-problem:not([hidden])")
    rows = page.locator("#whatif-candidates tr")
    assert rows.count() == 40  # 10 steps x 4 candidates of one problem
    assert " → " in rows.first.locator("td").nth(3).inner_text()  # reward before → after
    rows.first.locator("button.whatif-open").click()
    page.wait_for_selector("#whatif-candidates tr.whatif-code details.candidate[open]")
    panel.screenshot(path=str(output_dir / "run-whatif.png"))

    href = page.get_attribute("#whatif-start", "href")
    assert f"clone={stored.pk}" in href and "reward.weights.pass_rate=0" in href
    assert "reward.weights.conciseness=1" in href
    page.click("#whatif-start")
    page.wait_for_url(f"**/runs/new?clone={stored.pk}*")
    assert float(page.input_value("input[name='reward.weights.conciseness']")) == 1.0
    assert float(page.input_value("input[name='reward.weights.pass_rate']")) == 0.0
    assert "reward.weights.conciseness 0.05 → 1" in page.inner_text("#preset-changes")  # changed from the run


def test_a_bad_weight_says_which(page, live_server_url, stored):
    login(page, live_server_url, "alice", "alice-password-1")
    page.goto(f"{live_server_url}/runs/{stored.pk}/")
    for name in ("pass_rate", "syntax", "efficiency", "conciseness", "format"):
        page.fill(f"#whatif-form input[name={name}]", "0")
    page.click("#whatif-run")
    page.wait_for_selector("#whatif-status.error")
    assert "weights" in page.inner_text("#whatif-status") and "all zero" in page.inner_text("#whatif-status")


def test_the_range_follows_new_steps_live_and_the_answer_states_its_range(page, live_server_url, stored):
    import random

    login(page, live_server_url, "alice", "alice-password-1")
    page.goto(f"{live_server_url}/runs/{stored.pk}/")
    assert page.inner_text("#whatif-stored") == "candidates stored for steps 1–12"
    assert page.get_attribute("#whatif-form input[name=from]", "placeholder") == "3"
    wait_until(page, "document.body.dataset.live === '1'", 10)

    # The trainer goes on: steps 13-15 are stored and sent while the page is open.
    rng = random.Random(7)
    ingest(stored, [e for s in (13, 14, 15) for e in (step_event(s), scored_problem_event(s, "HumanEval/0", rng),
                                                       scored_problem_event(s, "add-1", rng))], thread=True)

    wait_until(page, "document.getElementById('whatif-stored').textContent.indexOf('1–15') >= 0", 15)
    assert page.get_attribute("#whatif-form input[name=from]", "placeholder") == "6"
    assert page.get_attribute("#whatif-form input[name=to]", "placeholder") == "15"
    page.click("#whatif-run")
    page.wait_for_selector("#whatif-steps tr[data-step='15']")
    assert page.inner_text("#whatif-status").startswith("Steps 6–15 (asked: the newest 10 stored steps): ")
    page.fill("#whatif-form input[name=from]", "14")
    page.fill("#whatif-form input[name=to]", "40")
    page.click("#whatif-run")
    wait_until(page, "document.getElementById('whatif-status').textContent.indexOf('Steps 14–15') === 0", 15)
    assert "(asked: steps 14–40)" in page.inner_text("#whatif-status")  # clamped to what is stored, and said so


def test_the_side_by_side_table_shows_each_candidates_values_as_rescore_computes_them(page, live_server_url, stored):
    """Every cell a person reads, not only that the table exists: the ranks once showed
    `undefined → undefined` because the API's schema stripped them."""
    from webapp.runs.rescore import rescore_run

    weights = {"pass_rate": 0, "syntax": 0, "efficiency": 0, "format": 0, "conciseness": 1}
    login(page, live_server_url, "alice", "alice-password-1")
    page.goto(f"{live_server_url}/runs/{stored.pk}/")
    for name, value in weights.items():
        page.fill(f"#whatif-form input[name={name}]", str(value))
    page.click("#whatif-run")
    page.wait_for_selector("#whatif-problems tr")
    page.locator("#whatif-problems tr").first.click()
    page.wait_for_selector("#whatif-problem:not([hidden])")

    want = rescore_run(stored, weights)["problems"][0]
    shown = page.evaluate("""Array.from(document.querySelectorAll('#whatif-candidates tr')).map(function (tr) {
      return Array.from(tr.children).slice(0, 6).map(function (td) { return td.firstChild ? td.firstChild.textContent : ''; });
    })""")
    assert len(shown) == len(want["candidates"])
    for cells, c in zip(shown, want["candidates"]):
        assert cells[:2] == [str(c["step"]), f"#{c['index']}"]
        assert cells[3] == f"{c['reward_before']:.3f} → {c['reward_after']:.3f}"
        assert cells[4] == f"{c['advantage_before']:.3f} → {c['advantage_after']:.3f}"
        assert cells[5] == f"{c['rank_before']:g} → {c['rank_after']:g}", cells
    assert not any("undefined" in cell or "NaN" in cell for cells in shown for cell in cells)
