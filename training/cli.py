"""``python -m training {run,eval,probe,tiny-model,schema,export}``.

Bad input (a config value, a missing model path, a problem file with errors) is reported as one line
``error: ...`` on stderr with exit status 2 and no traceback. Heavy imports (torch, transformers)
happen inside the commands, so ``schema`` and ``--help`` are instant.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Any, Iterator, Sequence


class UsageError(Exception):
    """Bad input from the user: printed as one line, exit status 2."""


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    from sandbox.remote import RemoteUnavailable
    from training.config import ConfigError

    # Our own progress line is the one on stderr: no per-file "Loading weights" bars from transformers
    # (a 9B checkpoint prints dozens, and the web app stores stderr as the run's log tail).
    # (transformers follows huggingface_hub's switch, read when it is first imported.)
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    try:
        return int(args.func(args) or 0)
    except (UsageError, ConfigError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except RemoteUnavailable as e:  # sandbox.endpoints: every replica gone; the message names each one
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m training",
                                description="Crucible: RL on code LLMs with execution rewards.")
    sub = p.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="train: sample -> sandbox -> reward -> PPO, events to RUN_DIR/events.jsonl")
    run.add_argument("--config", type=Path, help="run config YAML (optional with --resume: RUN_DIR/config.yaml)")
    run.add_argument("--out", type=Path, required=True, help="run directory (events.jsonl, checkpoints/)")
    run.add_argument("--resume", action="store_true", help="continue from the run directory's last checkpoint")
    run.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                     help="override a config value, e.g. --set ppo.learning_rate=1e-5 (repeatable; YAML values)")
    run.add_argument("--stop-file", type=Path, help="stop cooperatively when this file appears (default RUN_DIR/STOP)")
    run.add_argument("--no-progress", action="store_true", help="no progress line on stderr")
    run.add_argument("--threads", type=int, default=None,
                     help="torch CPU threads for the whole run (default on CPU: every core while the sandbox is "
                          "idle, cores minus sandbox workers while it executes)")
    run.set_defaults(func=cmd_run)

    ev = sub.add_parser("eval", help="pass@k of a model (optionally + LoRA adapter) on a problem split")
    ev.add_argument("--model", required=True, help="hub id or local model directory")
    ev.add_argument("--adapter", action="append", default=[],
                    help="PEFT adapter directory to apply on top of --model (repeatable: merged in order)")
    ev_source = ev.add_mutually_exclusive_group(required=True)
    ev_source.add_argument("--problems", type=Path, help="problem file (any importable format)")
    ev_source.add_argument("--suite", help="a benchmark suite shipped offline by a package: humaneval, or "
                                           "humaneval:N for its first N problems (training/suites.py)")
    ev.add_argument("--split", default="heldout", choices=("heldout", "train", "all"),
                    help="problems of --problems to evaluate (a --suite is all held-out)")
    ev.add_argument("--out", type=Path, help="also write one JSON line per problem as it finishes, then "
                                             "{\"summary\": ...} (the report without per_problem)")
    ev.add_argument("--record", action="store_true",
                    help="--out lines carry each problem's samples (code, reward, execution result)")
    ev.add_argument("--no-progress", action="store_true", help="no progress lines on stderr")
    ev.add_argument("--samples", type=int, default=8, help="completions per problem (n of pass@k)")
    ev.add_argument("--k", default=None, help="comma-separated k values, each <= samples (default 1,2,4,..)")
    ev.add_argument("--config", type=Path, help="take sampling settings from this run config")
    ev.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="override a config value (sampling.*, sandbox.*, model.dtype)")
    ev.add_argument("--seed", type=int, default=0, help="sampling seed")
    ev.add_argument("--per-problem", action="store_true", help="include per-problem counts in the output")
    ev.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    ev.set_defaults(func=cmd_eval)

    pr = sub.add_parser("probe", help="difficulty probe: each problem's pass rate over N samples, as JSON lines")
    pr.add_argument("--model", required=True, help="hub id or local model directory")
    pr.add_argument("--adapter", dest="adapters", action="append", default=[], metavar="A",
                    help="PEFT adapter directory merged into --model (repeatable: applied in order)")
    pr.add_argument("--problems", type=Path, required=True, help="problem file (any importable format)")
    pr.add_argument("--split", default="train", choices=("train", "heldout", "all"),
                    help="problems to probe (default train: the ones a run's difficulty filter drops)")
    pr.add_argument("--samples", type=int, required=True, help="candidates sampled per problem")
    pr.add_argument("--out", type=Path, help="also write the lines to this file (as each problem finishes)")
    pr.add_argument("--config", type=Path, help="take sampling, sandbox and dtype settings from this run config")
    pr.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="override a config value (sampling.*, sandbox.*, model.dtype)")
    pr.add_argument("--seed", type=int, default=0, help="sampling seed")
    pr.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    pr.add_argument("--no-progress", action="store_true", help="no progress lines on stderr")
    pr.set_defaults(func=cmd_probe)

    tiny = sub.add_parser("tiny-model", help="build the ~1M-parameter Qwen demo model offline")
    tiny.add_argument("--out", type=Path, required=True, help="output directory (Hugging Face format)")
    tiny.add_argument("--arch", default="qwen3", choices=("qwen3", "qwen3_5"),
                      help="qwen3: dense Qwen3 (default); qwen3_5: Qwen3.5's hybrid linear/full-attention text stack")
    tiny.add_argument("--linear-head-dim", type=int, default=32, choices=(32, 128),
                      help="qwen3_5: width of the linear-attention heads (128 as in Qwen3.5-9B, which vLLM's CPU "
                           "kernel needs; default 32)")
    tiny.add_argument("--warmup-problems", type=Path, help="warm-start on this problem file's train split")
    tiny.add_argument("--warmup-steps", type=int, default=400, help="supervised warm-up steps (default 400)")
    tiny.add_argument("--seed", type=int, default=0)
    tiny.add_argument("--threads", type=int, default=1,
                      help="torch CPU threads (default 1: fastest on a small, shared CPU)")
    tiny.add_argument("--measure", type=int, default=0, metavar="N",
                      help="afterwards, sample N completions per problem and print train/heldout pass@1")
    tiny.set_defaults(func=cmd_tiny_model)

    schema = sub.add_parser("schema", help="print the JSON Schema of the run config")
    schema.set_defaults(func=cmd_schema)

    export = sub.add_parser("export", help="merge a LoRA adapter (e.g. RUN_DIR/checkpoints/step-N) into a full model")
    export.add_argument("--adapter", type=Path, required=True, help="PEFT adapter directory")
    export.add_argument("--out", type=Path, required=True, help="output directory (safetensors + config + tokenizer)")
    export.add_argument("--base", help="base model (default: the adapter's recorded base_model_name_or_path)")
    export.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    export.set_defaults(func=cmd_export)
    return p


# --------------------------------------------------------------------------------------------------


def _set_threads(n: int | None) -> None:
    if n is not None:
        if n < 1:
            raise UsageError(f"--threads must be >= 1, got {n}")
        import torch

        torch.set_num_threads(n)


def check_model_path(name_or_path: str) -> None:
    """A local-looking path must exist; ``org/name`` (one slash, no leading ./ or /) may be a hub id."""
    if Path(name_or_path).expanduser().exists():
        return
    looks_local = (name_or_path.startswith((".", "/", "~")) or name_or_path.count("/") != 1
                   or os.sep != "/" and os.sep in name_or_path)
    if looks_local:
        hint = " (build the demo model with: python -m training tiny-model --out DIR --warmup-problems " \
               "data/demo/problems.jsonl)" if "tiny" in name_or_path else ""
        raise UsageError(f"model.name_or_path: model path not found: {name_or_path}{hint}")


def check_sandbox_backend(name: str) -> None:
    """Refuse a backend that cannot run here before the model loads (it would fail at the first execution)."""
    from sandbox.backends import unavailable_reason

    reason = unavailable_reason(name)
    if reason is not None:
        raise UsageError(f"sandbox.backend: {name} is not available on this machine: {reason}")


def check_adapter_paths(adapters: tuple[str, ...]) -> None:
    for adapter in adapters:
        if not (Path(adapter).expanduser() / "adapter_config.json").is_file():
            raise UsageError(f"model.adapters: no adapter_config.json in {adapter} (expected a PEFT adapter directory)")


def _config_from_args(args: argparse.Namespace) -> Any:
    """The run config of ``--config`` (optional) with ``--set`` overrides, for commands that sample."""
    from training.config import apply_overrides, config_from_dict, load_config

    return load_config(args.config, args.overrides) if args.config else config_from_dict(
        apply_overrides({}, args.overrides))


def _problems_of_split(args: argparse.Namespace) -> list[Any]:
    """The problems of ``--problems`` in ``--split`` (train | heldout | all), less those marked ``excluded`` (a
    web app export's: runs and probes skip them); none is a usage error."""
    problems = [p for p in load_problems_or_fail(args.problems) if not p.excluded]
    if args.split != "all":
        problems = [p for p in problems if p.split == args.split]
    if not problems:
        raise UsageError(f"--split {args.split}: {args.problems} has no problems in that split")
    return problems


def load_problems_or_fail(path: str | Path) -> list[Any]:
    from training.tiny_model import load_problem_file

    try:
        return load_problem_file(path)
    except FileNotFoundError:
        raise UsageError(f"problems: problem file not found: {path}") from None
    except ValueError as e:  # names the line and the field
        raise UsageError(f"problems: {e}") from None
    except OSError as e:
        raise UsageError(f"problems: cannot read {path}: {e.strerror or e}") from None


def _config_for_run(args: argparse.Namespace) -> Any:
    from training.config import load_config

    path = args.config
    if path is None:
        if not args.resume:
            raise UsageError("--config is required (it may only be left out with --resume)")
        path = args.out / "config.yaml"
        if not path.exists():
            raise UsageError(f"--resume without --config needs {path}; pass --config")
    return load_config(path, args.overrides)


def cmd_run(args: argparse.Namespace) -> int:
    from training.config import save_config

    cfg = _config_for_run(args)
    check_model_path(cfg.model.name_or_path)
    check_adapter_paths(cfg.model.adapters)
    check_sandbox_backend(cfg.sandbox.backend)
    train_problems = [p for p in load_problems_or_fail(cfg.problems) if p.split == "train" and not p.excluded]
    if not train_problems:
        raise UsageError(f"problems: {cfg.problems} has no problem with split 'train' to train on (problems "
                         "marked excluded are skipped)")
    from training.difficulty import DifficultyError, filter_train_problems

    try:  # fail before the model loads: a bad probe file, or rules that leave nothing to train on
        filter_train_problems(train_problems, cfg.difficulty, str(cfg.problems))
    except DifficultyError as e:
        raise UsageError(str(e)) from None
    if args.resume and not args.out.exists():
        raise UsageError(f"--resume: run directory not found: {args.out}")
    from training.kernels import KernelRefused
    from training.cores import PhaseThreads
    from training.policy import ModelLoadError
    from training.trainer import train

    # --threads pins torch's threads for the whole run; by default they follow the phases of a step
    # (every core while the sandbox is idle, the cores its workers leave while it runs).
    _set_threads(args.threads)
    phase_threads = None if args.threads is not None else PhaseThreads.for_cpu(cfg.sandbox.workers)
    if phase_threads is not None:
        phase_threads.busy()
    args.out.mkdir(parents=True, exist_ok=True)
    save_config(cfg, args.out / "config.yaml")

    try:
        status = train(cfg, args.out, resume=args.resume, stop_file=args.stop_file,
                       progress=not args.no_progress, phase_threads=phase_threads)
    except (ModelLoadError, KernelRefused) as e:  # bad input or kernels: `done` (failed, this message) is written
        raise UsageError(str(e)) from None
    print(json.dumps({"status": status, "out": str(args.out), **_done_warnings(args.out / "events.jsonl")}))
    return 0 if status in ("succeeded", "cancelled") else 1


def _done_warnings(events_path: Path) -> dict:
    """``{"warnings": [...]}`` when the run's last ``done`` event lists divergence warnings, else ``{}``."""
    from training.events import read_events

    if not events_path.exists():  # another process of a multi-GPU launch writes the events
        return {}
    done = next((e for e in reversed(read_events(events_path)) if e.get("event") == "done"), {})
    return {"warnings": done["warnings"]} if done.get("warnings") else {}


def _parse_ks(text: str | None, samples: int) -> list[int] | None:
    if text is None:
        return None
    try:
        ks = sorted({int(k) for k in text.split(",") if k.strip()})
    except ValueError:
        raise UsageError(f"--k must be comma-separated integers such as 1,4; got {text!r}") from None
    bad = [k for k in ks if not 1 <= k <= samples]
    if not ks or bad:
        raise UsageError(f"--k values must be between 1 and --samples ({samples}); got {text!r}")
    return ks


def cmd_eval(args: argparse.Namespace) -> int:
    import time

    if args.samples < 1:
        raise UsageError(f"--samples must be >= 1, got {args.samples}")
    ks = _parse_ks(args.k, args.samples)
    cfg = _config_from_args(args)
    check_model_path(args.model)
    for adapter in args.adapter:
        if not Path(adapter).is_dir():
            raise UsageError(f"--adapter: adapter directory not found: {adapter}")
    if args.suite is not None:
        from training.suites import SuiteError, load_suite

        try:
            problems = load_suite(args.suite)
        except SuiteError as e:
            raise UsageError(f"--suite: {e}") from None
    else:
        problems = _problems_of_split(args)
    out = _open_out(args.out)
    _set_threads(args.threads)

    from sandbox.remote import make_runner
    from training.evaluation import evaluate

    from training.config import ModelConfig

    if len(args.adapter) > 1:  # a checkpoint of a run that started from another run's checkpoint: merged, in order
        import torch

        from training.kernels import KernelRefused
        from training.policy import ModelLoadError, load_policy

        try:
            policy = load_policy(ModelConfig(name_or_path=args.model, dtype=cfg.model.dtype, lora=None,
                                             adapters=tuple(args.adapter)),
                                 device="cuda" if torch.cuda.is_available() else None, kl_coef=0.0)
        except (ModelLoadError, KernelRefused) as e:
            raise UsageError(str(e)) from None
        model, tokenizer = policy.model, policy.tokenizer
    else:
        model, tokenizer = load_model(args.model, args.adapter[0] if args.adapter else None, cfg.model.dtype)
    started, done = time.monotonic(), 0

    def on_problem(problem_id: str, entry: dict) -> None:
        nonlocal done
        done += 1
        if out is not None:
            out.write(json.dumps({"problem_id": problem_id, **entry}) + "\n")
            out.flush()
        if not args.no_progress:
            elapsed = time.monotonic() - started
            print(f"eval {done}/{len(problems)} problems | {elapsed:.1f} s | "
                  f"ETA {elapsed / done * (len(problems) - done):.0f} s", file=sys.stderr, flush=True)

    try:
        with _sampler(cfg, model, tokenizer, ModelConfig(name_or_path=args.model, lora=None), problems) as sampler, \
                make_runner(endpoints=cfg.sandbox.endpoints, backend=cfg.sandbox.backend, workers=cfg.sandbox.workers,
                            mode=cfg.sandbox.mode, timeout_s=cfg.sandbox.timeout_s,
                            memory_mb=cfg.sandbox.memory_mb) as runner:
            report = evaluate(sampler, tokenizer, problems, cfg.sampling, samples=args.samples, ks=ks, runner=runner,
                              generator_seed=args.seed, feedback=cfg.feedback, on_problem=on_problem,
                              record=args.record and out is not None)
        for entry in report["per_problem"].values():
            entry.pop("candidates", None)  # they went to --out
        if not args.per_problem:
            report.pop("per_problem", None)
        report.update(model=args.model, adapter=(args.adapter[0] if len(args.adapter) == 1 else args.adapter or None),
                      split="heldout" if args.suite else args.split, seed=args.seed)
        if args.suite is not None:
            report["suite"] = args.suite
        if out is not None:
            out.write(json.dumps({"summary": {k: v for k, v in report.items() if k != "per_problem"}}) + "\n")
    finally:
        if out is not None:
            out.close()
    print(json.dumps(report))
    return 0


def _open_out(path: Path | None):
    """``--out`` opened for writing (parents made), or None; a usage error naming it when it cannot be."""
    if path is None:
        return None
    if path.is_dir():
        raise UsageError(f"--out {path} is a directory; give a file path such as {path / 'eval.jsonl'}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return open(path, "w", encoding="utf-8")
    except OSError as e:
        raise UsageError(f"--out: cannot write {path}: {e.strerror or e}") from None


def cmd_probe(args: argparse.Namespace) -> int:
    import time

    from training.config import ModelConfig
    from training.difficulty import summarize

    if args.samples < 1:
        raise UsageError(f"--samples must be >= 1, got {args.samples}")
    cfg = _config_from_args(args)
    check_model_path(args.model)
    for adapter in args.adapters:
        if not (Path(adapter).expanduser() / "adapter_config.json").is_file():
            raise UsageError(f"--adapter {adapter}: no adapter_config.json there (expected a PEFT adapter directory)")
    problems = _problems_of_split(args)
    out = None
    if args.out is not None:
        if args.out.is_dir():
            raise UsageError(f"--out {args.out} is a directory; give a file path such as {args.out / 'probe.jsonl'}")
        try:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            out = open(args.out, "w", encoding="utf-8")
        except OSError as e:
            raise UsageError(f"--out: cannot write {args.out}: {e.strerror or e}") from None
    _set_threads(args.threads)

    import torch

    from sandbox.remote import make_runner
    from training.kernels import KernelRefused
    from training.policy import ModelLoadError, load_policy
    from training.probe import probe

    model_config = ModelConfig(name_or_path=args.model, dtype=cfg.model.dtype, lora=None,
                               adapters=tuple(args.adapters))
    try:
        # As training loads it (adapters merged, left-padding tokenizer), with no reference copy.
        policy = load_policy(model_config, device="cuda" if torch.cuda.is_available() else None, kl_coef=0.0)
    except (ModelLoadError, KernelRefused) as e:
        raise UsageError(str(e)) from None
    started = time.monotonic()

    def progress(done: int, total: int) -> None:
        if not args.no_progress:
            elapsed = time.monotonic() - started
            eta = elapsed / done * (total - done)
            print(f"probe {done}/{total} problems | {elapsed:.1f} s | ETA {eta:.0f} s", file=sys.stderr, flush=True)

    def emit(obj: dict) -> None:
        line = json.dumps(obj)
        print(line, flush=True)
        if out is not None:
            out.write(line + "\n")
            out.flush()

    results = []
    try:
        with _sampler(cfg, policy.model, policy.tokenizer, model_config, problems) as sampler, \
                make_runner(endpoints=cfg.sandbox.endpoints, backend=cfg.sandbox.backend,
                            workers=cfg.sandbox.workers, mode=cfg.sandbox.mode, timeout_s=cfg.sandbox.timeout_s,
                            memory_mb=cfg.sandbox.memory_mb) as runner:
            for result in probe(sampler, policy.tokenizer, problems, cfg.sampling, runner, samples=args.samples,
                                seed=args.seed, timeout_s=cfg.sandbox.timeout_s, feedback=cfg.feedback,
                                progress=progress):
                results.append(result)
                emit(result.to_dict())
        emit({"summary": summarize(results, samples=args.samples, split=args.split, model=args.model,
                                   adapters=list(args.adapters))})
    finally:
        if out is not None:
            out.close()
    return 0


@contextlib.contextmanager
def _sampler(cfg: Any, model: Any, tokenizer: Any, model_config: Any, problems: Sequence[Any]) -> Iterator[Any]:
    """What eval and probe sample with: ``model`` itself (engine hf), or a vLLM server started for this
    command (engine vllm; its log in a temporary directory, named in any error), stopped at the end."""
    if cfg.sampling.engine == "hf":
        yield model
        return
    import tempfile

    from training.engines import EngineError, make_engine
    from training.turns import engine_prompt_tokens

    prompt_tokens = engine_prompt_tokens(tokenizer, problems, cfg.sampling, cfg.feedback)
    with tempfile.TemporaryDirectory(prefix="crucible-vllm-") as work:
        try:
            engine = make_engine(cfg, model, tokenizer, run_dir=work, max_prompt_tokens=prompt_tokens,
                                 model_config=model_config, log=lambda m: print(m, file=sys.stderr, flush=True))
        except EngineError as e:
            raise UsageError(f"sampling.engine: vllm: {e}") from None
        try:
            yield engine
        finally:
            engine.close()


def load_model(name_or_path: str, adapter: str | None = None, dtype: str = "float32") -> tuple[Any, Any]:
    """Model (+ PEFT adapter) and tokenizer for inference; the tokenizer comes from the adapter
    directory when it holds one (a checkpoint is self-contained), else from the model."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch_dtype = "auto" if dtype == "auto" else getattr(torch, dtype)
    model = AutoModelForCausalLM.from_pretrained(name_or_path, dtype=torch_dtype)
    tok_source = adapter if adapter and (Path(adapter) / "tokenizer_config.json").exists() else name_or_path
    tokenizer = AutoTokenizer.from_pretrained(tok_source)
    if adapter:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, adapter)
    if torch.cuda.is_available():
        model = model.to("cuda")
    model.eval()
    return model, tokenizer


def cmd_tiny_model(args: argparse.Namespace) -> int:
    from training.tiny_model import build_tiny_model

    if args.warmup_problems is not None:
        load_problems_or_fail(args.warmup_problems)  # fail fast, with line and field
    if args.warmup_steps < 1:
        raise UsageError(f"--warmup-steps must be >= 1, got {args.warmup_steps}")
    _set_threads(args.threads)
    out = build_tiny_model(args.out, warmup_problems=args.warmup_problems, seed=args.seed, arch=args.arch,
                           linear_head_dim=args.linear_head_dim,
                           warmup_steps=args.warmup_steps, log=lambda m: print(m, file=sys.stderr))
    info = json.loads((out / "crucible_tiny.json").read_text())
    if args.measure:
        if args.warmup_problems is None:
            raise UsageError("--measure needs --warmup-problems (the problems to measure on)")
        info["starting_pass_rates"] = measure_pass_rates(out, args.warmup_problems, args.measure)
        (out / "crucible_tiny.json").write_text(json.dumps(info, indent=2) + "\n")
    print(json.dumps({"out": str(out), **info}))
    return 0


def measure_pass_rates(model_dir: str | Path, problems_file: str | Path, samples: int) -> dict:
    """pass@1 per split at temperature 1, plain sampling (top_k 0, top_p 1), 128 new tokens."""
    from sandbox import Runner
    from training.config import SamplingConfig
    from training.evaluation import evaluate

    model, tokenizer = load_model(str(model_dir))
    problems = load_problems_or_fail(problems_file)
    out = {}
    with Runner(workers=2) as runner:
        for split in ("train", "heldout"):
            subset = [p for p in problems if p.split == split and not p.excluded]
            if subset:
                r = evaluate(model, tokenizer, subset, SamplingConfig(), samples=samples, ks=[1], runner=runner)
                out[split] = {"pass@1": round(r["pass@1"], 4), "tests": round(r["mean_test_pass_rate"], 4),
                              "problems": len(subset), "samples": samples}
    return out


def cmd_export(args: argparse.Namespace) -> int:
    if not (args.adapter / "adapter_config.json").is_file():
        raise UsageError(f"--adapter {args.adapter}: no adapter_config.json there (expected a PEFT adapter directory)")
    if args.base:
        check_model_path(args.base)
    from training.checkpoint import export_merged

    out = export_merged(args.adapter, args.out, base_model=args.base, dtype=args.dtype)
    print(json.dumps({"out": str(out), "kind": "merged"}))
    return 0


def cmd_schema(args: argparse.Namespace) -> int:
    from training.config import json_schema

    print(json.dumps(json_schema(), indent=2))
    return 0
