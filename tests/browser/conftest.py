"""Playwright in Debian's Chromium (never `playwright install`: machines are offline)."""
import os
import time
from pathlib import Path

import pytest

from tests.factories import full_run_events, ingest, make_run, problem_event

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]
OUTPUT_DIR = Path(__file__).resolve().parents[2] / "test-results"


def pytest_collection_modifyitems(items):
    # The hook sees the whole session's items: mark only the tests of this folder.
    here = Path(__file__).resolve().parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.browser)


@pytest.fixture(scope="session")
def demo_tiny_model(installed_demo_models):
    """The CPU demo preset's model (settings.MODELS_DIR/tiny, as `make run` builds it)."""
    return installed_demo_models["tiny"]


@pytest.fixture(scope="session")
def browser():
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"{CHROMIUM} is missing (make test installs Debian's chromium when run as root with apt-get)")
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an event loop on this thread; the ORM calls that fixtures make
    # between browser steps are still plain synchronous code.
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        yield browser
        browser.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, accept_downloads=True)
    page = context.new_page()
    page.set_default_timeout(20_000)
    yield page
    context.close()


@pytest.fixture
def output_dir():
    OUTPUT_DIR.mkdir(exist_ok=True)
    return OUTPUT_DIR


def login(page, base_url, username, password):
    page.goto(f"{base_url}/")
    assert "/login/" in page.url
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base_url}/")


@pytest.fixture
def background_imports(service_env):
    """The web server started after this fixture imports every upload on the sandbox queue."""
    service_env["CRUCIBLE_UPLOAD_INLINE_MB"] = "0"
    yield
    del service_env["CRUCIBLE_UPLOAD_INLINE_MB"]


def wait_until(page, expression: str, timeout_s: float) -> None:
    """page.wait_for_function without its eval: the page's CSP (script-src 'self') refuses that, while
    page.evaluate goes through the DevTools protocol."""
    deadline = time.monotonic() + timeout_s
    while not page.evaluate(expression):
        assert time.monotonic() < deadline, f"still false after {timeout_s} s: {expression}"
        page.wait_for_timeout(200)


@pytest.fixture
def finished(user, settings, tmp_path):
    """A finished three-step run (``full_run_events``) whose candidates carry every reward dimension and
    whose evaluations carry the held-out problem's pass@1 and samples, stored as the supervisor stores them."""
    settings.RUNS_DIR = tmp_path / "runs"
    run = make_run(user, "finished run")
    events = full_run_events(run.path, steps=3)
    for e in events:
        for c in e.get("candidates", []):  # every reward dimension, as the trainer reports them
            passed = c["result"]["status"] == "passed"
            c["rewards"] |= {"efficiency": 0.9 if passed else 0.0, "conciseness": 1.0, "format": 1.0}
    for e in events:  # the held-out problem's own pass@1 and samples at each evaluation, as the trainer reports them
        if e["event"] == "eval":
            before = e["step"] == 0
            e["per_problem"] = {"add-3": {"n": 4, "c": 1 if before else 3, "pass@1": 0.25 if before else 0.75,
                                          "candidates": heldout_samples(("passed", "failed", "timeout", "error")
                                                                        if before else ("passed",) * 3 + ("failed",))}}
    ingest(run, events)
    return run


def heldout_samples(statuses):
    """add-3's samples at one evaluation, in the shape of a step's candidates."""
    samples = problem_event(0, "add-3", statuses)["candidates"]
    for sample in samples:
        sample["code"] = "def add3(a, b):\n    return a + b\n" if sample["result"]["status"] == "passed" \
            else "def add3(a, b):\n    return a - b\n"
    return samples
