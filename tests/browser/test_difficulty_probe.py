"""A user estimates a problem set's difficulty in the browser: the page follows the probe on a real
worker (the tiny model) and then shows the histogram, the never/always-solved lists and the table's
pass-rate column."""
import io
import json

from .conftest import login

PROBLEMS = [
    {"id": "add", "kind": "function", "prompt": "def add(a, b):\n", "entry_point": "add",
     "tests": ["assert add(1, 2) == 3"], "reference_solution": "def add(a, b):\n    return a + b\n", "split": "train"},
    # no program passes this one: it is never solved, whatever the model writes
    {"id": "impossible", "kind": "function", "prompt": "def f():\n", "entry_point": "f", "tests": ["assert False"],
     "split": "train"},
    {"id": "neg", "kind": "function", "prompt": "def neg(a):\n", "entry_point": "neg", "tests": ["assert neg(2) == -2"],
     "reference_solution": "def neg(a):\n    return -a\n", "split": "heldout"},
] + [  # enough problems for the page to count several chunks as they finish (training.probe.PROGRESS_CHUNKS)
    {"id": f"add{n}", "kind": "function", "prompt": f"def add{n}(a):\n", "entry_point": f"add{n}",
     "tests": [f"assert add{n}(1) == {n + 1}"], "reference_solution": f"def add{n}(a):\n    return a + {n}\n",
     "split": "train"} for n in range(1, 6)
]


def test_a_user_estimates_a_sets_difficulty_and_sees_the_pass_rates(page, live_server_url, celery_worker, user,
                                                                  demo_tiny_model, output_dir):
    from webapp.problems.services import create_problem_set

    ps, errors = create_problem_set(user, "Probe me", io.BytesIO("".join(json.dumps(p) + "\n" for p in PROBLEMS)
                                                                  .encode()), validate=False)
    assert ps is not None and not errors
    login(page, live_server_url, "alice", "alice-password-1")
    page.goto(f"{live_server_url}/problem-sets/{ps.pk}/")
    assert "No probe yet" in page.locator("#probe").inner_text()
    page.select_option("#probe-form select[name=model]", "models/tiny")
    page.fill("#probe-form input[name=samples]", "2")
    page.click("#probe-form button[type=submit]")
    page.wait_for_url(f"**/problem-sets/{ps.pk}/#probe")
    # Every text the live line shows, kept across the reload at the end (console messages outlive it).
    shown = []
    page.on("console", lambda m: shown.append(m.text) if m.text.startswith("probe:") else None)
    page.evaluate("""() => {
        const log = () => console.log("probe:" + document.getElementById("probe-what").textContent.trim() + "|" +
                                      document.getElementById("probe-summary").textContent.trim());
        new MutationObserver(log).observe(document.getElementById("probe"), {subtree: true, childList: true,
                                                                              characterData: true});
        log();
    }""")

    # The page follows the job (websocket / polling) and reloads itself when it is done.
    page.wait_for_selector("#probe-result", timeout=180_000)
    counts = {line.split("|")[1] for line in shown}
    assert any(f" of {len(PROBLEMS)} problems probed…" in c and not c.startswith(("0 ", f"{len(PROBLEMS)} "))
               for c in counts), shown  # counted as problems finish, not only at the start and the end
    assert {line.split("|")[0] for line in shown} == {"probe:models/tiny, 2 samples per problem:"}
    card = page.locator("#probe").inner_text()
    assert "models/tiny" in card and "2 samples per problem" in card
    assert "impossible" in page.locator("#probe-unsolved").inner_text()
    page.wait_for_selector("#probe-histogram .main-svg")  # plotly drew the histogram
    bars = page.evaluate("(() => { const gd = document.getElementById('probe-histogram');"
                         " return [Array.from(gd.data[0].x), Array.from(gd.data[0].y), gd.layout.xaxis.type]; })()")
    assert bars[0] == ["0/2", "1/2", "2/2"] and sum(bars[1]) == len(PROBLEMS) and bars[2] == "category"
    assert page.input_value("#probe-form input[name=samples]") == "2"  # the form keeps the sample count
    rates = page.locator("#problems td.probe-rate").all_inner_texts()
    assert len(rates) == len(PROBLEMS) and rates[1] == "0.00"
    assert all(r in ("0.00", "0.50", "1.00") for r in rates)
    assert page.locator("#problems th", has_text="Pass rate").count() == 1
    page.screenshot(path=str(output_dir / "problem-set-difficulty.png"), full_page=True)
