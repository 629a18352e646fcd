"""GPU check: RL steps of Qwen3.5-9B's own text architecture (``Qwen3_5TextConfig`` at the 9B
dimensions: 32 layers, three Gated DeltaNet linear-attention layers to each full-attention one;
random weights, bf16, LoRA r=16) through our own training code: peak memory, generation and update
throughput, step time, sampler/trainer mismatch and the runtime block (which implementation each
special layer ran: ``fla`` or transformers' torch fallback, ``causal_conv1d`` or torch).

    python benchmarks/gpu_check.py            # on the GPU machine (one H200): well under 10 minutes
    python benchmarks/gpu_check.py --tiny     # smoke test of the same path on CPU, in about a minute

On the device machine (repository root; $OUT comes back):
    python benchmarks/gpu_check.py --json-out $OUT/gpu_check.json 2>&1 | tee $OUT/gpu_check.log;
    cp benchmarks/RESULTS.md $OUT/

Prepared for a short, prepaid GPU session (docs/design.md "GPU check"): nothing is downloaded and nothing
outside torch / transformers / peft / accelerate (+ the standard library) is needed; the sandbox uses
its process backend, which runs without bubblewrap when it is missing.

How it runs our code: ``training.trainer.train`` for ``--steps`` steps on a handful of short demo
problems, with held-out eval off. The model directory holds a locally trained tokenizer and the
config only; ``AutoModelForCausalLM.from_pretrained`` is redirected (in this process) to build that
config directly on the GPU in bf16 with weight initialisation skipped and the matrices then filled
with N(0, 0.02) on the device (the gates, decays and norms keep the values their constructors give),
so the 9B shape costs seconds instead of a 19 GB download. Everything
after that (LoRA wrap, gradient checkpointing, generate, sandbox, rewards, reference log-probs with
adapters disabled, PPO update, AdamW, events, adapter checkpoint) is the production path.

Prints one table (peak memory, generation tokens/s, update tokens/s, step seconds) and writes the
same numbers into the ``gpu-check`` section of RESULTS.md (``--no-write`` to skip).

``--rows`` runs the measured rows instead (benchmarks/gpu_check_rows.py: eager vs compiled decoding, fla vs
the torch fallback, three step shapes, each row this script in a process of its own with its own time limit).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

DEMO_PROBLEMS = ROOT / "data" / "demo" / "problems.jsonl"

# Qwen3.5-9B's text stack (Qwen3_5TextConfig): 32 layers, three linear-attention layers to each
# full-attention one, hidden 4096, 16 query heads of 256, 4 KV heads, linear attention 16 key / 32
# value heads of 128 with a conv kernel of 4, MLP 12288, vocabulary 248,320, untied embeddings, rotary
# on a quarter of each head (interleaved mrope sections 11/11/10 over its 64 dims).
SHAPE_9B = dict(hidden_size=4096, intermediate_size=12288, num_hidden_layers=32, num_attention_heads=16,
                num_key_value_heads=4, head_dim=256, linear_num_key_heads=16, linear_num_value_heads=32,
                linear_key_head_dim=128, linear_value_head_dim=128, linear_conv_kernel_dim=4,
                vocab_size=248320, max_position_embeddings=8192, tie_word_embeddings=False,
                rope_parameters={"rope_type": "default", "rope_theta": 10_000_000.0, "partial_rotary_factor": 0.25,
                                 "mrope_section": [11, 11, 10], "mrope_interleaved": True})
# Same architecture and code path, CPU-sized (4 layers: 3 linear + 1 full): only the sizes differ.
# Vocabulary larger than the tokenizer's on purpose (like a random 9B model, it samples ids the
# tokenizer has never seen).
SHAPE_TINY = {**SHAPE_9B, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4,
              "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "linear_num_key_heads": 2,
              "linear_num_value_heads": 4, "linear_key_head_dim": 16, "linear_value_head_dim": 16,
              "vocab_size": 4096, "max_position_embeddings": 1024,
              "rope_parameters": {**SHAPE_9B["rope_parameters"], "rope_theta": 10_000.0, "mrope_section": [1, 1, 0]}}


# --tiny --engine vllm: vLLM's CPU gated-delta-rule kernel takes only 128-wide linear-attention heads,
# its attention 32-wide ones, and its detokenizer only ids the tokenizer knows (vocab_size None: the
# tokenizer's size).
SHAPE_TINY_WIDE = {**SHAPE_TINY, "hidden_size": 128, "head_dim": 32, "linear_num_key_heads": 1,
                   "linear_num_value_heads": 2, "linear_key_head_dim": 128, "linear_value_head_dim": 128,
                   "vocab_size": None, "rope_parameters": {**SHAPE_TINY["rope_parameters"], "mrope_section": [2, 1, 1]}}


def engine_for(requested: str) -> tuple[str, str]:
    """(engine to measure, what to report about it). ``vllm`` only where this machine has it: the
    environment ``CRUCIBLE_VLLM_PYTHON`` names, ``.venv-vllm``, or this interpreter when it imports vllm
    (the GPU machine's own install); otherwise the ``hf`` engine, saying why."""
    if requested == "hf":
        return "hf", "hf (our decoding loop)"
    import importlib.util

    from training.engines.vllm_server import PYTHON_ENV, unavailable_reason

    if unavailable_reason() and not os.environ.get(PYTHON_ENV) and importlib.util.find_spec("vllm"):
        os.environ[PYTHON_ENV] = sys.executable
    reason = unavailable_reason()
    if reason:
        return "hf", f"hf: vLLM is not on this machine ({reason.split(';')[0]})"
    return "vllm", f"vllm (server from {os.environ.get(PYTHON_ENV) or '.venv-vllm'})"


def log(msg: str) -> None:
    print(f"[gpu-check {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def write_problem_file(out: Path, n: int) -> Path:
    rows = [json.loads(line) for line in DEMO_PROBLEMS.read_text().splitlines() if line.strip()]
    train = [r for r in rows if r.get("split", "train") == "train"][:n]
    out.write_text("".join(json.dumps({**r, "split": "train"}) + "\n" for r in train))
    return out


def prepare_model_dir(out: Path, shape: dict) -> Path:
    """A model directory with a local byte-level BPE tokenizer and a Qwen3.5 text config (no weights)."""
    from transformers import Qwen3_5TextConfig

    from training.tiny_model import PYTHON_SNIPPETS, train_tokenizer

    texts = [PYTHON_SNIPPETS] + [json.loads(line).get("reference_solution") or ""
                                 for line in DEMO_PROBLEMS.read_text().splitlines() if line.strip()]
    tokenizer = train_tokenizer(texts)
    eos = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    shape = {**shape, "vocab_size": shape["vocab_size"] or len(tokenizer)}
    config = Qwen3_5TextConfig(**shape, bos_token_id=None, eos_token_id=eos, pad_token_id=eos, use_cache=True)
    config.architectures = ["Qwen3_5ForCausalLM"]
    out.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(out)
    config.save_pretrained(out)
    return out


def _no_init():
    for where in ("transformers.initialization", "transformers.modeling_utils"):
        try:
            module = __import__(where, fromlist=["no_init_weights"])
            return module.no_init_weights()
        except (ImportError, AttributeError):
            continue
    return contextlib.nullcontext()


def random_model(config, device: str, dtype):
    """Build ``config`` on ``device`` in ``dtype``, skipping the slow init, then fill the matrices with
    N(0, 0.02) there. Vectors (norm weights, the linear-attention decay ``A_log`` and ``dt_bias``) keep
    what the constructors set: the init functions skipped are those of the matrices."""
    import torch
    from transformers import AutoModelForCausalLM

    t0 = time.perf_counter()
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device), _no_init():
            model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    finally:
        torch.set_default_dtype(previous)
    gen = torch.Generator(device=device).manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:  # projections, embeddings, conv taps
                p.normal_(0.0, 0.02, generator=gen)
    model.eval()
    n = sum(p.numel() for p in model.parameters())
    log(f"built {n / 1e6:,.1f}M-parameter model on {device} in {dtype} in {time.perf_counter() - t0:.1f} s")
    return model


@contextlib.contextmanager
def redirected_from_pretrained(device: str, dtype):
    """``AutoModelForCausalLM.from_pretrained(dir)`` -> a random model of that dir's config, on ``device``."""
    import transformers
    from transformers import AutoConfig

    auto = transformers.AutoModelForCausalLM
    original = auto.__dict__.get("from_pretrained")  # None when inherited (older transformers)

    def from_pretrained(cls, name_or_path, *args, **kwargs):
        return random_model(AutoConfig.from_pretrained(name_or_path), device, dtype)

    auto.from_pretrained = classmethod(from_pretrained)
    try:
        yield
    finally:
        if original is None:
            del auto.from_pretrained
        else:
            auto.from_pretrained = original


FAST_KERNEL_MODULES = ("fla", "causal_conv1d")
"""What transformers imports for Qwen3.5's fast linear-attention kernels (flash-linear-attention, causal-conv1d)."""


def block_fast_kernels() -> None:
    """``--kernels torch``: make the fast kernels' packages unimportable, so transformers' Qwen3.5 module binds its
    torch fallbacks when it is imported. Takes effect only before that import, i.e. in a fresh process (the
    ``--rows`` children); the runtime block then reports what each layer ran."""
    for name in FAST_KERNEL_MODULES:
        sys.modules[name] = None  # type: ignore[assignment]  # `import fla` now raises ImportError


def run(args: argparse.Namespace) -> dict:
    if getattr(args, "kernels", "installed") == "torch":
        block_fast_kernels()
    import torch

    from sandbox import Runner
    from training.config import config_from_dict
    from training.trainer import train

    cuda = torch.cuda.is_available() and not args.tiny
    if not cuda and not args.tiny:
        raise SystemExit("no CUDA device: run on the GPU machine, or pass --tiny for the CPU smoke test")
    device = "cuda" if cuda else "cpu"
    dtype = torch.bfloat16 if cuda else torch.float32
    engine, engine_note = engine_for(args.engine)
    shape = SHAPE_9B if not args.tiny else (SHAPE_TINY_WIDE if engine == "vllm" else SHAPE_TINY)
    facts = {"device": torch.cuda.get_device_name(0) if cuda else f"CPU ({os.cpu_count()} cores)",
             "python": platform.python_version(), "torch": torch.__version__}
    for mod in ("transformers", "peft", "accelerate"):
        facts[mod] = __import__(mod).__version__
    staleness = args.staleness if engine == "vllm" else 0
    facts["engine"] = engine_note + (", sampling ahead (`sampling.staleness: 1`: the next step generated while "
                                     "this one updates)" if staleness else "")
    if engine == "vllm":
        facts["engine"] += f", `vllm.sync: {args.sync}`"
    log("environment: " + ", ".join(f"{k} {v}" for k, v in facts.items()))

    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        tmp_path = Path(tmp)
        model_dir = prepare_model_dir(tmp_path / "model", shape)
        if engine == "vllm":  # the server loads weights from disk: write the random ones the trainer loads too
            from transformers import AutoConfig

            t0 = time.perf_counter()
            random_model(AutoConfig.from_pretrained(model_dir), device, dtype).save_pretrained(model_dir)
            log(f"wrote the random weights for the vLLM server in {time.perf_counter() - t0:.1f} s")
        problems = write_problem_file(tmp_path / "problems.jsonl", args.prompts)
        cfg = config_from_dict({
            "model": {"name_or_path": str(model_dir), "dtype": "bfloat16" if cuda else "float32",
                      "gradient_checkpointing": not args.no_checkpointing,
                      "lora": {"r": 16, "alpha": 32, "dropout": 0.0, "target_modules": "all-linear"}},
            "problems": str(problems),
            "sampling": {"problems_per_step": args.prompts, "candidates_per_problem": args.candidates,
                         "max_new_tokens": args.max_new_tokens, "temperature": 1.0, "top_p": 1.0, "top_k": 0,
                         "prompt_style": "completion", "stop": [], "engine": engine,
                         "staleness": staleness, "compile": getattr(args, "compile", "auto")},
            "vllm": {"gpu_memory_utilization": 0.35, "sync": args.sync},
            "ppo": {"learning_rate": 1e-5, "kl_coef": 0.04, "micro_batch_size": args.micro_batch},
            "train": {"steps": args.steps, "seed": 0, "eval_every": 0, "checkpoint_every": 0},
            "sandbox": {"backend": "process", "workers": 4},
        })
        runner = Runner(backend="process", workers=4, mode="warm")  # bubblewrap or, without it, rlimits
        runner_kind = f"sandbox process backend ({runner.isolation})"
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        try:
            loading = redirected_from_pretrained(device, dtype) if engine == "hf" else contextlib.nullcontext()
            with loading:
                status = train(cfg, tmp_path / "run", runner=runner, progress=True)
        finally:
            runner.close()
        total_s = time.perf_counter() - t0
        from training.events import read_events  # lines split at \n only (str.splitlines also splits at U+2028)

        events = read_events(tmp_path / "run" / "events.jsonl")
        prompt_tokens = _prompt_tokens(model_dir, problems)
    steps = [e["metrics"] for e in events if e["event"] == "step"]
    if status != "succeeded" or not steps:
        done = next((e for e in events if e["event"] == "done"), {})
        raise SystemExit(f"training run ended {status}: {done.get('error')}")
    peak = torch.cuda.max_memory_allocated() / 2**30 if cuda else None
    reserved = torch.cuda.max_memory_reserved() / 2**30 if cuda else None
    timed = steps[1:] if len(steps) > 1 else steps  # step 1 warms kernels and the allocator up
    n_cand = args.prompts * args.candidates
    rows = []
    for m in timed:
        gen_tokens = m["tokens_per_s"] * m["time/rollout_s"]
        update_tokens = n_cand * (prompt_tokens + m["completion_len/mean"])
        rows.append({"step_s": m["time/step_s"], "gen_tok_s": m["tokens_per_s"], "gen_tokens": gen_tokens,
                     "update_s": m["time/update_s"], "update_tok_s": update_tokens / max(m["time/update_s"], 1e-9),
                     "rollout_s": m["time/rollout_s"], "sandbox_s": m["time/sandbox_s"],
                     "mismatch_kl": m["rollout/mismatch_kl"], "logprob_diff_max": m["rollout/logprob_diff_max"],
                     "wait_s": m.get("time/wait_s", 0.0), "staleness": m.get("rollout/staleness", 0.0)})
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    runtime = next(e for e in events if e["event"] == "start")["runtime"]
    return {"facts": facts, "shape": shape, "tiny": args.tiny, "runner": runner_kind, "peak_gib": peak,
            "runtime": runtime, "sampling": runtime.get("sampling"),
            "reserved_gib": reserved, "first_step_s": steps[0]["time/step_s"], "median": med,
            "timed_steps": len(rows), "total_s": total_s, "args": vars(args), "prompt_tokens": prompt_tokens}


def _prompt_tokens(model_dir: Path, problems: Path) -> float:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    prompts = [json.loads(line)["prompt"] for line in problems.read_text().splitlines() if line.strip()]
    return statistics.mean(len(tok(p)["input_ids"]) for p in prompts)


def table(r: dict) -> str:
    m, a = r["median"], r["args"]
    shape = r["shape"]
    params = "Qwen3.5-9B-shaped" if not r["tiny"] else "tiny (smoke test)"
    rt = r["runtime"]
    layers = " + ".join(f"{n} {t.replace('_', ' ')}" for t, n in rt["layer_types"].items())
    head = (f"{params} `{rt['architecture']}`: {shape['num_hidden_layers']} layers ({layers}), hidden "
            f"{shape['hidden_size']}, {shape['num_attention_heads']} heads × {shape['head_dim']}, "
            f"{shape['num_key_value_heads']} KV heads, linear attention {shape['linear_num_key_heads']} key / "
            f"{shape['linear_num_value_heads']} value heads × {shape['linear_key_head_dim']}, "
            f"MLP {shape['intermediate_size']}, vocab {shape['vocab_size']}; random weights, "
            f"{'bf16' if not r['tiny'] else 'fp32'}, LoRA r=16 all-linear, gradient checkpointing "
            f"{'off' if a['no_checkpointing'] else 'on'}. Step: {a['prompts']} prompts × {a['candidates']} candidates, "
            f"≤{a['max_new_tokens']} new tokens (no stop strings; ~{r['prompt_tokens']:.0f}-token prompts), "
            f"KL 0.04, micro-batch {a['micro_batch']}, sandbox: {r['runner']}.")
    peak = f"{r['peak_gib']:.1f} GiB (reserved {r['reserved_gib']:.1f})" if r["peak_gib"] is not None else "n/a (CPU)"
    lines = [
        head, "",
        f"Device: {r['facts']['device']}; Python {r['facts']['python']}, torch {r['facts']['torch']}, "
        f"transformers {r['facts']['transformers']}, peft {r['facts']['peft']}, accelerate {r['facts']['accelerate']}; "
        f"generation engine {r['facts'].get('engine', 'hf')}; "
        f"{time.strftime('%Y-%m-%d %H:%M')}. Median of {r['timed_steps']} step(s) after a warm-up step "
        f"({r['first_step_s']:.1f} s); whole script {r['total_s']:.0f} s after imports.",
        "",
        "Kernels measured: " + ", ".join(f"{k} `{v}`" for k, v in rt["kernels"].items())
        + (" — " + "; ".join(rt["warnings"]) if rt["warnings"] else "") + ".",
        "",
        "| peak GPU memory | generation tokens/s | update tokens/s | step s | generate s | update s | "
        "mismatch KL | max abs Δ log-prob |",
        "|---|---|---|---|---|---|---|---|",
        f"| {peak} | {m['gen_tok_s']:.0f} | {m['update_tok_s']:.0f} | {m['step_s']:.1f} | {m['rollout_s']:.1f} | "
        f"{m['update_s']:.1f} | {m['mismatch_kl']:.2e} | {m['logprob_diff_max']:.3f} |",
        "",
        "Mismatch: sampler vs trainer log-probs of the sampled tokens under the same weights "
        "(`rollout/mismatch_kl`, mean per-token k3; `rollout/logprob_diff_max`).",
        "",
        "Update tokens/s counts prompt + completion tokens of every candidate through the reference forward, the "
        "policy forward/backward and the optimizer step (`time/update_s`).",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tiny", action="store_true", help="CPU smoke test with a tiny model of the same code path")
    ap.add_argument("--engine", choices=("hf", "vllm"), default="hf",
                    help="generation engine; vllm only where the machine has it (else hf, and the table says why)")
    ap.add_argument("--staleness", type=int, choices=(0, 1), default=0,
                    help="with --engine vllm: 1 samples the next step while this one updates (sampling.staleness)")
    ap.add_argument("--sync", choices=("auto", "adapter", "weights"), default="auto",
                    help="with --engine vllm: how the server gets the policy each step (vllm.sync; auto = adapter "
                         "on a GPU)")
    ap.add_argument("--prompts", type=int, default=8, help="problems per step")
    ap.add_argument("--candidates", type=int, default=4, help="candidates per problem")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--micro-batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=3, help="RL steps (the first one is the warm-up)")
    ap.add_argument("--no-checkpointing", action="store_true", help="gradient checkpointing off")
    ap.add_argument("--compile", choices=("auto", "on", "off"), default="auto",
                    help="sampling.compile: the hf engine's compiled decode step (start.runtime.sampling: what ran)")
    ap.add_argument("--kernels", choices=("installed", "torch"), default="installed",
                    help="installed: whatever fast kernels transformers finds (fla, causal-conv1d); torch: their "
                         "torch fallbacks (takes effect in a fresh process)")
    ap.add_argument("--rows", action="store_true",
                    help="the measured rows (benchmarks/gpu_check_rows.py): eager vs compiled, fla vs torch, at "
                         "8x4x128, 16x8x256 and 32x8x512, each in its own process with its own time limit")
    ap.add_argument("--no-write", action="store_true", help="do not update RESULTS.md")
    ap.add_argument("--json-out", type=Path, default=None, help="also write the raw numbers as JSON here")
    argv = sys.argv[1:] if argv is None else argv
    if "--rows" in argv:  # its own options (lists of compile modes and kernel sets)
        from benchmarks import gpu_check_rows

        return gpu_check_rows.main(argv)
    args = ap.parse_args(argv)
    if args.tiny:
        import torch

        torch.set_num_threads(1)
    try:
        result = run(args)
    except SystemExit:
        raise
    except Exception:
        traceback.print_exc()
        return 1
    text = ("## GPU check\n\n" if not args.tiny else "## GPU check (CPU smoke test only: `--tiny`)\n\n") + table(result)
    print(text)
    if args.json_out:
        args.json_out.write_text(json.dumps(result, indent=2, default=str))  # args hold Paths
    if not args.no_write:
        from benchmarks.results import update_section

        update_section("gpu-check", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
