"""Resumable checkpoints and exports.

Layout of ``RUN_DIR/checkpoints/step-N/`` (the Hugging Face files at its top level, so the directory
loads as it is and the web app's ``.tar.gz`` download is a ready-to-use model)::

    adapter_config.json, adapter_model.safetensors   # LoRA (kind "adapter"), PEFT format
    config.json, model.safetensors                   # full fine-tune (kind "full") instead
    tokenizer.json, tokenizer_config.json, ...       # the tokenizer, so the directory is self-contained
    training_state/optimizer.pt, scheduler.pt, rng.pt, trainer_state.json   # what resume needs

A checkpoint is written under ``step-N.partial`` and renamed into place, so a crash mid-save never
leaves a directory that looks complete; ``latest_checkpoint`` only considers directories whose
``trainer_state.json`` exists.

The merged export (``merge_lora`` / ``export_merged``) folds the adapter into the base weights and
writes ``config.json`` + ``model.safetensors`` + tokenizer files, loadable by
``AutoModelForCausalLM.from_pretrained`` with no peft installed. The trainer writes it at the end of
a run, when ``train.save_merged`` is set, as ``RUN_DIR/checkpoints/final-merged`` (kind ``merged``).
"""

from __future__ import annotations

import json
import random
import re
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

CHECKPOINTS_DIR = "checkpoints"
STATE_DIR = "training_state"
MERGED_DIR = "final-merged"
_STEP_RE = re.compile(r"^step-(\d+)$")


@dataclass
class TrainerState:
    step: int
    """Last completed RL step (the run resumes at step + 1)."""
    kind: str
    """adapter | full."""
    config: dict
    """The run config as a dict."""
    extra: dict


def checkpoint_dir(run_dir: str | Path, step: int) -> Path:
    return Path(run_dir) / CHECKPOINTS_DIR / f"step-{step}"


def save_checkpoint(
    run_dir: str | Path,
    step: int,
    model: torch.nn.Module,
    tokenizer: Any,
    optimizer: torch.optim.Optimizer | None,
    scheduler: Any,
    config: dict,
    *,
    is_lora: bool = True,
    extra: dict | None = None,
    accelerator: Any = None,
) -> tuple[Path, str]:
    """Write ``RUN_DIR/checkpoints/step-N`` atomically; returns (its path, kind).

    ``model`` may be wrapped by accelerate (it is unwrapped); in a multi-process run only the main
    process writes, after everyone reached this point.
    """
    if accelerator is not None:
        accelerator.wait_for_everyone()
        model = accelerator.unwrap_model(model)
        if not accelerator.is_main_process:
            return checkpoint_dir(run_dir, step), "adapter" if is_lora else "full"
    final = checkpoint_dir(run_dir, step)
    partial = _save_partial(model, tokenizer, final)
    state_dir = partial / STATE_DIR
    state_dir.mkdir()
    if optimizer is not None:
        torch.save(optimizer.state_dict(), state_dir / "optimizer.pt")
    if scheduler is not None:
        torch.save(scheduler.state_dict(), state_dir / "scheduler.pt")
    torch.save(rng_state(), state_dir / "rng.pt")
    kind = "adapter" if is_lora else "full"
    # written last: its presence marks the checkpoint complete
    (state_dir / "trainer_state.json").write_text(
        json.dumps({"step": step, "kind": kind, "config": config, "extra": extra or {}}, indent=1), encoding="utf-8"
    )
    if final.exists():
        shutil.rmtree(final)
    partial.rename(final)
    return final, kind


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The complete ``step-N`` checkpoint with the highest N, or None."""
    root = Path(run_dir) / CHECKPOINTS_DIR
    if not root.is_dir():
        return None
    best: tuple[int, Path] | None = None
    for child in root.iterdir():
        m = _STEP_RE.match(child.name)
        if m and (child / STATE_DIR / "trainer_state.json").is_file():
            n = int(m.group(1))
            if best is None or n > best[0]:
                best = (n, child)
    return best[1] if best else None


def read_trainer_state(ckpt: str | Path) -> TrainerState:
    data = json.loads((Path(ckpt) / STATE_DIR / "trainer_state.json").read_text(encoding="utf-8"))
    return TrainerState(step=int(data["step"]), kind=data["kind"], config=data.get("config", {}),
                        extra=data.get("extra", {}))


def load_checkpoint(
    ckpt: str | Path,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: Any = None,
    *,
    restore_rng: bool = True,
) -> TrainerState:
    """Restore weights (adapter or full), optimizer, scheduler and RNG states from ``ckpt``.

    Call it after the optimizer was built over the model's trainable parameters (and before
    accelerate wraps the model, or with the unwrapped model).
    """
    ckpt = Path(ckpt)
    state = read_trainer_state(ckpt)
    if state.kind == "adapter":
        from peft import set_peft_model_state_dict
        from safetensors.torch import load_file

        weights = load_file(str(ckpt / "adapter_model.safetensors"))
        result = set_peft_model_state_dict(model, weights)
        unexpected = getattr(result, "unexpected_keys", None)
        if unexpected:
            raise ValueError(f"checkpoint {ckpt}: adapter weights do not fit this model (unexpected keys "
                             f"{unexpected[:3]}...); was it trained with another LoRA config?")
    else:
        from transformers.trainer_utils import load_sharded_checkpoint

        single = ckpt / "model.safetensors"
        if single.is_file():
            from safetensors.torch import load_file

            missing, unexpected = model.load_state_dict(load_file(str(single)), strict=False)
            if unexpected:
                raise ValueError(f"checkpoint {ckpt}: weights do not fit this model (unexpected {unexpected[:3]})")
        else:
            load_sharded_checkpoint(model, str(ckpt), strict=False)
    state_dir = ckpt / STATE_DIR
    if optimizer is not None and (state_dir / "optimizer.pt").is_file():
        optimizer.load_state_dict(torch.load(state_dir / "optimizer.pt", map_location="cpu", weights_only=False))
    if scheduler is not None and (state_dir / "scheduler.pt").is_file():
        scheduler.load_state_dict(torch.load(state_dir / "scheduler.pt", map_location="cpu", weights_only=False))
    if restore_rng and (state_dir / "rng.pt").is_file():
        set_rng_state(torch.load(state_dir / "rng.pt", map_location="cpu", weights_only=False))
    return state


def rng_state() -> dict:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def merge_lora(model: torch.nn.Module) -> torch.nn.Module:
    """Fold LoRA adapters into the base weights, in place, and return the plain transformers model.

    The PeftModel is unusable afterwards; call it when training is over (or on a freshly loaded copy).
    """
    return model.merge_and_unload()


def _save_partial(model: torch.nn.Module, tokenizer: Any, final: Path) -> Path:
    """Model (safetensors) + tokenizer into a fresh ``FINAL.partial`` directory, renamed over
    ``final`` by the caller once complete: a crash never leaves a half-written checkpoint."""
    partial = final.with_name(final.name + ".partial")
    if partial.exists():
        shutil.rmtree(partial)
    partial.mkdir(parents=True)
    model.save_pretrained(partial, safe_serialization=True)
    if tokenizer is not None:
        tokenizer.save_pretrained(partial)
    return partial


def save_merged(model: torch.nn.Module, tokenizer: Any, out_dir: str | Path) -> Path:
    """Write a plain (already merged or full) model + tokenizer as safetensors; atomic like checkpoints."""
    out = Path(out_dir)
    partial = _save_partial(model, tokenizer, out)
    if out.exists():
        shutil.rmtree(out)
    partial.rename(out)
    return out


def export_merged(adapter_dir: str | Path, out_dir: str | Path, *, base_model: str | None = None,
                  dtype: str = "float32") -> Path:
    """Merge a saved LoRA adapter (a ``step-N`` checkpoint or any PEFT directory) into its base model
    and write the result to ``out_dir``. ``base_model`` defaults to the adapter's recorded base."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from training.policy import torch_dtype

    adapter_dir = Path(adapter_dir)
    base = base_model or json.loads((adapter_dir / "adapter_config.json").read_text())["base_model_name_or_path"]
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch_dtype(dtype))
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*is_gradient_checkpointing.*", category=FutureWarning)
        model = PeftModel.from_pretrained(model, str(adapter_dir))
    tok_source = adapter_dir if (adapter_dir / "tokenizer_config.json").is_file() else base
    tokenizer = AutoTokenizer.from_pretrained(str(tok_source))
    return save_merged(merge_lora(model), tokenizer, out_dir)
