"""Issue #30 item 2 in a browser: a run's divergence warning appears live on its page, stays after a reload
and comes with the done event; the new-run form refuses turns > 1 without chat prompts as soon as either
field changes, in the server's words."""
from training import events as run_events
from training.config import ConfigError, config_from_dict

from tests.factories import ingest, install_model_stub, line, make_problem_set, make_run, problem_lines, step_event

from .conftest import login, wait_until

FLAT = ("reward flat at 0.200 (within 0) with no candidate passing every test for 10 steps (steps 1–10, "
        "monitor.flat_reward_steps 10): the groups carry no signal and the run learns nothing.")
KL = "KL to the reference model at step 8 is 90 nats/token, past monitor.kl_max 10."


def test_a_divergence_warning_shows_live_after_a_reload_and_with_done(page, live_server_url, user, settings,
                                                                      tmp_path, output_dir):
    settings.RUNS_DIR, settings.MODELS_DIR = tmp_path / "runs", tmp_path / "models"
    install_model_stub(settings.MODELS_DIR / "tiny")
    run = make_run(user, "repair run")
    run.claim(host="h", pid=1)
    ingest(run, [step_event(s, reward=0.2) for s in range(1, 8)])
    login(page, live_server_url, "alice", "alice-password-1")
    page.goto(f"{live_server_url}/runs/{run.pk}/")
    wait_until(page, "document.body.dataset.live === '1'", 10)
    assert page.locator("#run-warnings").is_hidden()

    ingest(run, [step_event(8, reward=0.2), line(run_events.warning_event("monitor.kl_max", KL, 8, condition="kl"))],
           thread=True)
    page.wait_for_selector("#run-warnings li[data-condition='kl']")
    assert page.locator("#run-warnings").is_visible()
    assert page.inner_text("#run-warnings li[data-condition='kl']") == "⚠ step 8: " + KL

    page.reload()
    wait_until(page, "document.body.dataset.live === '1'", 10)
    assert page.locator("#run-warnings li").count() == 1  # rendered by the server, not replayed a second time
    assert page.inner_text("#run-warnings li") == "⚠ step 8: " + KL

    # The done event lists every warning of the run: one the page missed arrives with it, none twice.
    flat = run_events.warning_summary(run_events.warning_event("monitor.flat_reward_steps", FLAT, 10,
                                                                condition="flat_reward"))
    kl = run_events.warning_summary(run_events.warning_event("monitor.kl_max", KL, 8, condition="kl"))
    ingest(run, [step_event(9, reward=0.2), line(run_events.done_event("succeeded", warnings=[kl, flat]))],
           thread=True)
    page.wait_for_selector("#run-warnings li[data-condition='flat_reward']")
    wait_until(page, "document.getElementById('run-status').textContent === 'succeeded'", 10)
    assert page.evaluate("Array.from(document.querySelectorAll('#run-warnings li')).map(li => li.dataset.condition)") \
        == ["kl", "flat_reward"]
    page.locator("#run-warnings").screenshot(path=str(output_dir / "run-divergence-warning.png"))


def server_refusal(turns: int, prompt_style: str) -> str:
    try:
        config_from_dict({"sampling": {"turns": turns, "prompt_style": prompt_style}})
    except ConfigError as e:
        assert e.field == "sampling.turns"
        return e.message
    raise AssertionError("the config took turns > 1 with completion prompts")


def test_turns_against_the_prompt_style_is_checked_as_either_changes(page, live_server_url, user, output_dir):
    ps = make_problem_set(user, "with held-out", problem_lines(8, 2))
    login(page, live_server_url, "alice", "alice-password-1")
    page.goto(f"{live_server_url}/runs/new?problem_set={ps.pk}")
    page.evaluate("window.__sameDocument = true")
    turns_errors = page.locator("[data-field='sampling.turns'] .errorlist")
    assert page.input_value("select[name='sampling.prompt_style']") == "completion"
    assert turns_errors.count() == 0 and page.locator("#turns-issue").is_hidden()

    page.fill("input[name='sampling.turns']", "2")  # typing is enough: no Launch, no blur
    assert turns_errors.inner_text() == server_refusal(2, "completion")
    assert page.locator("#turns-issue").is_visible()
    assert page.inner_text("#turns-issue") == "⚠ sampling.turns 2 needs prompt_style chat"
    page.screenshot(path=str(output_dir / "new-run-turns-check.png"))

    page.select_option("select[name='sampling.prompt_style']", "chat")  # the other field fixes it
    assert turns_errors.count() == 0 and page.locator("#turns-issue").is_hidden()
    assert "has-error" not in page.get_attribute("[data-field='sampling.turns']", "class")

    page.select_option("select[name='sampling.prompt_style']", "completion")  # and breaks it again
    assert turns_errors.inner_text() == server_refusal(2, "completion")
    page.click("#launch")
    assert page.evaluate("window.__sameDocument === true")  # refused here, nothing was sent
    assert page.evaluate("document.activeElement.name") == "sampling.turns"

    page.fill("input[name='sampling.turns']", "1")
    assert turns_errors.count() == 0 and page.locator("#turns-issue").is_hidden()
