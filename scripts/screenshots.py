"""The README's screenshots, taken from real runs of a running Crucible.

With the app up (``make run`` in another terminal)::

    .venv/bin/python scripts/screenshots.py                      # http://127.0.0.1:8000, user admin
    .venv/bin/python scripts/screenshots.py --runs 12,13         # retake them from two finished runs

logs in (the admin's password from ``$CRUCIBLE_DATA_DIR/admin-password.txt``, which ``make run``
writes, or ``CRUCIBLE_PASSWORD``), launches two CPU demo runs of the preset's length on the demo problem set through the
new-run form (the preset's learning rate and a quarter of it, so compare has something to show),
waits for both to finish (one gpu worker runs them one after the other: about six minutes each on two cores),
then saves 1280×800 PNGs of the run page, the candidate inspector and compare into docs/screenshots/.

Browser: Debian's Chromium through Playwright, as the browser tests use it. Chromium already encodes
its screenshots for size; ``optipng`` or ``oxipng``, when installed, squeezes them further (lossless).
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]
VIEWPORT = {"width": 1280, "height": 800}
DEMO_SET = "Demo problems"  # what `make run` loads (manage.py load_demo)
PRESET_STEPS = 200  # the cpu-demo preset's train.steps (webapp/runs/presets.py)
sys.path.insert(0, str(ROOT))
from training.events import DONE_STATUSES as FINISHED  # noqa: E402 (the trainer owns the final statuses)


def admin_password(data_dir: Path) -> str | None:
    """The password `make run` generated for the local admin (``username: ...`` / ``password: ...``)."""
    try:
        text = (data_dir / "admin-password.txt").read_text()
    except OSError:
        return None
    match = re.search(r"^password:\s*(\S+)", text, re.M)
    return match.group(1) if match else None


def wait_until(page, expression: str, timeout_s: float, what: str) -> None:
    """Poll a page expression through DevTools (the pages' CSP refuses wait_for_function's eval)."""
    deadline = time.monotonic() + timeout_s
    while not page.evaluate(expression):
        if time.monotonic() > deadline:
            raise SystemExit(f"screenshots: {what} did not happen within {timeout_s:.0f} s ({page.url})")
        page.wait_for_timeout(200)


def log_in(page, url: str, username: str, password: str) -> None:
    page.goto(f"{url}/")
    if "/login/" not in page.url:
        return
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")
    page.wait_for_load_state()
    if "/login/" in page.url:
        raise SystemExit(f"screenshots: logging in as {username} failed")


def problem_set_id(page, url: str, name: str) -> int:
    sets = page.request.get(f"{url}/api/problem-sets").json()
    match = next((s for s in sets if s["name"] == name), None)
    if match is None:
        raise SystemExit(f"screenshots: no problem set named {name!r}; the sets are {[s['name'] for s in sets]}")
    return match["id"]


def launch(page, url: str, set_id: int, name: str, fields: dict[str, str]) -> int:
    """Launch a run through the new-run form (the CPU demo preset, then ``fields``); its id."""
    page.goto(f"{url}/runs/new?preset=cpu-demo&problem_set={set_id}")
    page.fill("input[name=name]", name)
    for field, value in fields.items():
        page.fill(f"[name='{field}']", value)
    for _ in range(2):  # the second press is "Launch anyway", past the set's warnings
        page.click("#launch")
        page.wait_for_load_state()
        found = re.search(r"/runs/(\d+)/$", page.url)
        if found:
            return int(found.group(1))
        if not page.locator("#launch-warnings").count():
            break
    errors = page.locator(".errorlist, #form-errors").all_inner_texts()
    raise SystemExit(f"screenshots: the run {name!r} was not launched: {'; '.join(errors) or page.url}")


def wait_for_runs(page, url: str, run_ids: list[int], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    shown = None
    while True:
        runs = [page.request.get(f"{url}/api/runs/{run_id}").json() for run_id in run_ids]
        progress = ", ".join(f"#{r['id']} {r['status']} {r['step'] or 0}/{r['steps']}" for r in runs)
        if progress != shown:
            print(f"screenshots: {progress}", flush=True)
            shown = progress
        if all(r["status"] in FINISHED for r in runs):
            break
        if time.monotonic() > deadline:
            raise SystemExit(f"screenshots: the runs did not finish within {timeout_s:.0f} s ({progress})")
        time.sleep(2)
    failed = [r for r in runs if r["status"] != "succeeded"]  # a run that did not succeed has no pictures
    if failed:
        raise SystemExit(f"screenshots: run #{failed[0]['id']} {failed[0]['status']}: {failed[0]['error']}")


def shoot(page, url: str, run_ids: list[int], out: Path) -> list[Path]:
    first = run_ids[0]
    page.goto(f"{url}/runs/{first}/")
    page.evaluate("localStorage.removeItem('crucible.charts')")  # the charts as a first visit shows them
    page.reload()
    wait_until(page, "document.getElementById('chart-reward').data !== undefined", 30, "the run page's charts")
    # The curves (the headline, runtime, config and health cards sit above them).
    page.evaluate("document.getElementById('charts-main').closest('section').scrollIntoView({block: 'start'})")
    page.wait_for_timeout(500)  # plotly's last layout pass
    run_page = out / "run-page.png"
    page.screenshot(path=str(run_page))

    # The candidate inspector: the worst train problem (the table's first row) and its failing candidates.
    page.locator("#problems tr[data-problem]").first.click()
    wait_until(page, "document.getElementById('candidates').dataset.problem !== undefined", 30, "the candidates")
    page.evaluate("(() => { const d = document.querySelector('#candidates details.candidate'); if (d) d.open = true; })()")
    page.evaluate("document.querySelector('.candidates-card').scrollIntoView({block: 'start'})")
    candidates = out / "candidate-inspector.png"
    page.screenshot(path=str(candidates))

    page.goto(f"{url}/runs/compare?ids={','.join(map(str, run_ids))}")
    wait_until(page, "document.getElementById('compare-main').data !== undefined", 30, "the compare charts")
    page.wait_for_timeout(500)
    compare = out / "compare.png"
    page.screenshot(path=str(compare))
    return [run_page, candidates, compare]


def optimize(paths: list[Path]) -> None:
    """Lossless recompression when a PNG optimiser is installed; Chromium's own encoding otherwise."""
    for tool, args in (("oxipng", ["-o", "4", "--strip", "safe"]), ("optipng", ["-quiet", "-o2", "-strip", "all"])):
        if shutil.which(tool):
            subprocess.run([tool, *args, *map(str, paths)], check=True)
            return


def main(argv: list[str] | None = None) -> int:
    data_dir = Path(os.environ.get("CRUCIBLE_DATA_DIR") or "var").expanduser()
    data_dir = data_dir if data_dir.is_absolute() else ROOT / data_dir  # as webapp.env.data_dir reads it
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", default="http://127.0.0.1:8000", help="the running app (default: %(default)s)")
    ap.add_argument("--username", default="admin")
    ap.add_argument("--password", default=os.environ.get("CRUCIBLE_PASSWORD"),
                    help="default: CRUCIBLE_PASSWORD, else the admin's password that make run saved in "
                         "$CRUCIBLE_DATA_DIR/admin-password.txt")
    ap.add_argument("--problem-set", default=DEMO_SET, help="the set to train on (default: %(default)s)")
    ap.add_argument("--steps", type=int, default=PRESET_STEPS,
                    help="steps of each demo run (default: %(default)s, the preset as it ships, cadence included)")
    ap.add_argument("--runs", help="two or more run ids (comma-separated) to photograph instead of launching "
                                   "new ones")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds to wait for the runs (default: %(default)s)")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    args = ap.parse_args(argv)
    password = args.password or admin_password(data_dir)
    if not password:
        ap.error(f"no password: give --password or CRUCIBLE_PASSWORD (no {data_dir / 'admin-password.txt'})")
    if not os.path.exists(CHROMIUM):
        ap.error(f"{CHROMIUM} is missing (make test installs Debian's chromium)")
    url = args.url.rstrip("/")
    args.out.mkdir(parents=True, exist_ok=True)

    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_context(viewport=VIEWPORT, device_scale_factor=1).new_page()
            page.set_default_timeout(30_000)
            log_in(page, url, args.username, password)
            if args.runs:  # photographed as they are
                run_ids = [int(x) for x in args.runs.split(",")]
            else:
                set_id = problem_set_id(page, url, args.problem_set)
                # The preset as it ships; a shorter --steps gets evaluations at a quarter, half, three quarters
                # and the end, and a checkpoint halfway.
                cadence = {} if args.steps == PRESET_STEPS else {
                    "train.steps": str(args.steps), "train.eval_every": str(max(1, args.steps // 4)),
                    "train.checkpoint_every": str(max(1, args.steps // 2))}
                run_ids = [launch(page, url, set_id, "demo", cadence),
                           launch(page, url, set_id, "demo, lr / 4", cadence | {"ppo.learning_rate": "0.0005"})]
                wait_for_runs(page, url, run_ids, args.timeout)
            paths = shoot(page, url, run_ids, args.out)
        finally:
            browser.close()
    optimize(paths)
    for path in paths:
        print(f"screenshots: {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path} "
              f"({path.stat().st_size // 1024} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
