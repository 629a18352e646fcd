"""Generation engines side by side: our decoding loop (``hf``) vs vLLM (``vllm``), same prompts, same sampling.

    python -m benchmarks.rollout_bench [--arch qwen3_5 qwen3] [--repeats 3] [--steps 3] [--no-step] [--no-write]
                                       [--hf-only]

Generation: 16 prompts (the first 16 train problems of data/demo) x 8 candidates x 128 new tokens,
temperature 1, no top-k/top-p, no stop strings (both stop only at EOS or 128 tokens), on each tiny
architecture: the hybrid Qwen3.5 with Qwen3.5-9B's 128-wide linear-attention heads (vLLM's CPU
gated-delta-rule kernel takes no other width) and the dense Qwen3. ``hf``: ``HFEngine`` over the float32
model, torch on every core (the eager loop); ``hf-static``: the same with ``sampling.compile: on`` (the
static-shape step; on CPU without a CUDA graph: the row that decides what ``auto`` does on CPU; ``--hf-only``
runs just these two and writes the ``rollout-bench-static`` section); ``vllm``: ``VLLMEngine`` on a server started from the engine environment
(bfloat16: its CPU kernels need it), its start not timed; ``vllm-lora``: the same server sampling a LoRA policy
(r 8 on every projection, B drawn at random so the adapter does something) through vLLM's LoRA path
(``vllm.sync: adapter``); ``vllm-weights``: the same policy with its adapter folded into weights the server
reloaded (``vllm.sync: weights``, the CPU default). One untimed call, then ``--repeats`` timed calls;
tokens/s = sampled tokens / wall seconds (median call).

Step: a whole RL step with each engine (train_step_bench's workload and ``run_ours``: the same 16 x 8 x 128,
sandbox, LoRA r 8, KL 0.04, one optimizer step; phase threads as the product runs them; the default completion
stop strings, as a run samples), one untimed step
then ``--steps`` timed ones, median wall seconds and the generated tokens/s inside the step (sampled tokens / the
step's rollout seconds: what sampling yields the way a step samples, beside the engine-alone rows above); the vLLM
rows also report the step's mismatch KL (bfloat16
sampler vs float32 trainer). A third row runs vLLM with ``sampling.staleness: 1``: step k + 1 is sampled by
the server while step k updates (one step off-policy), so the step costs the longer of the two, not their sum.
The vLLM rows name their ``vllm.sync``: ``adapter`` (hot-loaded LoRA) or ``weights`` (reloaded merged weights).

Each engine runs in its own process, one after the other (the machine is shared and small); the
section ``rollout-bench`` of RESULTS.md gets the table and the ratios. Targets (issue: rollouts on vLLM):
vLLM >= 5x our loop's generation tokens/s on the tiny Qwen3.5; a vLLM step <= 0.5x the hf step there.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

PROMPTS = 16
CANDIDATES = 8
MAX_NEW_TOKENS = 128
GEN_TARGET = 5.0
STEP_TARGET = 0.5


def build_model(out: Path, arch: str) -> Path:
    from training.tiny_model import build_tiny_model

    return Path(build_tiny_model(out, seed=0, arch=arch, linear_head_dim=128 if arch == "qwen3_5" else 32))


def _prompts() -> list[str]:
    rows = [json.loads(line) for line in (ROOT / "data" / "demo" / "problems.jsonl").read_text().splitlines()]
    return [r["prompt"] for r in rows if r.get("split", "train") == "train"][:PROMPTS]


def measure_generation(model_dir: str, engine_name: str, repeats: int) -> dict:
    """In this process: the engine's tokens/s on the fixed workload."""
    import torch

    from training.config import ModelConfig, config_from_dict
    from training.engines import collect, make_engine
    from training.policy import load_policy

    cfg = config_from_dict({"model": {"name_or_path": model_dir},
                            "sampling": {"candidates_per_problem": CANDIDATES, "max_new_tokens": MAX_NEW_TOKENS,
                                         "temperature": 1.0, "top_p": 1.0, "top_k": 0, "stop": [],
                                         "compile": "on" if engine_name == "hf-static" else "off"}})
    lora = engine_name in ("vllm-lora", "vllm-weights")
    torch.manual_seed(0)
    policy = load_policy(cfg.model if lora else ModelConfig(name_or_path=model_dir, lora=None), kl_coef=0.0)
    if lora:  # an adapter that changes the model (PEFT starts B at zero), as any trained one does
        for name, w in policy.model.named_parameters():
            if "lora_B" in name:
                w.data.normal_(0.0, 0.02)
    run_dir = tempfile.mkdtemp(prefix="rollout-bench-")
    ours = engine_name in ("hf", "hf-static")
    engine = (make_engine(cfg, policy.model, policy.tokenizer, run_dir=run_dir) if ours else
              _vllm(cfg, policy, run_dir, "weights" if engine_name == "vllm-weights" else "adapter"))
    prompts = _prompts()
    info = engine.describe()
    try:
        collect(engine, prompts, cfg.sampling, n=CANDIDATES, seed=0)  # warm-up (kernels, caches, prefix cache)
        calls = []
        for r in range(repeats):
            t0 = time.perf_counter()
            batch = collect(engine, prompts, cfg.sampling, n=CANDIDATES, seed=1 + r)
            calls.append({"wall_s": time.perf_counter() - t0, "tokens": batch.num_generated_tokens})
    finally:
        engine.close()
    wall = statistics.median(c["wall_s"] for c in calls)
    tokens = statistics.median(c["tokens"] for c in calls)
    return {"engine": engine_name, "tokens_per_s": tokens / wall, "wall_s": wall, "tokens": tokens,
            "threads": torch.get_num_threads() if ours else os.environ.get(
                "VLLM_CPU_OMP_THREADS_BIND", "vLLM's auto binding (engine on core 0; on 2 cores one left for its front end)"),
            "version": info.get("version"), "dtype": "float32" if ours else info.get("dtype")}


def _vllm(cfg, policy, run_dir, sync: str):
    import dataclasses

    from training.config import ModelConfig
    from training.engines import make_engine

    vcfg = dataclasses.replace(cfg, sampling=dataclasses.replace(cfg.sampling, engine="vllm"),
                               vllm=dataclasses.replace(cfg.vllm, sync=sync))
    # the base model on the server; a PEFT policy has its adapter loaded (adapter) or folded in (weights)
    return make_engine(vcfg, policy.model, policy.tokenizer, run_dir=run_dir, max_prompt_tokens=256,
                       model_config=ModelConfig(name_or_path=cfg.model.name_or_path, lora=None))


GEN_ROWS = ("hf", "hf-static", "vllm", "vllm-lora", "vllm-weights")
"""The generation rows: our loop (eager, and the static-shape step of ``sampling.compile: on``) and vLLM on the
base weights (the same work), and vLLM sampling a LoRA policy as a training step does, through its LoRA path or
as reloaded merged weights."""
HF_ROWS = ("hf", "hf-static")

STEP_ROWS = ("hf", "vllm-adapter", "vllm", "vllm-ahead")
"""The step rows: each engine sampling the policy just updated (vLLM by adapter and by weights), and vLLM
(weights) with ``sampling.staleness: 1`` (the next step sampled while this one updates)."""
STEP_SYNC = {"vllm-adapter": "adapter", "vllm": "weights", "vllm-ahead": "weights"}


def measure_step(model_dir: str, row: str, steps: int) -> dict:
    from benchmarks import train_step_bench as T

    engine_name = "hf" if row == "hf" else "vllm"
    with tempfile.TemporaryDirectory(prefix="rollout-bench-problems-") as tmp:
        problems = T.write_problem_file(Path(tmp) / "problems.jsonl")
        # stop strings on: the run's default (sampling.stop null = the completion stops), as a step samples
        result = T.run_ours(model_dir, str(problems), steps + 1, None, True, engine=engine_name,
                            staleness=1 if row == "vllm-ahead" else 0, sync=STEP_SYNC.get(row, "auto"))
    timed = result["steps"][1:]
    out = {"engine": row, "step_s": statistics.median(t["wall_s"] for t in timed),
           "tokens_per_s": statistics.median(t["tokens"] / t["rollout_s"] for t in timed if t.get("rollout_s"))}
    for key in ("rollout_s", "sandbox_s", "update_s", "sync_s", "wait_s", "mismatch_kl"):
        values = [t[key] for t in timed if t.get(key) is not None]
        out[key] = statistics.median(values) if values else None
    return out


def _child(kind: str, model: Path, engine: str, count: int) -> dict:
    from benchmarks.results import json_from_child

    return json_from_child([sys.executable, "-m", "benchmarks.rollout_bench", "--child", kind, "--model", str(model),
                      "--engine", engine, "--count", str(count)], f"{kind} {engine} on {model.name}",
                     tag="rollout-bench", show_stderr=False)


def markdown(gen: dict, steps: dict, args: argparse.Namespace, load: tuple[float, float]) -> str:
    title = ("## Our decoding loop on CPU: eager vs the static step" if args.hf_only else
             "## Generation engines: our loop (hf) vs vLLM")
    lines = [title, "",
             f"`python -m benchmarks.rollout_bench` on {os.cpu_count()} cores (load average "
             f"{load[0]:.1f} before, {load[1]:.1f} after; shared machine). Work per call: {PROMPTS} prompts x "
             f"{CANDIDATES} candidates x up to {MAX_NEW_TOKENS} new tokens, temperature 1, no top-k/top-p, no stop "
             f"strings; median of {args.repeats} timed calls after one untimed one. Qwen3.5 is the tiny hybrid with "
             "128-wide linear-attention heads (as in Qwen3.5-9B).", "",
             "| architecture | engine | dtype | threads | tokens/s | vs hf |", "|---|---|---|---|---|---|"]
    arch_names = {"qwen3_5": "Qwen3_5ForCausalLM (3 Gated DeltaNet : 1 full attention)",
                  "qwen3": "Qwen3ForCausalLM (dense)"}
    for arch, rows in gen.items():
        hf = rows["hf"]["tokens_per_s"]
        for name in GEN_ROWS:
            r = rows.get(name)
            if r is None:
                continue
            engine = {"hf": "hf (our loop, eager)", "hf-static": "hf, `sampling.compile: on` (static step, no graph)",
                      "vllm": f"vLLM {r.get('version')} (server), base weights",
                      "vllm-lora": f"vLLM {r.get('version')} (server), LoRA policy, `sync: adapter` (LoRA path)",
                      "vllm-weights": f"vLLM {r.get('version')} (server), LoRA policy, `sync: weights` (merged)",
                      }[name]
            lines.append(f"| {arch_names[arch]} | {engine} | {r['dtype']} | {r['threads']} | "
                         f"{r['tokens_per_s']:,.0f} | {r['tokens_per_s'] / hf:.2f}x |")
    for arch, rows in gen.items():
        if "hf-static" in rows:
            ratio = rows["hf-static"]["tokens_per_s"] / rows["hf"]["tokens_per_s"]
            lines += ["", f"{arch_names[arch]}: the static step (`sampling.compile: on`) samples at **{ratio:.2f}x** "
                          "the eager loop on CPU, so `auto` keeps the eager loop on CPU" + (
                              "." if ratio < 1 else " (it is faster here: `auto` should be revisited).")]
    if "qwen3_5" in gen and "vllm" in gen["qwen3_5"]:
        ratio = gen["qwen3_5"]["vllm"]["tokens_per_s"] / gen["qwen3_5"]["hf"]["tokens_per_s"]
        lines += ["", f"Target on the tiny Qwen3.5: vLLM >= {GEN_TARGET:.0f}x our loop's tokens/s. Measured "
                      f"**{ratio:.2f}x**: {'met' if ratio >= GEN_TARGET else 'not met'}."]
        q = gen["qwen3_5"]
        lora, merged = q.get("vllm-lora"), q.get("vllm-weights")
        if lora:
            lines[-1] += (f" Sampling a LoRA policy through vLLM's LoRA path (`vllm.sync: adapter`), vLLM runs at "
                          f"{lora['tokens_per_s'] / q['vllm']['tokens_per_s']:.0%} of its base speed here "
                          f"({lora['tokens_per_s'] / q['hf']['tokens_per_s']:.2f}x our loop)")
            if merged:
                lines[-1] += (f"; with the adapter folded into reloaded weights (`vllm.sync: weights`, the CPU "
                              f"default) at {merged['tokens_per_s'] / q['vllm']['tokens_per_s']:.0%} "
                              f"({merged['tokens_per_s'] / q['hf']['tokens_per_s']:.2f}x our loop)")
            lines[-1] += "."
    if steps:
        lines += ["", f"Whole RL step (train_step_bench's workload, sandbox and update included; median of "
                      f"{args.steps} timed steps after one):", "",
                  "| architecture | engine | step s | vs hf | rollout s | tokens/s in the step | sandbox s | update s | "
                  "waited for the rollout s | engine sync s | mismatch KL |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        labels = {"hf": "hf", "vllm-adapter": "vllm, `sync: adapter`", "vllm": "vllm, `sync: weights`",
                  "vllm-ahead": "vllm, `sync: weights`, `staleness: 1`"}
        for arch, rows in steps.items():
            for name in STEP_ROWS:
                r = rows.get(name)
                if r is None:
                    continue
                fmt = lambda v, p=2: "–" if v is None else f"{v:.{p}f}"  # noqa: E731
                kl = "–" if r.get("mismatch_kl") is None else f"{r['mismatch_kl']:.1e}"
                lines.append(f"| {arch_names[arch]} | {labels[name]} | {fmt(r['step_s'])} | "
                             f"{r['step_s'] / rows['hf']['step_s']:.2f}x | {fmt(r['rollout_s'])} | "
                             f"{fmt(r.get('tokens_per_s'), 0)} | {fmt(r['sandbox_s'])} | {fmt(r['update_s'])} | {fmt(r.get('wait_s'))} | "
                             f"{fmt(r.get('sync_s'), 3)} | {kl} |")
        if "qwen3_5" in steps:
            q = steps["qwen3_5"]
            best = min(("vllm-adapter", "vllm", "vllm-ahead"), key=lambda n: q[n]["step_s"] if n in q else math.inf)
            ratio = q[best]["step_s"] / q["hf"]["step_s"]
            lines += ["", f"Target on the tiny Qwen3.5: a vLLM step <= {STEP_TARGET}x the hf step. Measured "
                          f"**{ratio:.2f}x** ({labels[best]}): {'met' if ratio <= STEP_TARGET else 'not met'}. "
                          "(The phases overlap: executions start as each completion returns, so rollout + sandbox "
                          "can exceed the step; with `staleness: 1` the next step's rollout runs during this "
                          "step's update, and only the wait for it adds to the step.)"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arch", nargs="+", choices=("qwen3_5", "qwen3"), default=["qwen3_5", "qwen3"])
    ap.add_argument("--repeats", type=int, default=3, help="timed generation calls per engine")
    ap.add_argument("--steps", type=int, default=3, help="timed RL steps per engine (after one untimed)")
    ap.add_argument("--no-step", action="store_true", help="only the generation table")
    ap.add_argument("--no-write", action="store_true", help="do not update RESULTS.md")
    ap.add_argument("--hf-only", action="store_true",
                    help="only our loop, eager vs static step (no vLLM); writes its own RESULTS.md section")
    ap.add_argument("--child", choices=("generation", "step"), help=argparse.SUPPRESS)
    ap.add_argument("--model", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--engine", choices=GEN_ROWS + STEP_ROWS, help=argparse.SUPPRESS)
    ap.add_argument("--count", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--json-out", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        fn = measure_generation if args.child == "generation" else measure_step
        args.json_out.write_text(json.dumps(fn(str(args.model), args.engine, args.count)))
        return 0
    from training.engines.vllm_server import unavailable_reason

    if unavailable_reason() and not args.hf_only:
        raise SystemExit(unavailable_reason())
    load0 = os.getloadavg()[0]
    gen: dict = {}
    steps: dict = {}
    with tempfile.TemporaryDirectory(prefix="rollout-bench-models-") as tmp:
        for arch in args.arch:
            model = build_model(Path(tmp) / arch, arch)
            gen[arch] = {e: _child("generation", model, e, args.repeats)
                         for e in (HF_ROWS if args.hf_only else GEN_ROWS)}
            if not args.no_step and not args.hf_only:
                steps[arch] = {e: _child("step", model, e, args.steps) for e in STEP_ROWS}
    text = markdown(gen, steps, args, (load0, os.getloadavg()[0]))
    print(text)
    if not args.no_write:
        from benchmarks.results import update_section

        update_section("rollout-bench-static" if args.hf_only else "rollout-bench", text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
