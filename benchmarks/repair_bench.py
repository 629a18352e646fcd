"""Multi-turn repair (issue #20, "Measured"): does training with ``sampling.turns: 2`` (write, run,
read the failure, fix) buy more than today's one attempt, at equal wall-clock?

    python benchmarks/repair_bench.py [--arch qwen3|qwen3_5] [--model DIR] [--steps 16]
        [--eval-samples 4] [--threads 1] [--json-out F] [--no-write]

On the demo set. The tiny model (``build_tiny_model`` warm-started on the train split, or ``--model``)
learnt completion prompts only, and repair needs chat prompts (a turn's feedback is a user message),
so first it gets a short supervised chat warm start: the same examples as its own warm start (each
train problem's right body once, three failing variants) as chat turns, the system/user prompt of
``prompt_style: chat`` and a fenced reply. It never sees a feedback message: whatever it does with
one is learnt (or not) by the RL arms. Then two arms of a chat run, each in its own process:

(1) ``sampling.turns: 1`` for ``--steps`` steps;
(2) ``sampling.turns: 2`` (``reward.turns: final``) until its cumulative ``time/step_s`` reaches arm
    (1)'s (a stop file ends it at that step boundary; at most ``--steps`` steps).

The chat-warmed model before training and each arm's last checkpoint are then evaluated the same way,
on the held-out split with two turns: pass@1 at turn 1 (what a one-attempt evaluation measures),
pass@1 after 2 turns, and the repair rate (of the samples failing at turn 1, the share passing at
turn 2). Writes the ``repair`` section of RESULTS.md (``repair-qwen3-5`` for ``--arch qwen3_5``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.learning_demo import ARCH_NAMES, DEMO_PROBLEMS  # noqa: E402
from benchmarks.results import json_from_child  # noqa: E402

CONFIG = {
    "model": {"dtype": "float32", "lora": {"r": 8, "alpha": 16, "dropout": 0.0, "target_modules": "all-linear"}},
    "sampling": {"problems_per_step": 4, "candidates_per_problem": 8, "max_new_tokens": 80, "temperature": 1.0,
                 "top_p": 1.0, "top_k": 0, "prompt_style": "chat"},
    "ppo": {"learning_rate": 2e-3, "kl_coef": 0.01, "clip_range": 0.2, "micro_batch_size": 32, "advantage": "grpo"},
    "train": {"steps": 16, "seed": 0, "eval_every": 0, "eval_samples": 2, "checkpoint_every": 0},
    "sandbox": {"backend": "process", "workers": 2},
    "feedback": {"tests_shown": 3, "stderr_chars": 500},
}
CHAT_WARMUP_STEPS = 300


def chat_warm_start(model_dir: str, problems_file: Path, out: Path, *, seed: int = 0) -> dict:
    """The tiny model's own warm-start examples as chat turns, ``CHAT_WARMUP_STEPS`` supervised steps."""
    import torch
    from transformers import AutoModelForCausalLM

    from sandbox import Runner
    from training.generation import build_prompt
    from training.policy import load_tokenizer
    from training.tiny_model import load_problem_file, supervised_warmup, warmup_examples

    problems = load_problem_file(problems_file)
    by_prompt = {p.prompt: p for p in problems}
    tokenizer = load_tokenizer(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    with Runner(workers=2) as runner:
        examples, stats = warmup_examples(problems, runner, seed=seed)
    chat = [(build_prompt(by_prompt[prompt], tokenizer, "chat"), f"```python\n{prompt}{body}```")
            for prompt, body in examples]
    with torch.random.fork_rng():
        losses = supervised_warmup(model, tokenizer, chat, steps=CHAT_WARMUP_STEPS, seed=seed)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return {**stats, "steps": CHAT_WARMUP_STEPS, "loss_first": losses[0], "loss_last": losses[-1]}


def evaluate_two_turns(model_dir: str, adapter: str | None, samples: int, seed: int = 0) -> dict:
    """Held-out pass@1 at turn 1 and after two turns, and the repair rate, of a model (+ adapter)."""
    from sandbox import Runner
    from training.config import config_from_dict
    from training.evaluation import evaluate
    from training.policy import load_policy
    from training.tiny_model import load_problem_file

    cfg = config_from_dict({**CONFIG, "model": {"name_or_path": model_dir, "adapters": [adapter] if adapter else [],
                                                "lora": None},
                            "problems": str(DEMO_PROBLEMS), "sampling": {**CONFIG["sampling"], "turns": 2}})
    policy = load_policy(cfg.model, kl_coef=0.0)
    heldout = [p for p in load_problem_file(DEMO_PROBLEMS) if p.split == "heldout"]
    t0 = time.perf_counter()
    with Runner(workers=2) as runner:
        report = evaluate(policy.model, policy.tokenizer, heldout, cfg.sampling, samples=samples, ks=[1],
                          runner=runner, record=True, generator_seed=seed, feedback=cfg.feedback)
    cands = [c for entry in report["per_problem"].values() for c in entry["candidates"]]
    failed_first = [c for c in cands if c["turns"][0]["result"].get("status") != "passed"] if cands else []
    repaired = sum(c["result"].get("status") == "passed" for c in failed_first)
    return {"turn1": report["pass@1/turn1"], "final": report["pass@1"],
            "repair_rate": repaired / len(failed_first) if failed_first else 0.0, "samples": len(cands),
            "seconds": time.perf_counter() - t0}


def run_child(cfg: dict, budget_s: float | None, threads: int, out: Path) -> dict:
    """One arm in this process: train (stopping once ``budget_s`` of step time is spent), then evaluate
    its last checkpoint with two turns."""
    import torch

    from training import checkpoint as ckpt
    from training.config import config_from_dict
    from training.trainer import train

    torch.set_num_threads(threads)
    run_dir = Path(tempfile.mkdtemp(prefix="repair-bench-"))
    events_path = run_dir / "events.jsonl"
    stopper = None
    if budget_s is not None:
        def watch() -> None:  # the stop file ends the run at the next step boundary once the budget is spent
            while not (run_dir / "STOP").exists():
                if events_path.exists():
                    spent = sum(json.loads(line)["metrics"].get("time/step_s", 0.0)
                                for line in events_path.read_text().splitlines() if '"event": "step"' in line)
                    if spent >= budget_s:
                        (run_dir / "STOP").write_text("budget\n")
                        return
                time.sleep(0.2)

        stopper = threading.Thread(target=watch, daemon=True)
        stopper.start()
    t0 = time.perf_counter()
    status = train(config_from_dict(cfg), run_dir, progress=True)
    wall = time.perf_counter() - t0
    (run_dir / "STOP").write_text("done\n")
    from training.events import read_events  # lines split at \n only (str.splitlines also splits at U+2028)

    events = read_events(events_path)
    steps = [e["metrics"] for e in events if e["event"] == "step"]
    latest = ckpt.latest_checkpoint(run_dir)
    result = {"status": status, "steps": len(steps), "wall_s": wall,
              "train_s": sum(m.get("time/step_s", 0.0) for m in steps), **step_facts(steps),
              "train_pass_turn1_last4": _mean([m.get("pass@1/turn1", m.get("pass@1/train", 0.0)) for m in steps[-4:]]),
              "train_pass_final_last4": _mean([m.get("pass@1/final", m.get("pass@1/train", 0.0)) for m in steps[-4:]]),
              "after": evaluate_two_turns(cfg["model"]["name_or_path"], str(latest), cfg["train"]["eval_samples"])}
    out.write_text(json.dumps(result))
    shutil.rmtree(run_dir, ignore_errors=True)
    return result


def step_facts(steps: list[dict]) -> dict:
    """Per-step means of an arm's step metrics: seconds, turn-2 reward (where turn 2 ran), last KL."""
    turn2 = [m["reward/turn2"] for m in steps if "reward/turn2" in m]
    return {"step_s": _mean([m.get("time/step_s", 0.0) for m in steps]),
            "reward_turn1": _mean([m.get("reward/turn1", m.get("reward/mean", 0.0)) for m in steps]),
            "reward_turn2": _mean(turn2) if turn2 else None, "kl_last": steps[-1].get("kl") if steps else None}


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _spawn(cfg: dict, budget_s: float | None, threads: int, label: str) -> dict:
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump({"config": cfg, "budget_s": budget_s}, f)
        arg = Path(f.name)
    try:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(arg), "--threads", str(threads)]
        return json_from_child(cmd, label, tag="repair-bench")
    finally:
        arg.unlink()


def markdown(res: dict) -> str:
    arch = res["build"].get("architecture", "Qwen3ForCausalLM")
    pct = lambda v: f"{100 * v:.1f}%"  # noqa: E731
    s = CONFIG["sampling"]
    lines = [
        f"## Multi-turn repair: {ARCH_NAMES.get(arch, arch)}, turns 1 vs 2 at equal wall-clock",
        "",
        f"`{res['command']}` on {platform.machine()} with {os.cpu_count()} CPUs (shared; load "
        f"{res['load'][0]:.1f} → {res['load'][1]:.1f}), {res['threads']} torch thread(s). Demo set, chat prompts "
        f"({s['problems_per_step']} problems × {s['candidates_per_problem']} candidates, ≤ {s['max_new_tokens']} "
        f"tokens a turn), LoRA r 8, lr {CONFIG['ppo']['learning_rate']:g}. The tiny model is chat-warmed first "
        f"({res['warm']['steps']} supervised steps on its own warm-start examples as chat turns; it never saw a "
        "feedback message). Arm 2 trains until its step time reaches arm 1's. Held-out evaluation of the "
        f"chat-warmed model and of each arm's last checkpoint, always with two turns, {res['eval_samples']} samples "
        "per held-out problem: pass@1 at turn 1, after 2 turns, and the repair rate (of the samples failing "
        "turn 1, the share passing turn 2).",
        "",
        "| | steps | train s | held-out pass@1 turn 1 | after 2 turns | repair rate | "
        "train pass (last 4 steps) turn 1 → final |",
        "|---|---|---|---|---|---|---|",
        f"| before training | – | – | {pct(res['before']['turn1'])} | {pct(res['before']['final'])} | "
        f"{pct(res['before']['repair_rate'])} | – |",
    ]
    for name, arm in (("`turns: 1`", res["one"]), ("`turns: 2`", res["two"])):
        a = arm["after"]
        lines.append(f"| {name} | {arm['steps']} | {arm['train_s']:.0f} | {pct(a['turn1'])} | {pct(a['final'])} | "
                     f"{pct(a['repair_rate'])} | {pct(arm['train_pass_turn1_last4'])} → "
                     f"{pct(arm['train_pass_final_last4'])} |")
    one, two = res["one"]["after"], res["two"]["after"]
    lines += ["", f"What it shows: at equal training time, `turns: 2` ran {res['two']['steps']} steps to "
                  f"`turns: 1`'s {res['one']['steps']}; held-out pass@1 after two turns "
                  f"{pct(two['final'])} vs {pct(one['final'])}, at turn 1 {pct(two['turn1'])} vs {pct(one['turn1'])}, "
                  f"repair rate {pct(two['repair_rate'])} vs {pct(one['repair_rate'])} (before training "
                  f"{pct(res['before']['repair_rate'])}). {res['samples_note']}"]
    o, t = res["one"], res["two"]
    if "step_s" in o and "step_s" in t:
        lines += ["", f"A `turns: 2` step took {t['step_s']:.1f} s to `turns: 1`'s {o['step_s']:.1f} s (turn 2 "
                      f"generates one sequence per failing trajectory on a longer context). Mean training reward "
                      f"of turn 1 {o['reward_turn1']:.3f} (`turns: 1`) vs {t['reward_turn1']:.3f} (`turns: 2`), "
                      f"of turn 2 {t['reward_turn2'] if t['reward_turn2'] is not None else float('nan'):.3f}; "
                      f"KL to the reference at the last step {o['kl_last']:.4f} vs {t['kl_last']:.4f}."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arch", choices=("qwen3", "qwen3_5"), default="qwen3")
    parser.add_argument("--model", default=None, help="a warm-started tiny model directory (default: build one)")
    parser.add_argument("--steps", type=int, default=CONFIG["train"]["steps"])
    parser.add_argument("--eval-samples", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json-out", default=None)
    parser.add_argument("--no-write", action="store_true", help="print the markdown, leave RESULTS.md alone")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--render", default=None, help="rewrite the RESULTS.md section from a --json-out file")
    args = parser.parse_args(argv)
    if args.render:
        from benchmarks.results import update_section

        res = json.loads(Path(args.render).read_text())
        text = markdown(res)
        print(text)
        arch = res["build"].get("arch", "qwen3")
        if not args.no_write:
            update_section("repair" if arch == "qwen3" else "repair-qwen3-5", text)
        return 0
    if args.child:
        spec = json.loads(Path(args.child).read_text())
        run_child(spec["config"], spec["budget_s"], args.threads, Path(args.json_out))
        return 0

    import torch

    from benchmarks.results import update_section
    from training.tiny_model import build_tiny_model

    torch.set_num_threads(args.threads)
    load0 = os.getloadavg()[0]
    tmp = Path(tempfile.mkdtemp(prefix="repair-bench-"))
    model = args.model or str(build_tiny_model(tmp / "tiny", warmup_problems=DEMO_PROBLEMS, seed=0, arch=args.arch))
    info = Path(model) / "crucible_tiny.json"
    build = json.loads(info.read_text()) if info.exists() else {}
    print("[repair-bench] chat warm start ...", file=sys.stderr, flush=True)
    chat_model = tmp / "chat"
    warm = chat_warm_start(model, DEMO_PROBLEMS, chat_model)
    before = evaluate_two_turns(str(chat_model), None, args.eval_samples)
    cfg = json.loads(json.dumps(CONFIG))
    cfg["model"]["name_or_path"] = str(chat_model)
    # Train on the train split alone: the arms' own evaluations (at step 0 and the end) would cost training
    # time for nothing here; every model is evaluated the same way afterwards.
    train_only = tmp / "train.jsonl"
    train_only.write_text("".join(line + "\n" for line in DEMO_PROBLEMS.read_text().splitlines()
                                  if json.loads(line).get("split", "train") == "train"))
    cfg["problems"] = str(train_only)
    cfg["train"]["steps"] = args.steps
    cfg["train"]["eval_samples"] = args.eval_samples
    one = _spawn(cfg, None, args.threads, "turns: 1")
    two_cfg = json.loads(json.dumps(cfg))
    two_cfg["sampling"]["turns"] = 2
    two = _spawn(two_cfg, one["train_s"], args.threads, "turns: 2")
    res = {"build": build, "warm": warm, "before": before, "one": one, "two": two, "threads": args.threads,
           "eval_samples": args.eval_samples, "load": (load0, os.getloadavg()[0]),
           "command": "python benchmarks/repair_bench.py" + (" --arch qwen3_5" if args.arch == "qwen3_5" else "")
                      + (f" --steps {args.steps}" if args.steps != CONFIG["train"]["steps"] else ""),
           "samples_note": f"{before['samples']} held-out samples per evaluation: differences of a few points are "
                           "within sampling noise."}
    text = markdown(res)
    print(text)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(res, indent=2))
    if not args.no_write:
        update_section("repair" if args.arch == "qwen3" else "repair-qwen3-5", text)
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
