"""The new-run form in a browser: the sticky launch bar, what changed from the preset, bounds checked here."""
from tests.factories import make_problem_set, problem_lines

from .conftest import login
from .test_run_flow import wait_until


def open_form(page, live_server_url, problem_set) -> None:
    """alice, logged in, on the new-run form with ``problem_set`` chosen."""
    login(page, live_server_url, "alice", "alice-password-1")
    page.goto(f"{live_server_url}/runs/new?problem_set={problem_set.pk}")


def test_the_launch_bar_stays_in_view_and_lists_changes_from_the_preset(page, live_server_url, user, output_dir):
    ps = make_problem_set(user, "with held-out", problem_lines(8, 2))
    open_form(page, live_server_url, ps)
    assert page.locator("#launch").is_visible()  # at the top of a long form, no scrolling
    box = page.locator("#launch-bar").bounding_box()
    assert box["y"] + box["height"] <= 1000 + 1
    assert "unchanged" in page.locator("#preset-changes").inner_text()
    page.fill("input[name='ppo.kl_coef']", "0.05")
    page.locator("input[name='ppo.kl_coef']").dispatch_event("change")
    assert "ppo.kl_coef 0.01 → 0.05" in page.locator("#preset-changes").inner_text()
    page.screenshot(path=str(output_dir / "new-run-form.png"))


def test_out_of_range_numbers_are_refused_before_the_form_is_sent(page, live_server_url, user):
    ps = make_problem_set(user, "with held-out", problem_lines(8, 2))
    open_form(page, live_server_url, ps)
    page.evaluate("window.__sameDocument = true")
    page.fill("input[name='sampling.candidates_per_problem']", "1")
    page.fill("input[name='ppo.clip_range']", "0")
    page.click("#launch")
    assert page.evaluate("window.__sameDocument === true")  # nothing was sent
    errors = page.locator("[data-field='sampling.candidates_per_problem'] .errorlist")
    assert "must be >= 2 and <= 256; got 1: a group of one candidate has no baseline" in errors.inner_text()
    assert "must be > 0.0 and < 1.0; got 0" in page.locator("[data-field='ppo.clip_range'] .errorlist").inner_text()


def test_a_set_without_held_out_problems_is_questioned_before_launch(page, live_server_url, user, output_dir,
                                                                     demo_tiny_model):
    ps = make_problem_set(user, "scratch upload", problem_lines(4, 0))
    open_form(page, live_server_url, ps)
    page.click("#launch")
    page.wait_for_selector("#launch-warnings")
    assert "no held-out problems" in page.locator("#launch-warnings").inner_text()
    page.screenshot(path=str(output_dir / "new-run-warnings.png"))
    page.click("#launch")  # "Launch anyway"
    page.wait_for_url("**/runs/*/")
    assert "has no held-out problems" in page.locator("#headline").inner_text()


def test_the_launch_bar_names_what_the_chosen_set_lacks_before_launch(page, live_server_url, user, output_dir):
    good = make_problem_set(user, "with held-out", problem_lines(8, 2))
    scratch = make_problem_set(user, "scratch upload", problem_lines(4, 0))
    open_form(page, live_server_url, good)
    assert page.locator("#set-issues").is_hidden()
    page.select_option("select[name=problem_set]", str(scratch.pk))
    issues = page.locator("#set-issues")
    assert issues.is_visible() and "no held-out problems" in issues.inner_text()
    assert "only 4 train problems for problems_per_step 8" in issues.inner_text()
    page.fill("input[name='sampling.problems_per_step']", "4")  # a value the page asks the server about
    wait_until(page, "!document.getElementById('set-issues').textContent.includes('problems_per_step')", 10)
    assert "problems_per_step" not in issues.inner_text()
    page.screenshot(path=str(output_dir / "new-run-set-issues.png"))


def test_a_preset_moves_off_a_set_it_cannot_use_to_the_newest_set_it_can(page, live_server_url, user, output_dir):
    big = make_problem_set(user, "big set", problem_lines(32, 4))
    small = make_problem_set(user, "small set", problem_lines(8, 2))
    scratch = make_problem_set(user, "scratch upload", problem_lines(4, 0))
    open_form(page, live_server_url, scratch)
    chosen, note = page.locator("select[name=problem_set]"), page.locator("#set-switched")
    assert note.is_hidden()

    page.click(".preset[data-preset='cpu-demo']")  # 8 problems a step: the small set is the newest that fits
    assert chosen.input_value() == str(small.pk) and page.locator("#set-issues").is_hidden()
    assert note.inner_text() == ("Problem set changed to “small set” for CPU demo — tiny model: “scratch upload” "
                                 "has no held-out problems; only 4 train problems for problems_per_step 8.")
    page.screenshot(path=str(output_dir / "new-run-preset-set.png"))

    page.click(".preset[data-preset='qwen3.5-9b-lora-80gb']")  # 32 a step
    assert chosen.input_value() == str(big.pk)
    assert "“small set” has only 8 train problems for problems_per_step 32" in note.inner_text()
    page.click(".preset[data-preset='cpu-demo']")
    assert chosen.input_value() == str(big.pk)  # a set the preset can use stays chosen

    page.select_option("select[name=problem_set]", str(scratch.pk))
    assert note.is_hidden()  # the user's own pick
    page.fill("input[name='sampling.problems_per_step']", "64")
    page.click(".preset[data-preset='qwen3.5-9b-lora-80gb']")
    assert chosen.input_value() == str(big.pk)  # the preset's 32, not the 64 typed before it


IN_VIEW = "el => { const r = el.getBoundingClientRect(); return r.top >= 0 && r.bottom <= innerHeight; }"


def test_the_error_banner_names_the_bad_field_and_its_link_brings_it_into_view(page, live_server_url, user,
                                                                               output_dir):
    ps = make_problem_set(user, "with held-out", problem_lines(8, 2))
    open_form(page, live_server_url, ps)
    page.fill("input[name='sampling.stop']", '["\\n\\n"')  # only the server reads this one: far down the page
    page.click("#launch")
    page.wait_for_selector("#form-errors")
    link = page.locator("#form-errors a.field-link")
    assert link.count() == 1 and link.inner_text() == "Sampling: stop"
    field = page.locator("input[name='sampling.stop']")
    assert not field.evaluate(IN_VIEW)
    link.click()
    wait_until(page, "document.activeElement && document.activeElement.name === 'sampling.stop'", 5)
    assert field.evaluate(IN_VIEW)
    assert "not a JSON list of strings" in page.locator("[data-field='sampling.stop'] .errorlist").inner_text()
    page.screenshot(path=str(output_dir / "new-run-error-banner.png"))


def test_choosing_an_engine_that_is_not_installed_is_named_in_the_launch_bar(page, live_server_url, user):
    ps = make_problem_set(user, "with held-out", problem_lines(8, 2))
    open_form(page, live_server_url, ps)
    engine, issue = page.locator("select[name='sampling.engine']"), page.locator("#engine-issue")
    # Whether vLLM is installed depends on this machine: the server's marking is tested in
    # tests/webapp/runs/test_engine.py; here the page is told, as the server tells it where it is missing.
    engine.evaluate("el => { el.dataset.unavailable = 'vllm'; }")
    assert issue.is_hidden()
    page.click(".preset[data-preset='qwen3.5-9b-lora-80gb']")  # a preset that samples with vLLM
    assert issue.is_visible() and issue.inner_text() == "⚠ engine vllm is not installed here"
    issue.click()
    wait_until(page, "document.activeElement && document.activeElement.name === 'sampling.engine'", 5)
    assert engine.evaluate(IN_VIEW)
    engine.select_option("hf")
    assert issue.is_hidden()
