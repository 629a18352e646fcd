"""Learning signal (issue #11, "Measure"): does filtering by a difficulty probe, or dynamic sampling,
buy held-out pass@1 faster than today's loop at equal wall-clock?

    python benchmarks/learning_signal_bench.py [--arch qwen3|qwen3_5] [--model DIR] [--steps 100]
        [--eval-every 10] [--probe-samples 8] [--max-rounds 3] [--threads 1] [--arms a,b,c,d]
        [--seeds 0,1] [--json-out F] [--no-write]

On the demo set and the warm-started tiny model (built as ``benchmarks/learning_demo.py`` builds it,
unless ``--model`` names one), four arms of the CPU demo config (learning_demo.DEMO_CONFIG), each in
its own process (learning_demo's ``_child``), same steps, once per ``--seeds`` value:

(a) today's loop;
(b) the train split filtered by a difficulty probe of the warm-started model
    (``python -m training probe --split train --samples N``, run once as a subprocess and timed;
    ``difficulty: {probe, drop_unsolved: true, drop_solved: true}``);
(c) ``sampling.dynamic: true`` with ``sampling.max_rounds`` 3;
(d) (b) and (c) together.

Each arm evaluates held-out pass@1 every ``--eval-every`` steps (``train.eval_every``; evaluation time
is not training time). Its time axis is the cumulative ``time/step_s`` of its steps, plus the probe's
wall-clock for (b) and (d). Reported: pass@1 at the budget T = arm (a)'s total training seconds (the
last evaluation at or before T), final pass@1 and its gain, when each arm first reached (a)'s final
pass@1, and the cost per informative group (a group whose candidates did not all get the same
reward): seconds, generated tokens and sandbox executions. Writes the ``learning-signal`` section of
RESULTS.md (``learning-signal-qwen3-5`` for ``--arch qwen3_5``).
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

from benchmarks.learning_demo import (ARCH_NAMES, _child, add_model_arguments, demo_config, tiny_model,  # noqa: E402
                                      warm_start)

ARMS = {
    "a": "(a) today's loop",
    "b": "(b) probe-filtered train set",
    "c": "(c) dynamic sampling",
    "d": "(d) probe filter + dynamic sampling",
}
PROBED = ("b", "d")
DYNAMIC = ("c", "d")


def arm_overrides(arm: str, probe_path: str | None, max_rounds: int) -> list[str]:
    """The run-config overrides that make ``arm`` out of the demo config."""
    out = []
    if arm in PROBED:
        out += [f"difficulty.probe={probe_path}", "difficulty.drop_unsolved=true", "difficulty.drop_solved=true"]
    if arm in DYNAMIC:
        out += ["sampling.dynamic=true", f"sampling.max_rounds={max_rounds}"]
    return out


def run_probe(model: str, cfg: dict, samples: int, threads: int, out: Path) -> dict:
    """``python -m training probe`` over the train split with the arms' sampling and sandbox settings;
    returns its summary, its wall-clock (the whole subprocess: start-up and model load included) and
    its sampling seconds (from its last progress line)."""
    cfg_path = out.with_suffix(".config.json")
    cfg_path.write_text(json.dumps(cfg))  # YAML reads JSON
    cmd = [sys.executable, "-m", "training", "probe", "--model", model, "--problems", cfg["problems"],
           "--split", "train", "--samples", str(samples), "--config", str(cfg_path), "--out", str(out),
           "--threads", str(threads), "--seed", str(cfg["train"]["seed"])]
    print(f"[learning-signal] probe: {' '.join(cmd[1:])}", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr)
        raise SystemExit(f"the probe failed (exit {proc.returncode}); see its stderr above")
    progress = [ln for ln in proc.stderr.splitlines() if ln.startswith("probe ")]
    sampling_s = float(progress[-1].split("|")[1].split()[0]) if progress else None
    summary = json.loads(out.read_text().splitlines()[-1])["summary"]
    return {"summary": summary, "wall_s": wall, "sampling_s": sampling_s, "samples": samples,
            "executions": summary["problems"] * samples * cfg.get("reward", {}).get("repeats", 1)}


def summarize_arm(result: dict, *, candidates_per_problem: int, repeats: int, dynamic: bool,
                  probe: dict | None) -> dict:
    """One arm's curve and costs from learning_demo.run_arm(curve=True)'s result.

    Time axis: cumulative ``time/step_s`` (+ the probe's wall-clock when the arm used it). Generated
    tokens per step = ``tokens_per_s`` × ``time/rollout_s`` (the trainer computes the former as the
    latter's quotient; every round of a dynamic step is in both). Sandbox executions = candidates ×
    ``reward.repeats``. Informative groups: ``sampling/groups_kept`` with dynamic sampling, else the
    step's groups less its ``zero_variance_groups``.
    """
    offset = probe["wall_s"] if probe else 0.0
    cumulative = [offset]  # seconds after step i (index 0: before the first step)
    tokens = executions = informative = sampled_groups = zero_var = rounds = 0
    for m in result["step_metrics"]:
        cumulative.append(cumulative[-1] + m["time/step_s"])
        tokens += round(m["tokens_per_s"] * m["time/rollout_s"])
        executions += int(m["candidates"]) * repeats
        groups = int(m["candidates"]) // candidates_per_problem
        sampled_groups += groups
        zero_var += int(m["zero_variance_groups"])
        if dynamic:
            informative += int(m["sampling/groups_kept"])
            rounds += int(m["sampling/rounds"])
        else:
            informative += groups - int(m["zero_variance_groups"])
            rounds += 1
    steps = len(result["step_metrics"])
    points = [(cumulative[min(e["step"], steps)], e["pass@1"]) for e in result["evals"]]
    train_s = cumulative[-1]
    return {
        "steps": steps, "points": points, "train_s": train_s, "loop_s": train_s - offset, "probe_s": offset,
        "wall_s": result["wall_s"], "before": result["before"], "after": result["after"],
        "tokens": tokens, "executions": executions, "probe_executions": probe["executions"] if probe else 0,
        "sampled_groups": sampled_groups, "informative": informative, "zero_variance": zero_var,
        "rounds_mean": rounds / max(steps, 1), "dropped": result.get("dropped"),
    }


def pass_at_budget(points: list[tuple[float, float]], budget: float) -> tuple[float, float] | None:
    """The last evaluation at or before ``budget`` seconds: (seconds, pass@1); None when there is none."""
    within = [p for p in points if p[0] <= budget + 1e-9]
    return within[-1] if within else None


def first_reaching(points: list[tuple[float, float]], target: float) -> float | None:
    """Seconds of the first evaluation whose pass@1 is at least ``target``; None when none is."""
    return next((t for t, v in points if v >= target - 1e-9), None)


def _per(x: float, n: int, fmt: str) -> str:
    return format(x / n, fmt) if n else "—"


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def markdown(runs: list[dict], *, cfg: dict, build: dict, probe: dict | None, threads: int,
             load: tuple[float, float], command: str, machine: str, train_problems: int,
             date: str | None = None) -> str:
    """RESULTS.md's section from ``summarize_arm`` results, each with its ``arm`` and ``seed`` added;
    ``date`` (default now) is when the runs ended."""
    s, tr = cfg["sampling"], cfg["train"]
    k = s["candidates_per_problem"]
    arch = build.get("architecture", "Qwen3ForCausalLM")
    arms = [a for a in ARMS if any(r["arm"] == a for r in runs)]
    seeds = sorted({r["seed"] for r in runs})
    base = {r["seed"]: r for r in runs if r["arm"] == "a"}  # per seed: the budget and the target
    lines = [
        f"## Learning signal: probe filter and dynamic sampling vs today's loop, {ARCH_NAMES.get(arch, arch)}",
        "",
        f"`{command}` on {machine} (shared; load average {load[0]:.1f} before, {load[1]:.1f} after), "
        f"torch threads {threads}, {date or time.strftime('%Y-%m-%d %H:%M')}. Model: the {ARCH_NAMES.get(arch, arch)} "
        f"`{arch}` ({build.get('parameters', '?'):,} parameters) warm-started on the demo set's train split"
        f"{warm_start(build)}. Every arm: the CPU demo config (learning_demo.py) for {tr['steps']} steps × "
        f"{s['problems_per_step']} problems × {k} candidates, max_new_tokens {s['max_new_tokens']}, temperature "
        f"{s['temperature']}, top_k {s['top_k']}, train.seed {', '.join(map(str, seeds))}, each run in its own "
        f"process; held-out pass@1 (unbiased, {tr['eval_samples']} samples per held-out problem) every "
        f"{tr['eval_every']} steps (`train.eval_every`; evaluation time is not counted).",
        "",
    ]
    if probe:
        ps = probe["summary"]
        dropped = next((r["dropped"] for r in runs if r.get("dropped")), None)
        lines += [
            f"Probe (run once): `python -m training probe --split train --samples {probe['samples']}` of the "
            f"warm-started model over the {ps['problems']} train problems: {ps['unsolved']} unsolved "
            f"(0/{probe['samples']}), {ps['solved']} solved ({probe['samples']}/{probe['samples']}), mean pass rate "
            f"{ps['mean_pass_rate']:.2f}; {probe['wall_s']:.0f} s wall-clock as a subprocess (start-up and model load "
            f"included; sampling and sandbox {probe['sampling_s']:.0f} s), {probe['executions']:,} sandbox "
            f"executions. (b) and (d) are charged its whole wall-clock and its executions"
            + (f"; the filter left {train_problems - dropped['unsolved'] - dropped['solved']} of {train_problems} "
               f"train problems (dropped {dropped['unsolved']} unsolved, {dropped['solved']} solved)." if dropped
               else "."),
            "",
        ]
    if base:
        budgets = ", ".join(f"{b['train_s']:.0f} s (seed {seed})" for seed, b in sorted(base.items()))
        lines += [
            f"Time axis: cumulative `time/step_s` of a run's steps (+ the probe for (b), (d)). **Budget T = "
            f"(a)'s total training time on the same seed: {budgets}**; \"pass@1 at T\" is the run's last "
            f"evaluation at or before T (its cumulative seconds in brackets). \"Reached (a)'s final\" is the first "
            f"evaluation with pass@1 ≥ the final pass@1 of (a) on the same seed.",
            "",
        ]
    lines += [
        "| arm | seed | steps | training s | pass@1 step 0 → final | Δ points | pass@1 at T | reached (a)'s final at |",
        "|---|---|---|---|---|---|---|---|",
    ]
    at_budget: dict[int, tuple[float, float] | None] = {}
    for i, r in enumerate(runs):
        a = base.get(r["seed"])
        at = at_budget[i] = pass_at_budget(r["points"], a["train_s"]) if a else None
        reached = first_reaching(r["points"], a["after"]) if a else None
        secs = f"{r['train_s']:.0f}" + (f" ({r['probe_s']:.0f} probe)" if r["probe_s"] else "")
        lines.append(
            f"| {ARMS[r['arm']]} | {r['seed']} | {r['steps']} | {secs} | {r['before']:.3f} → {r['after']:.3f} | "
            f"{100 * (r['after'] - r['before']):+.1f} | "
            f"{f'{at[1]:.3f} ({at[0]:.0f} s)' if at else ('—' if not a else '— (no evaluation by T)')} | "
            f"{(f'{reached:.0f} s' if reached is not None else 'not reached') if a else '—'} |")
    if len(seeds) > 1:
        lines += ["", f"Mean over the {len(seeds)} seeds:", "",
                  "| arm | training s | pass@1 at T | final pass@1 | Δ points |", "|---|---|---|---|---|"]
        for arm in arms:
            idx = [i for i, r in enumerate(runs) if r["arm"] == arm]
            ats = [at_budget[i][1] for i in idx if at_budget.get(i)]
            lines.append(
                f"| {ARMS[arm]} | {_mean([runs[i]['train_s'] for i in idx]):.0f} | "
                f"{f'{_mean(ats):.3f}' if len(ats) == len(idx) else '—'} | "
                f"{_mean([runs[i]['after'] for i in idx]):.3f} | "
                f"{100 * _mean([runs[i]['after'] - runs[i]['before'] for i in idx]):+.1f} |")
    drops = [(100 * (p[1] - q[1]), r) for r in runs for p, q in zip(r["points"], r["points"][1:])]
    if drops:
        drop, where = max(drops, key=lambda d: d[0])
        lines += ["", f"Noise: held-out pass@1 is not monotone within a run; the largest drop between two consecutive "
                      f"evaluations of one run is {max(drop, 0.0):.1f} points ({ARMS[where['arm']]}, seed "
                      f"{where['seed']}). Differences between arms of that size are not evidence."]
    lines += _expectation(runs, base)
    lines += [
        "",
        "Cost per informative group (a group whose candidates did not all get the same reward: "
        "`sampling/groups_kept` with dynamic sampling, else the step's groups less `zero_variance_groups`), summed "
        "over seeds. Generated tokens: Σ `tokens_per_s` × `time/rollout_s` over steps (every round of a dynamic "
        "step; the probe's own tokens are not reported by its CLI and not included). Sandbox executions: Σ "
        "candidates × `reward.repeats` (+ the probe's for (b), (d), once per run).",
        "",
        "| arm | groups sampled | informative (share) | rounds/step | generated tokens | sandbox executions | "
        "per informative group: seconds | tokens | executions |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for arm in arms:
        rs = [r for r in runs if r["arm"] == arm]
        n, sampled = sum(r["informative"] for r in rs), sum(r["sampled_groups"] for r in rs)
        tokens, secs = sum(r["tokens"] for r in rs), sum(r["train_s"] for r in rs)
        execs = sum(r["executions"] + r["probe_executions"] for r in rs)
        rounds = sum(r["rounds_mean"] * r["steps"] for r in rs) / max(sum(r["steps"] for r in rs), 1)
        lines.append(
            f"| {ARMS[arm]} | {sampled} | {n} ({_per(100 * n, sampled, '.0f')}%) | {rounds:.2f} | {tokens:,} | "
            f"{execs:,} | {_per(secs, n, '.2f')} | {_per(tokens, n, ',.0f')} | {_per(execs, n, ',.0f')} |")
    lines += ["", "Held-out pass@1 curves (cumulative training seconds: pass@1):", ""]
    for r in runs:
        curve = ", ".join(f"{t:.0f} s {v:.3f}" for t, v in r["points"])
        lines.append(f"- {ARMS[r['arm']]}, seed {r['seed']}: {curve}")
    return "\n".join(lines)


def _expectation(runs: list[dict], base: dict[int, dict]) -> list[str]:
    """Issue #11 expects (c) and (d) to reach (a)'s final pass@1 in less time than (a) itself took to
    reach it (its first evaluation at that level): how many of their runs did."""
    cases = []
    for r in runs:
        a = base.get(r["seed"])
        if r["arm"] in DYNAMIC and a:
            mine, theirs = first_reaching(r["points"], a["after"]), first_reaching(a["points"], a["after"])
            cases.append((mine is not None and mine < theirs,
                          f"{ARMS[r['arm']][:3]} seed {r['seed']}: "
                          f"{f'{mine:.0f} s' if mine is not None else 'not reached'} vs (a)'s {theirs:.0f} s"))
    if not cases:
        return []
    return ["", f"Expectation (issue #11): (c)/(d) reach (a)'s final pass@1 in less time than (a). **Seen in "
                f"{sum(c[0] for c in cases)} of {len(cases)} runs** ({'; '.join(c[1] for c in cases)})."]


def machine_name() -> str:
    model = ""
    try:
        model = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                      if ln.startswith("model name")), "")
    except OSError:
        pass
    return f"{platform.machine()} with {os.cpu_count()} CPUs" + (f" ({model})" if model else "")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_model_arguments(ap)
    ap.add_argument("--steps", type=int, default=100, help="train.steps of every arm (default 100)")
    ap.add_argument("--eval-every", type=int, default=10, help="train.eval_every of every arm (default 10)")
    ap.add_argument("--probe-samples", type=int, default=8, help="samples per train problem in the probe (default 8)")
    ap.add_argument("--max-rounds", type=int, default=3, help="sampling.max_rounds of (c) and (d) (default 3)")
    ap.add_argument("--arms", default="a,b,c,d", help="comma-separated subset of a,b,c,d (default all)")
    ap.add_argument("--seeds", default="0", help="comma-separated train.seed values; every arm runs once per seed "
                                                 "(default 0)")
    ap.add_argument("--json-out", type=Path, help="also write the probe, every run's summary and the report's "
                                                  "context here (for --render)")
    ap.add_argument("--render", type=Path, metavar="JSON",
                    help="run nothing: rewrite the section from a --json-out file of an earlier run")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads (default 1: on a shared 2-core machine more threads oversubscribe)")
    ap.add_argument("--no-write", action="store_true", help="do not update RESULTS.md")
    args = ap.parse_args(argv)
    if args.render:
        saved = json.loads(args.render.read_text())
        return _report(saved.pop("runs"), saved | {"load": tuple(saved["load"])}, args.no_write)
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    bad = [a for a in arms if a not in ARMS]
    if bad or not arms:
        ap.error(f"--arms: unknown arm {bad[0] if bad else '(none)'!r}; choose from a,b,c,d")
    try:
        seeds = [int(x) for x in args.seeds.split(",") if x.strip()]
    except ValueError:
        ap.error(f"--seeds: expected comma-separated integers such as 0,1; got {args.seeds!r}")
    if not seeds:
        ap.error("--seeds: give at least one seed")
    if args.eval_every < 1 or args.steps < 1:
        ap.error("--steps and --eval-every must be >= 1")

    from sandbox.formats import load_problems

    train_problems = sum(p.split == "train" and not p.excluded for p in load_problems(args.problems).problems)
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="learning-signal-") as tmp:
        model, build = tiny_model(args, Path(tmp), "learning-signal")
        base_overrides = [f"train.steps={args.steps}", f"train.eval_every={args.eval_every}"]
        cfg = demo_config(str(model), str(args.problems), base_overrides)
        probe = None
        if any(a in PROBED for a in arms):
            probe = run_probe(str(model), cfg, args.probe_samples, args.threads, Path(tmp) / "probe.jsonl")
            print(f"[learning-signal] probe: {probe['wall_s']:.0f} s, {json.dumps(probe['summary'])}",
                  file=sys.stderr, flush=True)
        runs = []
        for seed in seeds:
            for arm in arms:
                overrides = base_overrides + [f"train.seed={seed}"] + arm_overrides(
                    arm, str(Path(tmp) / "probe.jsonl"), args.max_rounds)
                result = _child("train", demo_config(str(model), str(args.problems), overrides), args.threads,
                                curve=True, label=f"{ARMS[arm]}, seed {seed}")
                run = summarize_arm(result, candidates_per_problem=cfg["sampling"]["candidates_per_problem"],
                                    repeats=cfg.get("reward", {}).get("repeats", 1), dynamic=arm in DYNAMIC,
                                    probe=probe if arm in PROBED else None) | {"arm": arm, "seed": seed}
                runs.append(run)
                print(f"[learning-signal] {json.dumps(run)}", file=sys.stderr, flush=True)
    given = list(argv if argv is not None else sys.argv[1:])
    shown = [a for i, a in enumerate(given)  # the flags that change the numbers, not where they are written
             if a != "--no-write" and not a.startswith("--json-out") and (i == 0 or given[i - 1] != "--json-out")]
    command = "python benchmarks/learning_signal_bench.py" + "".join(f" {a}" for a in shown)
    context = {"cfg": cfg, "build": build, "probe": probe, "threads": args.threads,
               "load": (load0, os.getloadavg()[0]), "command": command, "machine": machine_name(),
               "train_problems": train_problems, "date": time.strftime("%Y-%m-%d %H:%M")}
    if args.json_out:
        args.json_out.write_text(json.dumps({"runs": runs, **context}, indent=1))
    return _report(runs, context, args.no_write)


def _report(runs: list[dict], context: dict, no_write: bool) -> int:
    text = markdown(runs, **context)
    print(text)
    if not no_write:
        from benchmarks.results import update_section

        arch = context["build"].get("architecture", "Qwen3ForCausalLM")
        update_section("learning-signal" if arch == "Qwen3ForCausalLM" else "learning-signal-qwen3-5", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
