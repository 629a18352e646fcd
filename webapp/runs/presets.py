"""Named run configs offered by the new-run form and ``GET /api/presets``.

Each config is a partial run config (without ``problems``) merged over the training defaults, so a
preset only says what differs from them. Models are named as a web user names them (``models/tiny``,
a hub id), never by a server path; the server resolves them (model_refs). Every preset is validated
by the tests.
"""
from __future__ import annotations

from .config import merge_config
from .model_refs import WEB_DEFAULT_MODEL

TINY_QWEN3_5_MODEL = "models/tiny-qwen3_5"  # `make run` builds it next to models/tiny (webapp.launcher.DEMO_MODELS)


def _cpu_demo_config(model: str) -> dict:
    """The CPU demo on ``model``, stating only what differs from the run defaults."""
    return {
        "model": {"name_or_path": model},  # also the web default for the Qwen3 demo, but the demo is this model
        # Measured by benchmarks/learning_demo.py on the tiny Qwen3 model (same values; eval/checkpoint
        # cadence aside): held-out pass@1 0.37 -> 0.72 in about 3 minutes on 2 cores (RESULTS.md).
        "sampling": {"problems_per_step": 8, "candidates_per_problem": 16, "max_new_tokens": 64},
        "ppo": {"learning_rate": 2e-3, "kl_coef": 0.01, "micro_batch_size": 64},
        "train": {"steps": 200, "eval_every": 40, "eval_samples": 16, "checkpoint_every": 40},
    }


def presets() -> list[dict]:
    return [
        {
            "name": "cpu-demo",
            "title": "CPU demo — tiny model",
            # The benchmark's 3 minutes leave out the web run's evaluations, checkpoints and page updates: a
            # run started from the web page on 2 cores took 4 min 48 s idle (issue #24), 6 min 14 s at load 4-5
            # (2026-12-06, README).
            "description": "The ≈1M-parameter tiny model on CPU: about six minutes on 2 cores; watch held-out "
                           "pass@1 rise.",
            "config": _cpu_demo_config(WEB_DEFAULT_MODEL),
        },
        {
            "name": "cpu-demo-qwen3.5",
            "title": "CPU demo — tiny Qwen3.5 (hybrid attention)",
            "description": "The tiny demo on Qwen3.5's architecture: three Gated DeltaNet (linear-attention) layers to "
                           "one full-attention layer, as in Qwen3.5-9B; the run page shows its layer mix and kernels. "
                           "The CPU demo's settings for 60 steps (its steps cost about twice a Qwen3 step: the "
                           "linear-attention layers run transformers' PyTorch fallback on CPU): about four minutes.",
            # Measured by benchmarks/learning_demo.py --arch qwen3_5 --steps 60: held-out pass@1
            # 0.38 -> 0.74 in about 3 minutes on 2 cores (RESULTS.md).
            "config": merge_config(_cpu_demo_config(TINY_QWEN3_5_MODEL),
                                   {"train": {"steps": 60, "eval_every": 20, "checkpoint_every": 20}}),
        },
        {
            "name": "qwen3.5-9b-lora-80gb",
            "title": "Qwen3.5-9B LoRA on one 80 GB GPU",
            "description": "bfloat16 base, LoRA r 16 on all linear layers, gradient checkpointing; "
                           "KL-anchored warm-up, then the configured learning rate. Rollouts on vLLM (a server "
                           "beside the trainer on the same GPU, its adapter reloaded every step).",
            "config": {
                "model": {"name_or_path": "Qwen/Qwen3.5-9B", "dtype": "bfloat16", "gradient_checkpointing": True,
                          "lora": {"r": 16, "alpha": 32.0}},
                "sampling": {"problems_per_step": 32, "max_new_tokens": 512, "prompt_style": "chat",
                             "engine": "vllm"},
                # bf16 weights (~18 GB) + KV cache for 256 sequences of ~1k tokens in ~28 GB; the trainer
                # keeps the rest (its own bf16 copy, LoRA optimizer state, activations).
                "vllm": {"gpu_memory_utilization": 0.35},
                "ppo": {"learning_rate": 1e-5, "clip_range_high": 0.28, "micro_batch_size": 8},
                "schedule": {"warmup": "stable_then_fast", "lr_decay": "cosine", "min_lr_factor": 0.1},
                "train": {"steps": 200, "eval_every": 20, "checkpoint_every": 50, "save_merged": True},
                "sandbox": {"workers": 16},
            },
        },
    ]


def get_preset(name: str) -> dict | None:
    return next((p for p in presets() if p["name"] == name), None)
