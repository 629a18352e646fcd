"""What a run runs on, and whether its sampler agrees with its trainer: the run page's read of both.

- ``latest_start(run)`` / ``runtime_rows(runtime)``: the ``runtime`` block of the run's newest
  ``start`` event (a resumed run starts again, maybe on another worker with other versions), as the
  rows the page shows: versions, device, dtype, architecture, layer mix, kernel implementations.
- ``mismatch_warning(metrics)``: a step's ``rollout/mismatch_kl`` over ``MISMATCH_KL_WARN`` is a
  visible warning, computed here for the page and for every step message sent over the websocket.
"""
from __future__ import annotations

from .models import Run, RunEvent

MISMATCH_KL = "rollout/mismatch_kl"
MISMATCH_KL_WARN = 1e-3
"""Mean per-token k3 KL between the sampler's and the trainer's log-probs of the sampled tokens under
the same weights. Exact arithmetic gives 0; float32 on CPU measures about 2e-13 on the tiny Qwen3.5
model (torch fallback kernels). k3 is about half the mean squared log-ratio, so 1e-3 means the
sampler's per-token probabilities are off by about 4.5% (root mean square) from the ones the update
assumes: past rounding noise even in half precision, and the size of mismatch reported to destabilise
RL (the reason for truncated importance sampling, ppo.tis_cap)."""

KERNEL_LABELS = {"attention": "attention", "gated_delta_rule": "gated delta rule",
                 "gated_delta_rule_decode": "gated delta rule (decode)", "causal_conv1d": "causal conv1d"}
FAST_KERNEL_PACKAGES = {"gated_delta_rule": "flash-linear-attention",
                        "gated_delta_rule_decode": "flash-linear-attention", "causal_conv1d": "causal-conv1d"}


def latest_start(run: Run) -> dict | None:
    """The payload of the run's newest ``start`` event, or None before the trainer wrote one."""
    return (RunEvent.objects.filter(run=run, kind="start").order_by("-seq")
            .values_list("payload", flat=True).first())


def runtime_rows(start: dict | None) -> dict | None:
    """``{"rows": [(label, text)], "warnings": [str]}`` for a start event's runtime block (None without one)."""
    runtime = (start or {}).get("runtime")
    if not isinstance(runtime, dict):
        return None
    rows = []
    for label, key in (("architecture", "architecture"), ("device", "device"), ("dtype", "dtype")):
        if runtime.get(key):
            rows.append((label, str(runtime[key])))
    # Only linear attention's decays underflow to denormals (training.runtime.cpu_float_mode): for any
    # other model the mode changes nothing worth a line.
    layer_types = runtime.get("layer_types") if isinstance(runtime.get("layer_types"), dict) else {}
    linear = isinstance(layer_types.get("linear_attention"), int) and layer_types["linear_attention"] > 0
    if runtime.get("flush_denormal") and str(runtime.get("device", "")).startswith("cpu") and linear:
        rows.append(("float mode", "denormals flushed to zero (faster linear attention on CPU)"))
    layers = layer_mix(runtime.get("layer_types"))
    if layers:
        rows.append(("layers", layers))
    kernels = runtime.get("kernels")
    if isinstance(kernels, dict) and kernels:
        # `refused` / `rerouted` (training/kernels.py) are lists of entries: rows of their own, not implementations
        named = {k: v for k, v in kernels.items() if isinstance(v, str)}
        if named:
            rows.append(("kernels", " · ".join(f"{KERNEL_LABELS.get(k, k.replace('_', ' '))}: {kernel_text(k, v)}"
                                               for k, v in named.items())))
        for entry in kernels.get("rerouted") or []:
            if isinstance(entry, dict):
                rows.append(("rerouted", f"{entry.get('kernel')}: {entry.get('route')} ({entry.get('combination')})"))
    forms = runtime.get("linear_attention")
    if isinstance(forms, dict) and forms.get("sampler"):
        used = forms.get("kernels") or {}
        rows.append(("linear attention", f"sampler {forms['sampler']} ({used.get('sampler')}), trainer "
                                         f"{forms.get('trainer')} ({used.get('trainer')})"
                                         + ("" if forms.get("same_form") else ": different forms, see mismatch")))
    engine = runtime.get("engine")
    if isinstance(engine, dict) and engine.get("name"):
        rows.append(("engine", engine_text(engine)))
    versions = [f"{name} {runtime[name] or 'not installed'}" for name in ("torch", "transformers", "peft", "accelerate")
                if name in runtime]
    if versions:
        rows.append(("versions", " · ".join(versions)))
    dropped = (start or {}).get("dropped")
    if isinstance(dropped, dict):
        rows.append(("difficulty filter", f"left out {dropped.get('unsolved', 0)} never-solved and "
                                          f"{dropped.get('solved', 0)} always-solved problems"))
    warnings = [str(w) for w in runtime.get("warnings") or [] if w]
    engine_log = isinstance(engine, dict) and bool(engine.get("log"))
    return {"rows": rows, "warnings": warnings, "engine_log": engine_log}


def engine_text(engine: dict) -> str:
    """{"name": "vllm", "version": "0.32.0", "dtype": "bfloat16", "sync": "weights", ...}
    -> "vLLM 0.32.0 · bfloat16 · server started for this run · weights reloaded each step"."""
    if engine.get("name") == "hf":
        return "hf (the trainer's own decoding loop)"
    parts = [f"vLLM {engine.get('version') or '(version unknown)'}"]
    if engine.get("dtype"):
        parts.append(str(engine["dtype"]))
    parts.append("server started for this run" if engine.get("log") else f"server {engine.get('url')}")
    sync = {"adapter": "LoRA adapter hot-loaded each step", "weights": "weights reloaded each step"}
    if engine.get("sync") in sync:
        why = engine.get("sync_why")
        parts.append(sync[engine["sync"]] + (f" ({why})" if isinstance(why, str) and why else ""))
    return " · ".join(parts)


def layer_mix(layer_types) -> str:
    """{"full_attention": 8, "linear_attention": 24} -> "24 linear attention + 8 full attention"."""
    if not isinstance(layer_types, dict):
        return ""
    counts = sorted(((int(n), str(kind)) for kind, n in layer_types.items() if isinstance(n, int) and n > 0),
                    key=lambda c: (-c[0], c[1]))
    return " + ".join(f"{n} {kind.replace('_', ' ')}" for n, kind in counts)


def kernel_text(key: str, implementation) -> str:
    if implementation == "torch" and key in FAST_KERNEL_PACKAGES:
        return f"torch (fallback; {FAST_KERNEL_PACKAGES[key]} not in use)"
    return str(implementation)


def mismatch_warning(metrics: dict, step: int | None = None, *, tis_cap: float | None = None) -> str | None:
    """The warning for a step whose ``rollout/mismatch_kl`` is above ``MISMATCH_KL_WARN``, else None."""
    value = metrics.get(MISMATCH_KL) if isinstance(metrics, dict) else None
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > MISMATCH_KL_WARN:
        return None
    at = f" at step {step}" if step is not None else ""
    fix = (f"ppo.tis_cap = {tis_cap:g} corrects the update for it, but the cause remains"
           if tis_cap is not None else "or set ppo.tis_cap (e.g. 2) to correct the update for it")
    stale = metrics.get("rollout/staleness")
    if isinstance(stale, (int, float)) and not isinstance(stale, bool) and stale >= 1:
        # sampling ahead: the sampler's policy is an update older by design, so that update is in the gap
        fix = (f"ppo.tis_cap = {tis_cap:g} corrects the update for it" if tis_cap is not None
               else "set ppo.tis_cap (e.g. 2) to correct the update for it")
        return (f"Sampler and trainer disagree: rollout/mismatch_kl is {value:.2g}{at}, above "
                f"{MISMATCH_KL_WARN:g}. This run samples one step ahead (sampling.staleness: 1), so the sampler's "
                "policy is one update older than the trainer's and part of the gap is that update; a gap that "
                f"keeps growing means the updates are large for off-policy samples: lower the learning rate, {fix}, "
                "or sample on-policy (staleness: 0).")
    return (f"Sampler and trainer disagree: rollout/mismatch_kl is {value:.2g}{at}, above {MISMATCH_KL_WARN:g}. "
            "The log-probs of the sampled tokens differ between the sampler and the trainer under the same "
            "weights, so the update is off-policy. Fix the kernels or the precision (see Runtime: a torch "
            f"fallback, half precision), {fix}.")


def tis_cap_of(config: dict) -> float | None:
    cap = ((config or {}).get("ppo") or {}).get("tis_cap")
    return float(cap) if isinstance(cap, (int, float)) and not isinstance(cap, bool) else None


def step_message_extras(event: dict, config: dict) -> dict:
    """What a ``step`` message over the websocket carries besides the event: ``mismatch_warning``."""
    if event.get("event") != "step":
        return {}
    step = event.get("step") if isinstance(event.get("step"), int) else None
    return {"mismatch_warning": mismatch_warning(event.get("metrics") or {}, step, tis_cap=tis_cap_of(config))}
