"""What-if re-scoring: server time of ``POST /api/runs/{id}/rescore`` for 10 steps of the demo preset.

A run with the CPU demo preset's config (8 problems x 16 candidates per step) and 60 stored steps of
candidates (per-dimension rewards, results with flags, outcomes) is seeded; the API call is timed
around the Django view with the test client, weights changed and the range left to its default (the
last 10 steps: 1,280 candidates in 80 groups). Target: within a second.

Reported: the first call of a web process two ways, as a user meets it (the run page is opened, which
starts importing training's re-scoring, and torch, in the background: ``webapp.runs.rescore.warm_up``;
the call comes once that is done, and how long that took is reported) and straight after the process
started (in a child process: the call itself loads torch, which the web server does not load at start:
training's advantage estimators are tensor functions); then warm calls, split into the database read
and ``training.rescore`` itself.

Usage: ``python benchmarks/rescore_bench.py [--steps 60] [--repeats 20] [--no-write]``. Uses
DATABASE_URL when set (else SQLite under a private data dir unless CRUCIBLE_DATA_DIR is set).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.web_bench import setup_django  # noqa: E402
from training.rewards import DIMENSIONS as DIMS  # noqa: E402
WEIGHTS = {"pass_rate": 1.0, "syntax": 0.0, "efficiency": 0.3, "conciseness": 0.2, "format": 0.0}


def seed_demo_run(steps: int):
    """A finished run of the CPU demo preset with ``steps`` steps of stored candidates."""
    from django.contrib.auth import get_user_model

    from webapp.runs.models import Candidate, Run
    from webapp.runs.presets import get_preset
    from webapp.runs.config import default_config, merge_config

    user, _ = get_user_model().objects.get_or_create(username="rescore-bench")
    config = merge_config(default_config(), get_preset("cpu-demo")["config"])  # its model need not be installed
    per_step, k = config["sampling"]["problems_per_step"], config["sampling"]["candidates_per_problem"]
    weights = config["reward"]["weights"]
    run = Run.objects.create(owner=user, name="rescore bench", status="succeeded", step=steps, steps=steps,
                             config=config)
    rng = random.Random(0)
    problems = [f"problem-{i:03d}" for i in range(157)]  # the demo set's train split
    code = "def f(x):\n    return sorted(x)[::-1]\n" * 3
    rows = []
    for step in range(1, steps + 1):
        for pid in rng.sample(problems, per_step):
            for index in range(k):
                passed = rng.choice([0, 1, 2, 3, 4])
                rewards = {"pass_rate": passed / 4, "syntax": rng.choice([0.0, 1.0, 1.0, 1.0]),
                           "efficiency": 1.0 if passed == 4 else 0.0, "conciseness": round(rng.random(), 3),
                           "format": rng.choice([0.5, 1.0])}
                status = "passed" if passed == 4 else "failed"
                result = {"status": status, "tests_passed": passed, "tests_total": 4, "flags": [],
                          "tests": [{"name": f"test {i}", "passed": i < passed, "error": None, "time_s": 0.001}
                                    for i in range(4)], "stdout": "", "stderr": ""}
                reward = sum(weights[d] * rewards[d] for d in DIMS) / sum(weights.values())
                rows.append(Candidate(run=run, step=step, problem_id=pid, index=index, code=code, reward=reward,
                                      rewards=rewards, result=result, passed=status == "passed", status=status))
    Candidate.objects.bulk_create(rows, batch_size=2000)
    return run, user, per_step, k


def bench(steps: int, repeats: int, *, page_first: bool = True) -> dict:
    """With ``page_first``, the run page is opened first and the call waits for the background import
    it starts; without, the first call comes cold and only it is timed."""
    from django.db import connection
    from django.test import Client

    run, user, per_step, k = seed_demo_run(steps)
    client = Client(HTTP_HOST="127.0.0.1")
    client.force_login(user)
    url, body = f"/api/runs/{run.pk}/rescore", json.dumps({"weights": WEIGHTS})
    warm_up_s = None
    try:
        cold_import = "torch" not in sys.modules
        if page_first:
            import threading

            t0 = time.perf_counter()
            assert client.get(f"/runs/{run.pk}/").status_code == 200
            for thread in threading.enumerate():
                if thread.name == "crucible-rescore-warm-up":
                    thread.join()
            warm_up_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        response = client.post(url, body, content_type="application/json")
        first_ms = (time.perf_counter() - t0) * 1000
        assert response.status_code == 200, response.content
        answer = response.json()
        if not page_first:
            return {"first_ms": first_ms, "first_loads_torch": cold_import}
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            response = client.post(url, body, content_type="application/json")
            times.append((time.perf_counter() - t0) * 1000)
            assert response.status_code == 200
        times.sort()
        compute = _compute_only(run, repeats)
    finally:
        run.delete()
    return {"load_avg": os.getloadavg()[0], "steps": steps, "range": answer["range"], "candidates": answer["summary"]["candidates"],
            "groups": answer["summary"]["groups"], "per_step": per_step, "k": k,
            "database": connection.vendor, "first_ms": first_ms, "first_loads_torch": cold_import,
            "page_loaded_torch": cold_import and "torch" in sys.modules, "warm_up_s": warm_up_s,
            "p50_ms": statistics.median(times), "p95_ms": times[int(0.95 * (len(times) - 1))],
            "compute_p50_ms": compute, "bytes": len(response.content)}


def _compute_only(run, repeats: int) -> float:
    """``training.rescore`` alone on the same 10 steps, already read (the rest is the database and JSON)."""
    from training.rescore import RewardSettings, StoredCandidate, rescore
    from webapp.runs.models import Candidate
    from webapp.runs.rescore import run_reward_config

    cfg = run_reward_config(run)
    candidates = [StoredCandidate(step=s, problem_id=p, index=i, rewards=r, reward=w)
                  for s, p, i, r, w in Candidate.objects.filter(run=run, step__gt=run.step - 10)
                  .values_list("step", "problem_id", "index", "rewards", "reward")]
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        rescore(candidates, RewardSettings.from_config(cfg), WEIGHTS)
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def write_results(r: dict) -> str:
    import platform

    from benchmarks.results import update_section

    section = "\n".join([
        "## What-if re-scoring",
        "",
        f"`python benchmarks/rescore_bench.py` on {platform.machine()} with {os.cpu_count()} CPUs (load average "
        f"{r['load_avg']:.1f} while it ran), {r['database']}, {time.strftime('%Y-%m-%d')}: "
        "`POST /api/runs/{id}/rescore` with other weights over "
        f"the default range (the last 10 of {r['steps']} stored steps of the CPU demo preset, {r['per_step']} "
        f"problems x {r['k']} candidates: {r['candidates']} candidates in {r['groups']} groups), timed around "
        "the Django view.",
        "",
        "| measure | time | target |",
        "|---|---|---|",
        f"| warm call, p50 / p95 | {r['p50_ms']:.0f} ms / {r['p95_ms']:.0f} ms | < 1 s |",
        f"| of which `training.rescore` (rewards, advantages, ranks), p50 | {r['compute_p50_ms']:.0f} ms | |",
        f"| first call of a web process, after its run page was opened (the page's background import took "
        f"{r['warm_up_s']:.1f} s) | {r['first_ms']:.0f} ms | < 1 s |",
        f"| first call of a web process straight after it started{' (loads torch)' if r['cold']['first_loads_torch'] else ''} | "
        f"{r['cold']['first_ms']:.0f} ms | |",
        "",
        "The web server does not load torch at start (training's advantage estimators are tensor functions, "
        "imported rather than rewritten); a run page with candidates to re-score starts that import in the "
        "background, so a user who opens the panel and changes a weight finds it loaded. "
        f"The answer is {r['bytes'] // 1024} KiB of JSON.",
    ])
    update_section("rescore-bench", section)
    return section


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60, help="stored steps of the seeded run")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--no-write", action="store_true", help="print only; leave RESULTS.md alone")
    parser.add_argument("--cold-only", action="store_true", help=argparse.SUPPRESS)  # the child process
    args = parser.parse_args()
    setup_django(os.environ.get("CRUCIBLE_DATA_DIR") or tempfile.mkdtemp(prefix="crucible-rescore-bench-"))
    if args.cold_only:
        print(json.dumps(bench(args.steps, 0, page_first=False)))
        return
    result = bench(args.steps, args.repeats)
    child = subprocess.run([sys.executable, __file__, "--cold-only", "--steps", str(args.steps)],
                           capture_output=True, text=True, check=True)
    result["cold"] = json.loads(child.stdout.strip().splitlines()[-1])
    print(json.dumps(result))
    if not args.no_write:
        print(write_results(result))


if __name__ == "__main__":
    main()
