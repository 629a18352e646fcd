"""Learning signal (issue #11, "Measure"): does filtering by a difficulty probe, or dynamic sampling,
buy held-out pass@1 faster than today's loop at equal wall-clock?

    python benchmarks/learning_signal_bench.py [--arch qwen3|qwen3_5] [--model DIR] [--steps 50]
        [--eval-every 10] [--probe-samples 8] [--max-rounds 3] [--threads 1] [--arms a,b,c,d] [--no-write]

On the demo set and the warm-started tiny model (built as ``benchmarks/learning_demo.py`` builds it,
unless ``--model`` names one), four arms of the CPU demo config (learning_demo.DEMO_CONFIG), each in
its own process (learning_demo's ``_child``), same seed, same steps:

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

from benchmarks.learning_demo import ARCH_NAMES, DEMO_PROBLEMS, _child, demo_config, warm_start  # noqa: E402

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


def markdown(summaries: dict[str, dict], *, cfg: dict, build: dict, probe: dict | None, threads: int,
             load: tuple[float, float], command: str, machine: str, train_problems: int) -> str:
    s, tr = cfg["sampling"], cfg["train"]
    k = s["candidates_per_problem"]
    arch = build.get("architecture", "Qwen3ForCausalLM")
    base = summaries.get("a")
    budget = base["train_s"] if base else None
    target = base["after"] if base else None
    lines = [
        f"## Learning signal: probe filter and dynamic sampling vs today's loop, {ARCH_NAMES.get(arch, arch)}",
        "",
        f"`{command}` on {machine} (shared; load average {load[0]:.1f} before, {load[1]:.1f} after), "
        f"torch threads {threads}, {time.strftime('%Y-%m-%d %H:%M')}. Model: the {ARCH_NAMES.get(arch, arch)} "
        f"`{arch}` ({build.get('parameters', '?'):,} parameters) warm-started on the demo set's train split"
        f"{warm_start(build)}. Every arm: the CPU demo config (learning_demo.py) for {tr['steps']} steps × "
        f"{s['problems_per_step']} problems × {k} candidates, max_new_tokens {s['max_new_tokens']}, temperature "
        f"{s['temperature']}, top_k {s['top_k']}, seed {tr['seed']}, each arm in its own process; held-out pass@1 "
        f"(unbiased, {tr['eval_samples']} samples per held-out problem) every {tr['eval_every']} steps "
        f"(`train.eval_every`; evaluation time is not counted).",
        "",
    ]
    if probe:
        ps = probe["summary"]
        dropped = next((x["dropped"] for x in summaries.values() if x.get("dropped")), None)
        lines += [
            f"Probe: `python -m training probe --split train --samples {probe['samples']}` of the warm-started model "
            f"over the {ps['problems']} train problems: {ps['unsolved']} unsolved (0/{probe['samples']}), "
            f"{ps['solved']} solved ({probe['samples']}/{probe['samples']}), mean pass rate {ps['mean_pass_rate']:.2f}; "
            f"{probe['wall_s']:.0f} s wall-clock as a subprocess (start-up and model load included; sampling and "
            f"sandbox {probe['sampling_s']:.0f} s), {probe['executions']:,} sandbox executions. (b) and (d) are "
            f"charged its whole wall-clock and its executions"
            + (f"; the filter left {train_problems - dropped['unsolved'] - dropped['solved']} of {train_problems} "
               f"train problems (dropped {dropped['unsolved']} unsolved, {dropped['solved']} solved)." if dropped
               else "."),
            "",
        ]
    if base:
        lines += [
            f"Time axis: cumulative `time/step_s` of an arm's steps (+ the probe for (b), (d)). **Budget T = "
            f"(a)'s total training time, {budget:.0f} s**; \"pass@1 at T\" is the arm's last evaluation at or "
            f"before T (its cumulative seconds in brackets). \"Reached (a)'s final\" is the first evaluation with "
            f"pass@1 ≥ (a)'s final {target:.3f}.",
            "",
        ]
    lines += [
        "| arm | steps | training s | pass@1 step 0 → final | Δ points | pass@1 at T | reached (a)'s final at |",
        "|---|---|---|---|---|---|---|",
    ]
    for arm, x in summaries.items():
        at = pass_at_budget(x["points"], budget) if base else None
        reached = first_reaching(x["points"], target) if base else None
        secs = f"{x['train_s']:.0f}" + (f" ({x['probe_s']:.0f} probe)" if x["probe_s"] else "")
        lines.append(
            f"| {ARMS[arm]} | {x['steps']} | {secs} | {x['before']:.3f} → {x['after']:.3f} | "
            f"{100 * (x['after'] - x['before']):+.1f} | "
            f"{f'{at[1]:.3f} ({at[0]:.0f} s)' if at else '— (no evaluation by T)'} | "
            f"{f'{reached:.0f} s' if reached is not None else 'not reached'} |")
    lines += [
        "",
        "Cost per informative group (a group whose candidates did not all get the same reward: "
        "`sampling/groups_kept` with dynamic sampling, else the step's groups less `zero_variance_groups`). "
        "Generated tokens: Σ `tokens_per_s` × `time/rollout_s` over steps (every round of a dynamic step; the "
        "probe's own tokens are not reported by its CLI and not included). Sandbox executions: Σ candidates × "
        "`reward.repeats` (+ the probe's for (b), (d)).",
        "",
        "| arm | groups sampled | informative (share) | rounds/step | generated tokens | sandbox executions | "
        "per informative group: seconds | tokens | executions |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for arm, x in summaries.items():
        n = x["informative"]
        execs = x["executions"] + x["probe_executions"]
        lines.append(
            f"| {ARMS[arm]} | {x['sampled_groups']} | {n} ({_per(100 * n, x['sampled_groups'], '.0f')}%) | "
            f"{x['rounds_mean']:.2f} | {x['tokens']:,} | {execs:,} | {_per(x['train_s'], n, '.2f')} | "
            f"{_per(x['tokens'], n, ',.0f')} | {_per(execs, n, ',.0f')} |")
    lines += ["", "Held-out pass@1 curves (cumulative training seconds: pass@1):", ""]
    for arm, x in summaries.items():
        lines.append(f"- {ARMS[arm]}: " + ", ".join(f"{t:.0f} s {v:.3f}" for t, v in x["points"]))
    return "\n".join(lines)


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
    ap.add_argument("--model", type=Path, default=None, help="warm-started tiny model (default: build one)")
    ap.add_argument("--arch", choices=("qwen3", "qwen3_5"), default="qwen3",
                    help="architecture of the tiny model built when --model is not given")
    ap.add_argument("--problems", type=Path, default=DEMO_PROBLEMS)
    ap.add_argument("--steps", type=int, default=50, help="train.steps of every arm (default 50)")
    ap.add_argument("--eval-every", type=int, default=10, help="train.eval_every of every arm (default 10)")
    ap.add_argument("--probe-samples", type=int, default=8, help="samples per train problem in the probe (default 8)")
    ap.add_argument("--max-rounds", type=int, default=3, help="sampling.max_rounds of (c) and (d) (default 3)")
    ap.add_argument("--arms", default="a,b,c,d", help="comma-separated subset of a,b,c,d (default all)")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads (default 1: on a shared 2-core machine more threads oversubscribe)")
    ap.add_argument("--no-write", action="store_true", help="do not update RESULTS.md")
    args = ap.parse_args(argv)
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    bad = [a for a in arms if a not in ARMS]
    if bad or not arms:
        ap.error(f"--arms: unknown arm {bad[0] if bad else '(none)'!r}; choose from a,b,c,d")
    if args.eval_every < 1 or args.steps < 1:
        ap.error("--steps and --eval-every must be >= 1")

    from sandbox.formats import load_problems

    train_problems = sum(p.split == "train" for p in load_problems(args.problems).problems)
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="learning-signal-") as tmp:
        model = args.model
        if model is None:
            import torch

            from training.tiny_model import build_tiny_model

            torch.set_num_threads(args.threads)
            print("[learning-signal] building the warm-started tiny model ...", file=sys.stderr, flush=True)
            model = build_tiny_model(Path(tmp) / "tiny", warmup_problems=args.problems, seed=0, arch=args.arch)
        info_path = Path(model) / "crucible_tiny.json"
        build = json.loads(info_path.read_text()) if info_path.exists() else {}
        base_overrides = [f"train.steps={args.steps}", f"train.eval_every={args.eval_every}"]
        cfg = demo_config(str(model), str(args.problems), base_overrides)
        probe = None
        if any(a in PROBED for a in arms):
            probe = run_probe(str(model), cfg, args.probe_samples, args.threads, Path(tmp) / "probe.jsonl")
            print(f"[learning-signal] probe: {probe['wall_s']:.0f} s, {json.dumps(probe['summary'])}",
                  file=sys.stderr, flush=True)
        summaries = {}
        for arm in arms:
            arm_cfg = demo_config(str(model), str(args.problems),
                                  base_overrides + arm_overrides(arm, str(Path(tmp) / "probe.jsonl"), args.max_rounds))
            result = _child("train", arm_cfg, args.threads, curve=True, label=ARMS[arm])
            summaries[arm] = summarize_arm(result, candidates_per_problem=cfg["sampling"]["candidates_per_problem"],
                                           repeats=cfg.get("reward", {}).get("repeats", 1), dynamic=arm in DYNAMIC,
                                           probe=probe if arm in PROBED else None)
            print(f"[learning-signal] {ARMS[arm]}: {json.dumps({k: v for k, v in summaries[arm].items()})}",
                  file=sys.stderr, flush=True)
    command = "python benchmarks/learning_signal_bench.py" + "".join(
        f" {a}" for a in (argv if argv is not None else sys.argv[1:]) if a != "--no-write")
    text = markdown(summaries, cfg=cfg, build=build, probe=probe, threads=args.threads,
                    load=(load0, os.getloadavg()[0]), command=command, machine=machine_name(),
                    train_problems=train_problems)
    print(text)
    if not args.no_write:
        from benchmarks.results import update_section

        arch = build.get("architecture", "Qwen3ForCausalLM")
        update_section("learning-signal" if arch == "Qwen3ForCausalLM" else "learning-signal-qwen3-5", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
