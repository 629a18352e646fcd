"""One RL step, ours vs TRL's GRPOTrainer, on the same tiny model, batch and sandbox.

    python benchmarks/train_step_bench.py [--arch qwen3|qwen3_5] [--steps 3] [--warmup 1] [--rounds 1]
                                          [--threads 1] [--defaults] [--model DIR] [--stop-strings]
                                          [--no-trl] [--trl-ftz] [--no-write]

Work per step, identical on both sides: 16 train problems of data/demo x 8 candidates, at most 128
new tokens, temperature 1.0, top_k 0, top_p 1.0; LoRA r=8 alpha=16 on all linear layers; KL to the
reference (adapters disabled) with coefficient 0.04; every candidate executed by the sandbox
(``sandbox.Runner``, process backend, 2 workers, warm) and scored with our five reward dimensions;
one optimizer step over the 128 candidates in micro-batches of 32.

Two thread settings. "same threads": both sides run torch on ``--threads`` threads for the whole
step. "defaults" (``--defaults``): each tool as it runs out of the box: ours follows the phases of a
step (``PhaseThreads.for_cpu``: every core while the sandbox is idle, the cores its workers leave
while it executes), TRL runs on torch's default (every core).

The model is the tiny model of ``--arch``: ``qwen3`` (dense) or ``qwen3_5`` (Qwen3.5's hybrid Gated
DeltaNet + full attention text stack, transformers' torch fallback for its linear-attention layers
on CPU); the RESULTS.md section names the architecture and the thread counts.

- ours: ``training.trainer.train`` for warmup + steps steps (held-out eval off: the problem file
  holds only the 16 train problems); per-step wall and CPU time are taken around
  ``Trainer.run_step``, the phase split from the step events.
- TRL: ``trl.GRPOTrainer`` (``trl==1.16.0``, requirements-bench.txt) with the same model, the same
  ``peft_config``, num_generations 8, max_completion_length 128, per_device_train_batch_size 32 x
  gradient_accumulation_steps 4 (= one generation of 16 prompts x 8 per optimizer step),
  gradient checkpointing off (its default is on), use_vllm off, and a reward function that executes
  the completions through the same sandbox and scores them with the same reward functions.

TRL cannot stop on strings (it does not pass a tokenizer to ``generate``), so by default our side also
runs without stop strings and both stop only at EOS or 128 tokens; ``--stop-strings`` adds a row with
our default completion stop strings (less work: that is a product difference, not a like-for-like one).
Denormals: our trainer flushes float32 denormals to zero on the CPU when it loads the policy
(``training.runtime.cpu_float_mode``; Qwen3.5's gated delta rule decays into them), TRL does not.
``--trl-ftz`` adds a row, for reference, with TRL run after the same call in its process, so the
table shows how much of the difference is that setting.

The model is the tiny model without warm start (random weights), so nearly every completion runs to
the token limit: the step does the full 16 x 8 x 128 work. Each side runs in its own process; with
``--rounds 2`` they alternate twice and the median of all timed steps is reported (the machine is
shared). Writes the ``train-step-bench`` section of RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.results import json_from_child  # noqa: E402

DEMO_PROBLEMS = ROOT / "data" / "demo" / "problems.jsonl"
PROBLEMS_PER_STEP = 16
CANDIDATES = 8
MAX_NEW_TOKENS = 128
MICRO_BATCH = 32
LORA = {"r": 8, "alpha": 16, "dropout": 0.0, "target_modules": "all-linear"}
KL_COEF = 0.04
LEARNING_RATE = 1e-5
SANDBOX_WORKERS = 2
TARGET_RATIO = 0.5


# ------------------------------------------------------------------------------------------ setup

def write_problem_file(out: Path, n: int = PROBLEMS_PER_STEP) -> Path:
    """The first ``n`` train problems of the demo set, alone in a file (no held-out split: no eval)."""
    rows = [json.loads(line) for line in DEMO_PROBLEMS.read_text().splitlines() if line.strip()]
    train = [r for r in rows if r.get("split", "train") == "train"][:n]
    if len(train) < n:
        raise SystemExit(f"{DEMO_PROBLEMS}: needs {n} train problems, has {len(train)}")
    out.write_text("".join(json.dumps(r) + "\n" for r in train))
    return out


def build_model(out: Path, arch: str, wide: bool = False) -> Path:
    from training.tiny_model import build_tiny_model

    return build_tiny_model(out, seed=0, arch=arch, linear_head_dim=128 if wide and arch == "qwen3_5" else 32)


def _set_threads(threads: int | None) -> int:
    import torch

    if threads:
        torch.set_num_threads(threads)
    return torch.get_num_threads()


def _threads_label(threads: int | None, side: str) -> str:
    if threads:
        return str(threads)
    if side.startswith("ours"):
        from training.cores import PhaseThreads

        phases = PhaseThreads.for_cpu(SANDBOX_WORKERS)
        return f"{phases.idle_threads} gen/update, {phases.busy_threads} beside the sandbox"
    import torch

    return str(torch.get_num_threads())


# ------------------------------------------------------------------------------------------- ours

def run_ours(model: str, problems: str, steps: int, threads: int | None, stop_strings: bool,
             engine: str = "hf", staleness: int = 0, sync: str = "auto") -> dict:
    from training import trainer as T
    from training.config import config_from_dict
    from training.cores import PhaseThreads

    label = _threads_label(threads, "ours")
    phase_threads = None if threads else PhaseThreads.for_cpu(SANDBOX_WORKERS)
    _set_threads(threads or (phase_threads.busy_threads if phase_threads else None))
    timings: list[dict] = []
    original = T.Trainer.run_step

    def timed_run_step(self, step):  # benchmark instrumentation around the real step
        w0, c0 = time.perf_counter(), time.process_time()
        out = original(self, step)
        timings.append({"wall_s": time.perf_counter() - w0, "cpu_s": time.process_time() - c0})
        return out

    T.Trainer.run_step = timed_run_step
    sampling = {"problems_per_step": PROBLEMS_PER_STEP, "candidates_per_problem": CANDIDATES,
                "max_new_tokens": MAX_NEW_TOKENS, "temperature": 1.0, "top_p": 1.0, "top_k": 0, "engine": engine,
                "staleness": staleness}
    if not stop_strings:
        sampling["stop"] = []
    cfg = config_from_dict({
        "model": {"name_or_path": model, "dtype": "float32", "lora": LORA},
        "problems": problems,
        "sampling": sampling,
        "ppo": {"learning_rate": LEARNING_RATE, "kl_coef": KL_COEF, "micro_batch_size": MICRO_BATCH},
        "train": {"steps": steps, "seed": 0, "eval_every": 0, "checkpoint_every": 0},
        "sandbox": {"backend": "process", "workers": SANDBOX_WORKERS, "mode": "warm"},
        "vllm": {"sync": sync},
    })
    with tempfile.TemporaryDirectory(prefix="bench-ours-") as run_dir:
        status = T.train(cfg, run_dir, progress=False, phase_threads=phase_threads)
        from training.events import read_events  # lines split at \n only (str.splitlines also splits at U+2028)

        events = read_events(Path(run_dir) / "events.jsonl")
    if status != "succeeded":
        raise SystemExit(f"our training run ended {status}")
    metrics = [e["metrics"] for e in events if e["event"] == "step"]
    for t, m in zip(timings, metrics):
        t["tokens"] = round(m.get("tokens_per_s", 0.0) * m.get("time/rollout_s", 0.0))
        t["rollout_s"] = m.get("time/rollout_s")
        t["sandbox_s"] = m.get("time/sandbox_s")
        t["update_s"] = m.get("time/update_s")
        t["sync_s"] = m.get("time/sync_s")
        t["wait_s"] = m.get("time/wait_s")
        t["mismatch_kl"] = m.get("rollout/mismatch_kl")
    return {"side": "ours-stop" if stop_strings else "ours", "engine": engine, "threads": label, "steps": timings}


# -------------------------------------------------------------------------------------------- TRL

def run_trl(model: str, problems: str, steps: int, threads: int | None, flush_denormal: bool = False) -> dict:
    if flush_denormal:  # first, before torch starts its threads (see training.runtime.cpu_float_mode)
        from training.runtime import cpu_float_mode

        cpu_float_mode()
    import torch
    import trl
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback

    from sandbox import Candidate, Runner
    from sandbox.candidate import assemble
    from training import rewards as R
    from training.tiny_model import load_problem_file

    _set_threads(threads)
    label = _threads_label(threads, "trl")
    plist = load_problem_file(problems)
    by_id = {p.id: p for p in plist}
    weights = R.weights_dict(None)
    runner = Runner(backend="process", workers=SANDBOX_WORKERS, mode="warm")

    def sandbox_reward(prompts, completions, problem_id, **_):
        """Execute every completion in the sandbox and score it like our trainer does."""
        cands = [Candidate(problem_id=pid, completion=c) for pid, c in zip(problem_id, completions)]
        results = runner.run_batch(by_id, cands)
        out = []
        for pid, text, res in zip(problem_id, completions, results):
            p = by_id[pid]
            ctx = R.RewardContext(code=assemble(p, completion=text).code, result=res.to_dict(), text=text,
                                  prompt_style="completion", kind=p.kind, entry_point=p.entry_point,
                                  time_limit_s=p.time_limit_s,
                                  reference_length=R.code_length(p.reference_solution) if p.reference_solution else None)
            out.append(R.score_candidate([ctx], weights).total)
        return out

    timings: list[dict] = []
    collected: list[dict] = []  # TRL's per-step logs (completion lengths)

    class Timer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            self.w0, self.c0 = time.perf_counter(), time.process_time()

        def on_step_end(self, args, state, control, **kw):
            timings.append({"wall_s": time.perf_counter() - self.w0, "cpu_s": time.process_time() - self.c0})

        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "completions/mean_length" in logs:
                collected.append({**logs, "step": state.global_step})

    tokenizer = AutoTokenizer.from_pretrained(model)
    tokenizer.padding_side = "left"
    policy = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32)
    dataset = Dataset.from_list([{"prompt": p.prompt, "problem_id": p.id} for p in plist])
    with tempfile.TemporaryDirectory(prefix="bench-trl-") as out_dir:
        args = trl.GRPOConfig(
            output_dir=out_dir, max_steps=steps, learning_rate=LEARNING_RATE, beta=KL_COEF,
            num_generations=CANDIDATES, max_completion_length=MAX_NEW_TOKENS,
            per_device_train_batch_size=MICRO_BATCH,
            gradient_accumulation_steps=PROBLEMS_PER_STEP * CANDIDATES // MICRO_BATCH,
            temperature=1.0, top_k=0, top_p=1.0, gradient_checkpointing=False, use_vllm=False,
            use_cpu=True, bf16=False, report_to="none", save_strategy="no", logging_steps=1,
            disable_tqdm=True, seed=0, dataloader_num_workers=0, log_completions=False)
        peft_config = LoraConfig(r=LORA["r"], lora_alpha=LORA["alpha"], lora_dropout=LORA["dropout"],
                                 target_modules=LORA["target_modules"], task_type="CAUSAL_LM")
        trainer = trl.GRPOTrainer(model=policy, reward_funcs=sandbox_reward, args=args, train_dataset=dataset,
                                  processing_class=tokenizer, peft_config=peft_config, callbacks=[Timer()])
        try:
            trainer.train()
        finally:
            runner.close()
    n = PROBLEMS_PER_STEP * CANDIDATES
    for t, log in zip(timings, collected):
        t["tokens"] = round(log["completions/mean_length"] * n)
    return {"side": "trl-ftz" if flush_denormal else "trl", "threads": label, "steps": timings,
            "trl_version": trl.__version__}


# ------------------------------------------------------------------------------------ orchestration

def _child(side: str, model: Path, problems: Path, steps: int, threads: int | None, engine: str = "hf") -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--side", side, "--model", str(model),
           "--problems", str(problems), "--total-steps", str(steps), "--engine", engine]
    cmd += ["--threads", str(threads)] if threads else ["--default-threads"]
    t0 = time.perf_counter()
    result = json_from_child(cmd, f"{side} side ({threads or 'default'} threads, {steps} steps)",
                             tag="train-step-bench", show_stderr=False)
    result["process_s"] = time.perf_counter() - t0
    result["mode"] = "same" if threads else "defaults"
    return result


def summarize(runs: list[dict], warmup: int) -> dict[tuple[str, str], dict]:
    """Per (thread mode, side): the timed steps (warm-up steps of every run dropped), medians."""
    out: dict[tuple[str, str], dict] = {}
    for run in runs:
        s = out.setdefault((run["mode"], run["side"]), {"steps": [], "threads": run["threads"]})
        s["steps"] += run["steps"][warmup:]
    for s in out.values():
        steps = s["steps"]
        s["wall_s"] = statistics.median(t["wall_s"] for t in steps)
        s["cpu_s"] = statistics.median(t["cpu_s"] for t in steps)
        s["tokens"] = statistics.median(t.get("tokens", 0) for t in steps)
        for k in ("rollout_s", "sandbox_s", "update_s"):
            vals = [t[k] for t in steps if t.get(k) is not None]
            if vals:
                s[k] = statistics.median(vals)
    return out


ARCH_NAMES = {"qwen3": "tiny Qwen3 (dense, Qwen3ForCausalLM)",
              "qwen3_5": "tiny Qwen3.5 (Qwen3_5ForCausalLM: 3 Gated DeltaNet linear-attention layers + 1 full-attention "
                         "layer; transformers' torch fallback for the linear-attention kernels)"}


def markdown(summary: dict[tuple[str, str], dict], args: argparse.Namespace, load: tuple[float, float]) -> str:
    title = "Training step: ours vs TRL GRPOTrainer" + (" — Qwen3.5 (hybrid)" if args.arch == "qwen3_5" else "")
    lines = [
        f"## {title}",
        "",
        f"`python benchmarks/train_step_bench.py --arch {args.arch} --steps {args.steps} --warmup {args.warmup} "
        f"--rounds {args.rounds} --threads {args.threads}{' --defaults' if args.defaults else ''}"
        f"{' --stop-strings' if args.stop_strings else ''}{' --trl-ftz' if args.trl_ftz else ''}"
        f"{' --engine ' + args.engine if args.engine != 'hf' else ''}` on {platform.machine()} with {os.cpu_count()} CPUs "
        f"(shared; load average {load[0]:.1f} before, {load[1]:.1f} after), {time.strftime('%Y-%m-%d %H:%M')}.",
        "",
        f"One step = {PROBLEMS_PER_STEP} problems x {CANDIDATES} candidates x ≤{MAX_NEW_TOKENS} new tokens, "
        f"{ARCH_NAMES[args.arch]}, random init (so completions run to the limit), LoRA r={LORA['r']} all-linear, "
        f"KL {KL_COEF}, every candidate sent through the sandbox Runner ({SANDBOX_WORKERS} workers) and scored with the "
        f"same five rewards (random-weight completions are nearly all syntax errors, judged without running, so "
        f"execution costs ~0 s here), micro-batches of {MICRO_BATCH}, temperature 1.0 / top_k 0 / top_p 1.0. "
        f"Median of {args.steps * args.rounds} timed steps per side after {args.warmup} warm-up step(s) per run.",
        "",
        "| threads | contender | torch threads | s/step (wall) | CPU s/step (main process) | tokens/step | generate s | sandbox s | update s | × TRL (wall) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    trl_version = next((s.get("version", "") for (_, side), s in summary.items() if side == "trl"), "")
    names = {"ours": "Crucible `train()` step, no stop strings (like-for-like)",
             "ours-stop": "Crucible `train()` step, default stop strings",
             "trl": f"TRL {trl_version} GRPOTrainer (grad. checkpointing off)",
             "trl-ftz": f"TRL {trl_version} GRPOTrainer, denormals flushed as ours (reference)"}
    verdicts = []
    for mode in ("same", "defaults"):
        trl_row = summary.get((mode, "trl"))
        for side in ("ours", "ours-stop", "trl", "trl-ftz"):
            s = summary.get((mode, side))
            if not s:
                continue
            ratio = f"{s['wall_s'] / trl_row['wall_s']:.2f}" if trl_row else "n/a"
            fmt = lambda k: f"{s[k]:.2f}" if k in s else "–"  # noqa: E731
            lines.append(f"| {mode} | {names[side]} | {s['threads']} | {s['wall_s']:.2f} | {s['cpu_s']:.2f} | "
                         f"{s['tokens']:.0f} | {fmt('rollout_s')} | {fmt('sandbox_s')} | {fmt('update_s')} | {ratio} |")
        ours = summary.get((mode, "ours"))
        if trl_row and ours:
            r = ours["wall_s"] / trl_row["wall_s"]
            rc = ours["cpu_s"] / trl_row["cpu_s"]
            target = f"target ≤ {TARGET_RATIO}×: **{'met' if r <= TARGET_RATIO else 'NOT met'}**" if mode == "same" \
                else "no target (each tool's own thread defaults)"
            verdicts.append(f"- {mode} threads: ours/TRL **{r:.2f}** wall-clock, {rc:.2f} main-process CPU time; "
                            f"{target}.")
            ftz = summary.get((mode, "trl-ftz"))
            if ftz:
                verdicts.append(f"- {mode} threads: ours/TRL with denormals flushed as ours {ours['wall_s'] / ftz['wall_s']:.2f} "
                                "wall-clock (that setting's share of the difference).")
    if verdicts:
        lines += [""] + verdicts
    lines += ["", "Our phases overlap (the reference log-probs run while the sandbox executes), so they do not add up "
                  "to the step time. TRL's generation cannot stop on strings; TRL's default gradient "
                  "checkpointing (on) would make its step slower still."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=3, help="timed steps per side and round")
    ap.add_argument("--warmup", type=int, default=1, help="untimed steps at the start of each run")
    ap.add_argument("--rounds", type=int, default=1, help="alternate ours/TRL this many times")
    ap.add_argument("--arch", choices=("qwen3", "qwen3_5"), default="qwen3", help="tiny model architecture")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads of the 'same threads' rows, both sides (default 1)")
    ap.add_argument("--defaults", action="store_true",
                    help="also time each side under its own thread defaults ('defaults' rows)")
    ap.add_argument("--model", type=Path, default=None, help="model directory (default: build the tiny model)")
    ap.add_argument("--stop-strings", action="store_true", help="also time our step with default stop strings")
    ap.add_argument("--no-trl", action="store_true", help="time only our step")
    ap.add_argument("--engine", choices=("hf", "vllm"), default="hf",
                    help="our side's generation engine (vllm: qwen3_5 is built with 128-wide linear heads; "
                         "benchmarks/rollout_bench.py compares the two engines side by side)")
    ap.add_argument("--trl-ftz", action="store_true",
                    help="also time TRL with float32 denormals flushed, as our trainer runs (reference row)")
    ap.add_argument("--no-write", action="store_true", help="do not update RESULTS.md")
    ap.add_argument("--side", choices=("ours", "ours-stop", "trl", "trl-ftz"), help=argparse.SUPPRESS)
    ap.add_argument("--problems", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--default-threads", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--total-steps", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--json-out", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.side:  # child process: one side, results as JSON
        threads = None if args.default_threads else args.threads
        if args.side in ("trl", "trl-ftz"):
            result = run_trl(str(args.model), str(args.problems), args.total_steps, threads,
                             flush_denormal=args.side == "trl-ftz")
        else:
            result = run_ours(str(args.model), str(args.problems), args.total_steps, threads,
                              stop_strings=args.side == "ours-stop", engine=args.engine)
        args.json_out.write_text(json.dumps(result))
        return 0

    if not args.no_trl:
        try:
            import trl  # noqa: F401
        except ImportError:
            raise SystemExit("trl is not installed: pip install -r requirements-bench.txt (or pass --no-trl)")
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="train-step-bench-") as tmp:
        tmp_path = Path(tmp)
        model = args.model or build_model(tmp_path / "tiny", args.arch, wide=args.engine == "vllm")
        problems = write_problem_file(tmp_path / "problems.jsonl")
        sides = (["ours"] + (["ours-stop"] if args.stop_strings else []) + ([] if args.no_trl else ["trl"])
                 + (["trl-ftz"] if args.trl_ftz and not args.no_trl else []))
        modes = [args.threads] + ([None] if args.defaults else [])
        runs = []
        for _ in range(args.rounds):
            for threads in modes:
                for side in sides:
                    runs.append(_child(side, model, problems, args.warmup + args.steps, threads,
                                       engine=args.engine if side.startswith("ours") else "hf"))
    summary = summarize(runs, args.warmup)
    for run in runs:
        if run["side"] in ("trl", "trl-ftz"):
            summary[(run["mode"], run["side"])]["version"] = run.get("trl_version", "")
    text = markdown(summary, args, (load0, os.getloadavg()[0]))
    print(text)
    print(json.dumps({"summary": {f"{m}/{side}": {kk: vv for kk, vv in v.items() if kk != "steps"}
                                  for (m, side), v in summary.items()}, "runs": runs}), file=sys.stderr)
    if not args.no_write:
        from benchmarks.results import update_section

        name = "train-step-bench" if args.arch == "qwen3" else f"train-step-bench-{args.arch.replace('_', '-')}"
        update_section(name + ("" if args.engine == "hf" else f"-{args.engine}"),
                       text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
