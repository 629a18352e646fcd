"""Does the loop learn? Held-out pass@1 of the warm-started tiny model before and after a CPU run,
against a shuffled-reward control that must not improve.

    python benchmarks/learning_demo.py [--arch qwen3|qwen3_5] [--model DIR] [--steps N] [--threads 1]
                                       [--no-control] [--no-write]

1. Builds the tiny model with its supervised warm start on data/demo/problems.jsonl
   (``python -m training tiny-model --warmup-problems ...``) unless ``--model`` names one.
2. ``train``: ``training.trainer.train`` with the demo config below (the web's "CPU demo" preset
   should use the same); held-out pass@1 comes from the run's own ``eval`` events at step 0 and at the
   end (``eval_samples`` samples per held-out problem, unbiased estimator, the run's sampling:
   temperature 1.0, top_k 0 = no top-k cut, top_p 1.0).
3. ``control``: the identical run, except that each step's rewards are permuted at random across the
   whole batch before advantages are computed (the reward no longer says anything about the
   candidate). It does the same compute, so any gain it shows is not learning from execution.
   The permutation wraps ``training.rollout.PendingRollout.finish`` in this process only (the trainer
   has no such switch; see /work/notes/T3_FINDINGS.md).

Target: ≥ +30 points of held-out pass@1 within 5 minutes of wall clock on 2 cores; the control must
not improve. Writes the ``learning-demo`` section of RESULTS.md (``learning-demo-qwen3-5`` for the
hybrid Qwen3.5 architecture, ``--arch qwen3_5``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.results import json_from_child  # noqa: E402

DEMO_PROBLEMS = ROOT / "data" / "demo" / "problems.jsonl"
TARGET_POINTS = 30.0
TARGET_SECONDS = 300.0

# The CPU demo configuration (keys as in the run config; the web preset "CPU demo" should match).
DEMO_CONFIG = {
    "model": {"dtype": "float32", "lora": {"r": 8, "alpha": 16, "dropout": 0.0, "target_modules": "all-linear"}},
    "sampling": {"problems_per_step": 8, "candidates_per_problem": 16, "max_new_tokens": 64,
                 "temperature": 1.0, "top_p": 1.0, "top_k": 0, "prompt_style": "completion"},
    "ppo": {"learning_rate": 2e-3, "kl_coef": 0.01, "clip_range": 0.2, "micro_batch_size": 64, "advantage": "grpo"},
    "train": {"steps": 200, "seed": 0, "eval_every": 0, "eval_samples": 16, "checkpoint_every": 0},
    "sandbox": {"backend": "process", "workers": 2},
}


def demo_config(model: str, problems: str, overrides: list[str]) -> dict:
    from training.config import apply_overrides

    cfg = json.loads(json.dumps(DEMO_CONFIG))
    cfg["model"]["name_or_path"] = model
    cfg["problems"] = problems
    return apply_overrides(cfg, overrides)


def install_shuffled_rewards(seed: int) -> None:
    """Permute each step's rewards across the whole batch before the trainer sees them."""
    import torch

    from training import rollout as rollout_module

    original = rollout_module.PendingRollout.finish
    gen = torch.Generator().manual_seed(seed)

    def finish_with_shuffled_rewards(self):
        rollout = original(self)
        flat = rollout.rewards.flatten()  # (P * K,)
        perm = torch.randperm(flat.numel(), generator=gen)
        rollout.rewards = flat[perm].view_as(rollout.rewards)  # (P, K)
        return rollout

    rollout_module.PendingRollout.finish = finish_with_shuffled_rewards


def run_arm(arm: str, cfg_dict: dict, threads: int | None, curve: bool = False) -> dict:
    """One training run in this process; returns before/after pass@1, wall clock and the curve.

    ``curve``: also return every ``eval`` event as ``evals`` ({step, pass@1}), every step's metrics as
    ``step_metrics`` and the ``start`` event's ``dropped`` (the difficulty filter's counts, or None).
    """
    import torch

    from training.config import config_from_dict
    from training.trainer import train

    if threads:
        torch.set_num_threads(threads)
    if arm == "control":
        install_shuffled_rewards(seed=cfg_dict["train"]["seed"] + 1)
    cfg = config_from_dict(cfg_dict)
    with tempfile.TemporaryDirectory(prefix=f"learning-demo-{arm}-") as run_dir:
        t0 = time.perf_counter()
        status = train(cfg, run_dir, progress=True)
        wall = time.perf_counter() - t0
        from training.events import read_events  # lines split at \n only (str.splitlines also splits at U+2028)

        events = read_events(Path(run_dir) / "events.jsonl")
    if status != "succeeded":
        raise SystemExit(f"{arm} run ended {status}")
    evals = [e for e in events if e["event"] == "eval"]
    steps = [e for e in events if e["event"] == "step"]
    train_s = sum(e["metrics"].get("time/step_s", 0.0) for e in steps)
    return {
        "arm": arm, "threads": torch.get_num_threads(), "wall_s": wall, "train_steps_s": train_s,
        "before": evals[0]["pass@1"], "after": evals[-1]["pass@1"],
        "before_k": evals[0].get("pass@k", {}), "after_k": evals[-1].get("pass@k", {}),
        "reward_first": steps[0]["metrics"]["reward/mean"], "reward_last": steps[-1]["metrics"]["reward/mean"],
        "train_pass_first": steps[0]["metrics"].get("pass@1/train"),
        "train_pass_last5": sum(s["metrics"].get("pass@1/train", 0.0) for s in steps[-5:]) / max(1, len(steps[-5:])),
        "steps": len(steps),
    } | ({"evals": [{"step": e["step"], "pass@1": e["pass@1"]} for e in evals],
          "step_metrics": [e["metrics"] for e in steps],
          "dropped": next(e for e in events if e["event"] == "start").get("dropped")} if curve else {})


def _child(arm: str, cfg: dict, threads: int | None, curve: bool = False, label: str | None = None) -> dict:
    """``run_arm`` in a fresh Python process (each arm starts from the same state: no shared caches or
    patched functions); ``label`` names it in the progress line."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(cfg, f)
        cfg_path = Path(f.name)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--arm", arm, "--config-json", str(cfg_path)]
    if threads:
        cmd += ["--threads", str(threads)]
    if curve:
        cmd.append("--curve")
    try:
        return json_from_child(cmd, f"{label or arm} run", tag="learning-demo")
    finally:
        cfg_path.unlink()


def add_model_arguments(ap: argparse.ArgumentParser) -> None:
    """The options ``tiny_model`` reads (``--model``, ``--arch``, ``--problems``), for each script that trains it."""
    ap.add_argument("--model", type=Path, default=None, help="warm-started tiny model (default: build one)")
    ap.add_argument("--arch", choices=("qwen3", "qwen3_5"), default="qwen3",
                    help="architecture of the tiny model built when --model is not given")
    ap.add_argument("--problems", type=Path, default=DEMO_PROBLEMS)


def tiny_model(args: argparse.Namespace, tmp: Path, tag: str) -> tuple[str, dict]:
    """``args.model``, or the warm-started tiny model of ``args.arch`` built under ``tmp`` on
    ``args.problems`` (``args.threads`` torch threads) -> (model directory, its build facts)."""
    model = args.model
    if model is None:
        import torch

        from training.tiny_model import build_tiny_model

        torch.set_num_threads(args.threads)
        print(f"[{tag}] building the warm-started tiny model ...", file=sys.stderr, flush=True)
        # vLLM's CPU kernel: 128-wide heads
        wide = args.arch == "qwen3_5" and any(e != "hf" for e in (args.engines or ()))
        model = build_tiny_model(tmp / "tiny", warmup_problems=args.problems, seed=0, arch=args.arch,
                                 linear_head_dim=128 if wide else 32)
    info_path = Path(model) / "crucible_tiny.json"
    return str(model), (json.loads(info_path.read_text()) if info_path.exists() else {})


def warm_start(build: dict) -> str:
    w = build.get("warmup")
    if not w:
        return ""
    return (f": {w['steps']} supervised steps on {w['problems']} train problems, "
            f"{w.get('correct_copies', '?')} right body to {w.get('wrong_per_problem', '?')} failing variants each")


ARCH_NAMES = {"Qwen3ForCausalLM": "tiny Qwen3 model (dense)",
              "Qwen3_5ForCausalLM": "tiny Qwen3.5 model (hybrid: 3 Gated DeltaNet linear-attention layers + 1 "
                                    "full-attention layer, transformers' torch kernels)"}


def markdown(results: list[dict], cfg: dict, build: dict, load: tuple[float, float], threads: int,
             command: str = "python benchmarks/learning_demo.py") -> str:
    s, t = cfg["sampling"], cfg["ppo"]
    tr = cfg["train"]
    arch = build.get("architecture", "Qwen3ForCausalLM")
    lines = [
        f"## Learning demo: {ARCH_NAMES.get(arch, arch)}, held-out pass@1 before → after",
        "",
        f"`{command}` on {platform.machine()} with {os.cpu_count()} CPUs (shared; load "
        f"average {load[0]:.1f} before, {load[1]:.1f} after), torch threads {threads}, "
        f"{time.strftime('%Y-%m-%d %H:%M')}. Model: the {ARCH_NAMES.get(arch, arch)} `{arch}` "
        f"({build.get('parameters', '?'):,} parameters) warm-started on the demo set's train split"
        f"{' (build ' + str(build['build_seconds']) + ' s, not counted)' if 'build_seconds' in build else ''}"
        f"{warm_start(build)}.",
        "",
        f"Config (the CPU demo preset): {tr['steps']} steps × {s['problems_per_step']} problems × "
        f"{s['candidates_per_problem']} candidates, max_new_tokens {s['max_new_tokens']}, LoRA r "
        f"{cfg['model']['lora']['r']} / alpha {cfg['model']['lora']['alpha']}, learning rate {t['learning_rate']}, "
        f"kl_coef {t['kl_coef']}, clip {t['clip_range']}, {t['advantage']} advantages. Sampling "
        f"**temperature {s['temperature']}, top_k {s['top_k']} (no top-k cut), top_p {s['top_p']}** for training and "
        f"evaluation; pass@1 = unbiased estimator over {tr['eval_samples']} samples per held-out problem "
        f"(the run's own step-0 and final `eval` events).",
        "",
        "| run | held-out pass@1 before | after | Δ points | train pass@1 step 1 → last 5 | wall clock (incl. 2 evals) |",
        "|---|---|---|---|---|---|",
    ]
    names = {"train": "RL on execution rewards", "control": "control: rewards shuffled within each batch"}
    for r in results:
        d = 100 * (r["after"] - r["before"])
        lines.append(f"| {names[r['arm']]} | {r['before']:.3f} | {r['after']:.3f} | {d:+.1f} | "
                     f"{r['train_pass_first']:.2f} → {r['train_pass_last5']:.2f} | {r['wall_s']:.0f} s |")
    main = next((r for r in results if r["arm"] == "train"), None)
    ctrl = next((r for r in results if r["arm"] == "control"), None)
    if main:
        d = 100 * (main["after"] - main["before"])
        ok = d >= TARGET_POINTS and main["wall_s"] <= TARGET_SECONDS
        lines += ["", f"Target ≥ +{TARGET_POINTS:.0f} points within {TARGET_SECONDS / 60:.0f} minutes: "
                      f"**{'met' if ok else 'NOT met'}** ({d:+.1f} points in {main['wall_s']:.0f} s)."]
    if ctrl:
        dc = 100 * (ctrl["after"] - ctrl["before"])
        lines.append(f"Control must not improve: **{'holds' if dc <= 5.0 else 'FAILS'}** ({dc:+.1f} points; "
                     "≤ +5 counts as evaluation noise).")
    return "\n".join(lines)


def engines_markdown(results: list[dict], cfg: dict, build: dict, load: tuple[float, float], threads: int,
                     command: str) -> str:
    """The same training arm once per generation engine: does a run sampled by vLLM learn as ours does?"""
    arch = build.get("architecture", "Qwen3ForCausalLM")
    s, tr = cfg["sampling"], cfg["train"]
    shape = build.get("shape", {})
    lines = [f"## Learning demo by generation engine: {ARCH_NAMES.get(arch, arch)}", "",
             f"`{command}` on {os.cpu_count()} CPUs (load average {load[0]:.1f} before, {load[1]:.1f} after), "
             f"torch threads {threads}, {time.strftime('%Y-%m-%d %H:%M')}. The warm-started `{arch}` "
             f"({build.get('parameters', '?'):,} parameters, linear-attention heads "
             f"{shape.get('linear_key_head_dim', '–')} wide), the CPU demo config for {tr['steps']} steps × "
             f"{s['problems_per_step']} × {s['candidates_per_problem']}, identical but for `sampling.engine` "
             "(vllm-ahead: vllm with `sampling.staleness: 1`, each step sampled while the previous one updated); "
             f"held-out pass@1 over {tr['eval_samples']} samples per problem, the run's own step-0 and final "
             "evaluations (each sampled by the run's engine).", "",
             "| engine | held-out pass@1 before | after | Δ points | train pass@1 step 1 → last 5 | "
             "mean mismatch KL | max log-prob diff | wall clock |", "|---|---|---|---|---|---|---|---|"]
    for r in results:
        m = r.get("step_metrics") or []
        kl = [x.get("rollout/mismatch_kl") for x in m if x.get("rollout/mismatch_kl") is not None]
        diff = [x.get("rollout/logprob_diff_max") for x in m if x.get("rollout/logprob_diff_max") is not None]
        d = 100 * (r["after"] - r["before"])
        label = r["engine"] if not r.get("sync") else f"{r['engine']} (`vllm.sync: {r['sync']}`)"
        lines.append(f"| {label} | {r['before']:.3f} | {r['after']:.3f} | {d:+.1f} | "
                     f"{r['train_pass_first']:.2f} → {r['train_pass_last5']:.2f} | "
                     f"{(sum(kl) / len(kl)) if kl else 0:.1e} | {max(diff) if diff else 0:.3f} | {r['wall_s']:.0f} s |")
    if len(results) == 2:
        gap = 100 * ((results[1]["after"] - results[1]["before"]) - (results[0]["after"] - results[0]["before"]))
        lines += ["", f"Gain of {results[1]['engine']} minus {results[0]['engine']}: {gap:+.1f} points (one seed each; "
                      "the evaluation's own noise at these sample counts is several points). vLLM samples "
                      "in bfloat16 against a float32 trainer, which is what its mismatch KL measures; with "
                      "staleness 1 it also holds one update of policy drift."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_model_arguments(ap)
    ap.add_argument("--steps", type=int, default=None, help="override train.steps")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="override a config value, e.g. --set ppo.learning_rate=5e-4 (repeatable)")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads (default 1: on a shared 2-core machine more threads oversubscribe)")
    ap.add_argument("--no-control", action="store_true", help="skip the shuffled-reward control run")
    ap.add_argument("--engines", nargs="+", choices=("hf", "vllm", "vllm-ahead"), default=None,
                    help="instead of train + control: the train arm once per generation engine (qwen3_5 gets "
                         "128-wide linear-attention heads so that vLLM's CPU kernel runs it); vllm-ahead is vllm "
                         "with sampling.staleness: 1")
    ap.add_argument("--no-write", action="store_true", help="do not update RESULTS.md")
    ap.add_argument("--arm", choices=("train", "control"), help=argparse.SUPPRESS)
    ap.add_argument("--config-json", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--json-out", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--curve", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.arm:  # child process: one arm
        result = run_arm(args.arm, json.loads(args.config_json.read_text()), args.threads, args.curve)
        args.json_out.write_text(json.dumps(result))
        return 0

    overrides = list(args.overrides) + ([f"train.steps={args.steps}"] if args.steps else [])
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="learning-demo-") as tmp:
        model, build = tiny_model(args, Path(tmp), "learning-demo")
        cfg = demo_config(str(model), str(args.problems), overrides)
        if args.engines:
            results = []
            for engine in args.engines:
                run_cfg = json.loads(json.dumps(cfg))
                run_cfg["sampling"]["engine"] = "hf" if engine == "hf" else "vllm"
                run_cfg["sampling"]["staleness"] = 1 if engine == "vllm-ahead" else 0
                sync = None
                if engine != "hf":  # what auto resolves to for a server of the run's own here
                    import torch

                    from training.engines.vllm_sync import resolve_sync

                    sync = resolve_sync(run_cfg.get("vllm", {}).get("sync", "auto"), full_finetune=False,
                                        own_server=True, cuda=torch.cuda.is_available())
                results.append({**_child("train", run_cfg, args.threads, curve=True, label=f"train ({engine})"),
                                "engine": engine, "sync": sync})
            command = "python benchmarks/learning_demo.py" + "".join(
                f" {a}" for a in (argv if argv is not None else sys.argv[1:]) if a != "--no-write")
            text = engines_markdown(results, cfg, build, (load0, os.getloadavg()[0]), args.threads, command)
            print(text)
            if not args.no_write:
                from benchmarks.results import update_section

                # the staleness comparison gets a section of its own: the engines section stays hf vs vllm
                update_section("learning-demo-engines" + ("-ahead" if "vllm-ahead" in args.engines else ""), text)
            return 0
        results = [_child("train", cfg, args.threads)]
        if not args.no_control:
            results.append(_child("control", cfg, args.threads))
    command = "python benchmarks/learning_demo.py" + "".join(f" {a}" for a in (argv if argv is not None else sys.argv[1:])
                                                           if a != "--no-write")
    text = markdown(results, cfg, build, (load0, os.getloadavg()[0]), args.threads, command)
    print(text)
    print(json.dumps(results), file=sys.stderr)
    if not args.no_write:
        from benchmarks.results import update_section

        arch = build.get("architecture", "Qwen3ForCausalLM")
        update_section("learning-demo" if arch == "Qwen3ForCausalLM" else "learning-demo-qwen3-5", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
