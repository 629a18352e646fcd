"""What a checkpoint download carries besides the Hugging Face files: the run's config as YAML, a
metrics summary and a model card; and the base model named as a user can find it, never by a path of
this server.

``base_model_name_or_path`` (adapter_config.json) and ``_name_or_path`` (config.json) are rewritten
in the archive only (the trainer's files on disk keep the paths it loads from):

- a hub id stays as it is (``Qwen/Qwen3.5-9B``);
- a model installed under ``$CRUCIBLE_DATA_DIR/models/`` becomes its name there (``tiny``; a hub mirror
  installed as ``models/Qwen/Qwen3.5-9B`` becomes ``Qwen/Qwen3.5-9B``);
- a checkpoint of another run (``run:<id>/step-<n>``) becomes that run's base, named the same way.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from training.config import json_schema

from .model_refs import MODELS_PREFIX, is_hub_id
from .models import Checkpoint, Eval, Run, StepMetric

ARCHIVE_FILES = ("README.md", "crucible_run.yaml", "metrics_summary.json")
RUN_INPUTS = ("problems.jsonl", "probe.jsonl")
"""The run's own copies of its inputs, which ``crucible_run.yaml`` names relative to its directory."""
RUN_INPUTS_MAX_BYTES = 32 * 1024 * 1024
"""Largest input copy an archive carries (held in memory while it streams); a larger one the card names."""


def config_yaml(run: Run) -> str:
    """The run's config as YAML, sections as sections, in the dataclasses' order.

    ``problems`` is the run's own copy of its set, stored in the run directory: named relative to it
    (where the CLI's ``--out`` puts it) rather than by the server's absolute path; so is
    ``difficulty.probe``, the run's copy of the probe it filtered by.
    """
    import yaml

    if not run.config:
        return ""
    config = dict(run.config)
    header = ""
    if "problems" in config:
        config["problems"] = Path(config["problems"]).name
        set_name = run.problem_set.name if run.problem_set else "(deleted)"
        header = f"# problems: this run's copy of problem set {set_name!r}, in the run directory\n"
    difficulty = config.get("difficulty")
    if isinstance(difficulty, dict) and difficulty.get("probe"):
        header += f"# difficulty.probe: this run's copy of the output of {difficulty['probe']}, in the run directory\n"
        config["difficulty"] = {**difficulty, "probe": "probe.jsonl"}
    ordered = _in_schema_order(config, json_schema())
    return header + yaml.safe_dump(ordered, sort_keys=False, default_flow_style=False, allow_unicode=True, width=100)


def _in_schema_order(value, schema: dict):
    """The stored config (jsonb keeps its own key order) back in the order of the config dataclasses."""
    if not isinstance(value, dict):
        return value
    section = next((b for b in schema.get("anyOf", []) if b.get("type") == "object"), schema)
    props = section.get("properties", {})
    keys = [k for k in props if k in value] + [k for k in value if k not in props]
    return {k: _in_schema_order(value[k], props.get(k, {})) for k in keys}


def public_base_name(config: dict, _depth: int = 0) -> str:
    """The run's base model as a user names it (see the module docstring)."""
    name = str(config.get("model", {}).get("name_or_path") or "")
    if name.startswith("run:") and _depth < 8:
        source = Run.objects.filter(pk=_int(name[4:].split("/", 1)[0])).only("config").first()
        if source is not None:
            return public_base_name(source.config, _depth + 1)
    if name.startswith(MODELS_PREFIX):  # as model_refs.resolve_model, this before the hub-id form
        return name[len(MODELS_PREFIX):]
    if is_hub_id(name):
        return name
    return Path(name).name or name


def _int(text: str) -> int | None:
    return int(text) if text.isdigit() else None


def heldout_points(run: Run) -> list[tuple[int, float]]:
    return list(Eval.objects.filter(run=run, split="heldout", pass_at_1__isnull=False)
                .order_by("step").values_list("step", "pass_at_1"))


def metrics_summary(run: Run, checkpoint: Checkpoint) -> dict:
    points = heldout_points(run)
    at = dict(points).get(checkpoint.step)
    last = (StepMetric.objects.filter(run=run, step__lte=checkpoint.step).order_by("-step")
            .values_list("step", "metrics").first())
    return {
        "run": {"id": run.pk, "name": run.name, "status": run.status, "steps": run.steps},
        "checkpoint": {"step": checkpoint.step, "kind": checkpoint.kind},
        "base_model": public_base_name(run.config),
        "heldout_pass@1": {"before": points[0][1] if points else None, "at_checkpoint": at,
                           "best": max((p for _, p in points), default=None),
                           "by_step": [[s, p] for s, p in points]},
        "train_metrics_at_checkpoint": {"step": last[0], "metrics": last[1]} if last else None,
    }


CARD_SECTIONS: list[Callable[[Run, Checkpoint], str]] = []
"""Further model-card sections other apps contribute (``register_card_section``), each a Markdown text
(empty: nothing to say) placed after "Result"; the runs app imports none of them."""


def register_card_section(section: Callable[[Run, Checkpoint], str]) -> None:
    if section not in CARD_SECTIONS:
        CARD_SECTIONS.append(section)


def model_card(run: Run, checkpoint: Checkpoint, summary: dict, rerun: str = "") -> str:
    config = run.config or {}
    weights = config.get("reward", {}).get("weights", {})
    lora = config.get("model", {}).get("lora")
    ppo, train, sampling = config.get("ppo", {}), config.get("train", {}), config.get("sampling", {})
    heldout = summary["heldout_pass@1"]
    extra = "".join(f"\n{text.strip()}\n" for text in (section(run, checkpoint) for section in CARD_SECTIONS) if text)
    pct = lambda v: "n/a" if v is None else f"{100 * v:.1f}%"  # noqa: E731
    problem_set = run.problem_set
    data = (f"{problem_set.name}: {problem_set.train_count} train / {problem_set.heldout_count} held-out problems"
            if problem_set else "the problem set was deleted")
    what = (f"a LoRA adapter (r {lora['r']}, alpha {lora['alpha']}, modules {lora.get('target_modules')})"
            if checkpoint.kind == "adapter" and lora else
            "the full model with the adapter merged in" if checkpoint.kind == "merged" else "a full fine-tune")
    return f"""---
base_model: {summary['base_model']}
library_name: {"peft" if checkpoint.kind == "adapter" else "transformers"}
tags: [crucible, reinforcement-learning, code, {ppo.get('advantage', 'grpo')}]
---

# {run.name} — step {checkpoint.step}

{what.capitalize()} of **{summary['base_model']}**, trained by Crucible (run #{run.pk}) with reinforcement
learning where the reward is what happens when the generated code runs in a sandbox.

## Result

Held-out pass@1 (unbiased estimate over {train.get('eval_samples', '?')} samples per problem):
{pct(heldout['before'])} before training, {pct(heldout['at_checkpoint'])} at this checkpoint,
best {pct(heldout['best'])}. Per evaluation: `metrics_summary.json`.
{extra}
## Data

{data}. Held-out problems are never trained on.

## Reward and training

- reward weights: {", ".join(f"{k} {v:g}" for k, v in weights.items())}
- {ppo.get('advantage', 'grpo')}, learning rate {ppo.get('learning_rate')}, KL {ppo.get('kl_coef')}
  ({ppo.get('kl_estimator')}), clip {ppo.get('clip_range')}
- {sampling.get('problems_per_step')} problems × {sampling.get('candidates_per_problem')} candidates per step,
  {sampling.get('prompt_style')} prompts, at most {sampling.get('max_new_tokens')} new tokens;
  checkpoint at step {checkpoint.step} of {train.get('steps')}

## Rerun

{rerun}
"""


def rerun_text(run: Run, summary: dict, carried: list[str], left_out: dict[str, int]) -> str:
    """The card's "Rerun" section: what the archive holds for ``python -m training run`` and what it needs
    besides (the base model; an input too large to carry)."""
    config = run.config or {}
    name = str(config.get("model", {}).get("name_or_path") or "")
    lines = ["The whole config is `crucible_run.yaml`. From the directory this archive unpacks to:", "",
             "```bash", "python -m training run --config crucible_run.yaml --out RUN_DIR", "```", ""]
    if carried:
        lines.append("It finds " + " and ".join(f"`{f}`" for f in carried) + " here (this run's own cop"
                     + ("ies" if len(carried) > 1 else "y") + ", named relative to this directory by the config).")
    for file, size in left_out.items():
        what = ("the problem set (export it from the set's page)" if file == "problems.jsonl" else
                "the difficulty probe's output the run filtered by")
        lines.append(f"`{file}` ({size / 2**20:.0f} MiB) is too large for the archive: put {what} here as `{file}`.")
    if is_hub_id(name) and not name.startswith(MODELS_PREFIX):  # models/<name> has a hub id's form too
        lines.append(f"The base model `{name}` comes from the Hugging Face Hub.")
    else:
        lines.append(f"The base model is `{name}` on the server that trained it; elsewhere, name it with "
                     f"`--set model.name_or_path=PATH` (a local copy of **{summary['base_model']}**"
                     + (", which `python -m training tiny-model --out PATH --warmup-problems problems.jsonl` builds)."
                        if summary["base_model"].startswith("tiny") else ")."))
    return "\n".join(lines)


def archive_extras(run: Run, checkpoint: Checkpoint, directory: Path) -> dict[str, bytes]:
    """Files to add to (or replace in) the archive, by path relative to the checkpoint directory."""
    summary = metrics_summary(run, checkpoint)
    config = run.config or {}
    difficulty = config.get("difficulty") if isinstance(config.get("difficulty"), dict) else {}
    named = {"problems.jsonl": "problems" in config, "probe.jsonl": bool(difficulty.get("probe"))}
    extras, left_out = {}, {}
    for name in RUN_INPUTS:
        source = Path(run.path) / name
        if not named[name] or not source.is_file():
            continue
        size = source.stat().st_size
        if size > RUN_INPUTS_MAX_BYTES:
            left_out[name] = size
        else:
            extras[name] = source.read_bytes()
    rerun = rerun_text(run, summary, list(extras), left_out)
    extras |= {"README.md": model_card(run, checkpoint, summary, rerun).encode(),
               "crucible_run.yaml": config_yaml(run).encode(),
               "metrics_summary.json": (json.dumps(summary, indent=2) + "\n").encode()}
    for name, key in (("adapter_config.json", "base_model_name_or_path"), ("config.json", "_name_or_path")):
        path = directory / name
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and key in data:
            data[key] = summary["base_model"]
            extras[name] = (json.dumps(data, indent=2) + "\n").encode()
    return extras


def best_checkpoint_ids(run: Run, checkpoints: list[Checkpoint]) -> set[int]:
    """The checkpoints at the step with the highest held-out pass@1 (the latest such step on a tie);
    none when no checkpoint beats the evaluation before training (a "best" of 0% → 0% says nothing)."""
    points = heldout_points(run)
    at = dict(points)
    scored = [(at[c.step], c.step) for c in checkpoints if c.step in at]
    if not scored or max(scored)[0] <= points[0][1]:
        return set()
    best_step = max(scored)[1]
    return {c.pk for c in checkpoints if c.step == best_step}
