"""Kernel preflight: known-bad kernel combinations, found before the model loads and either routed
around or refused, never met as a crash at the first update.

The one known today (issue 33, seen on an H200): ``flash-linear-attention`` (fla) on a Hopper GPU
(compute capability 9.x) beside triton >= 3.4.0, < 3.7.1. Triton miscompiles the gated
``chunk_bwd_dqkwg`` kernel there (fla issue #640), so fla 0.6 refuses the backward of the chunked
gated delta rule with "Triton >= 3.4.0 and < 3.7.1 on Hopper GPUs produces incorrect results for gated
chunk_bwd_dqkwg (see #640). Please upgrade Triton to >= 3.7.1 or install tilelang" (older fla computes
the wrong gradients silently). transformers picks fla when its modeling module is imported, so a run
loaded, sampled and then crashed in its first backward. fla itself avoids the kernel when tilelang is
importable with an nvcc to compile it (and ``FLA_TILELANG`` is not ``0``); the check mirrors that.

What the preflight does about it (``preflight`` before the model loads, ``apply`` once it has):

- **rerouted** (the default): transformers' Qwen3.5 / Qwen3-Next modeling modules call the chunked rule
  through a module-level name, ``torch_chunk_gated_delta_rule``, bound when the module is imported to a
  wrapper around fla's kernel whose closure keeps transformers' own PyTorch function. The preflight
  rebinds that name to the PyTorch function, so the chunked form (the prompt prefill and the trainer's
  forward and backward) runs in torch while decoding keeps fla's recurrent one-token kernel, which has
  no backward to go wrong. Every pass that scores tokens for the update (old, reference and policy
  log-probs) uses the same torch form, so the PPO ratio starts at exactly 1 as before.
- **refused**: where that name cannot be rebound (a transformers whose module is laid out otherwise), the
  run ends before the model loads with the text above and the fix; for a model whose module is found
  only once it has loaded, ``apply`` refuses before step 1.

``report()`` is what ``start.runtime.kernels`` carries as ``refused`` and ``rerouted``.
"""

from __future__ import annotations

import importlib
import inspect
import os
import shutil
import sys
from dataclasses import asdict, dataclass
from importlib.metadata import PackageNotFoundError, files, version
from pathlib import Path
from types import ModuleType
from typing import Any

CHUNK_FUNCTION = "torch_chunk_gated_delta_rule"
"""The module-level name through which transformers' linear-attention layers call the chunked rule."""

LINEAR_ATTENTION_MODULES = (
    "transformers.models.qwen3_5.modeling_qwen3_5",
    "transformers.models.qwen3_5_moe.modeling_qwen3_5_moe",
    "transformers.models.qwen3_next.modeling_qwen3_next",
)
"""Modules rerouted before the model loads (the model's own module is checked again once it has)."""

FLA_HOPPER_ERROR = ("Triton >= 3.4.0 and < 3.7.1 on Hopper GPUs produces incorrect results for gated "
                    "chunk_bwd_dqkwg (see #640). Please upgrade Triton to >= 3.7.1 or install tilelang")
"""flash-linear-attention 0.6's own words (fla/ops/common/chunk_o.py), which its backward raises."""

FLA_HOPPER_FIX = ("upgrade Triton to >= 3.7.1 (requirements-gpu.txt pins torch 2.13.0 with the triton 3.7.1 it "
                  "requires: `make gpu-env`), or install tilelang with an nvcc it can compile with, or "
                  "uninstall flash-linear-attention/fla-core (transformers' torch fallback then runs)")


class KernelRefused(ValueError):
    """A known-bad kernel combination that the preflight cannot route around: the model is not loaded and the
    run does not start (the CLI says it in one ``error:`` line, exit 2, as for a model that cannot load)."""


@dataclass(frozen=True)
class KernelFacts:
    """What the preflight reads about this process's kernels and device (cheap: no model, no fla import)."""

    fla: str | None
    """Installed fla-core (or flash-linear-attention) version; None when neither is installed."""
    triton: str | None
    """Installed triton version; None when it is not installed."""
    tilelang: bool
    """fla would run the affected kernel through tilelang instead (installed, an nvcc found, FLA_TILELANG not 0)."""
    device_type: str
    """"cuda", "cpu", ... of the device the model will train on."""
    capability: tuple[int, int] | None
    """CUDA compute capability of that device (None off CUDA)."""
    device_name: str | None
    """The CUDA device's name (None off CUDA)."""


@dataclass(frozen=True)
class Finding:
    """One known-bad combination found on this machine, and what became of it."""

    kernel: str
    """The runtime block's name of the kernel concerned (``gated_delta_rule``)."""
    combination: str
    """The versions and device that make it bad."""
    error: str
    """What the package says (or would do) when the combination runs."""
    fix: str
    """How to make the combination good."""
    action: str = ""
    """``rerouted`` (with ``route``) or ``refused``."""
    route: str = ""
    """For ``rerouted``: which form now runs where."""

    def text(self) -> str:
        return f"{self.combination}: {self.error}. Fix: {self.fix}"


_REPORT: dict[str, list[dict]] = {"refused": [], "rerouted": []}
_FINDINGS: list[Finding] = []
_ROUTED: dict[str, Any] = {}
"""Module name -> the torch function this process bound there (a second preflight finds it already done)."""


def report() -> dict[str, list[dict]]:
    """``{"refused": [...], "rerouted": [...]}`` of this process's last preflight (empty lists before one)."""
    return {key: [dict(entry) for entry in entries] for key, entries in _REPORT.items()}


def gather_facts(device: Any) -> KernelFacts:
    device_type = getattr(device, "type", None) or str(device or "cpu").split(":")[0]
    capability = name = None
    if device_type == "cuda":
        import torch

        if torch.cuda.is_available():
            capability = tuple(torch.cuda.get_device_capability(device))
            name = torch.cuda.get_device_name(device)
    return KernelFacts(fla=_version("fla-core") or _version("flash-linear-attention"), triton=_version("triton"),
                       tilelang=_tilelang_usable(), device_type=device_type, capability=capability,
                       device_name=name)


def known_bad(facts: KernelFacts) -> list[Finding]:
    """The known-bad combinations among ``facts`` (none on a CPU, none without fla)."""
    from packaging.version import InvalidVersion, Version

    if facts.fla is None or facts.triton is None or facts.device_type != "cuda":
        return []
    hopper = (facts.capability is not None and facts.capability[0] == 9) or "NVIDIA H" in (facts.device_name or "")
    try:  # fla parses the same way (fla/utils/env.py TRITON_ABOVE_3_4_0 / TRITON_ABOVE_3_7_1)
        affected = Version("3.4.0") <= Version(facts.triton) < Version("3.7.1")
    except InvalidVersion:
        affected = False
    if not hopper or not affected or facts.tilelang:
        return []
    cc = ".".join(map(str, facts.capability)) if facts.capability else "9.x"
    combination = (f"flash-linear-attention {facts.fla} with triton {facts.triton} on "
                   f"{facts.device_name or 'a Hopper GPU'} (compute capability {cc})")
    return [Finding(kernel="gated_delta_rule", combination=combination, error=FLA_HOPPER_ERROR, fix=FLA_HOPPER_FIX)]


def preflight(device: Any, *, facts: KernelFacts | None = None) -> dict[str, list[dict]]:
    """Before the model loads: find the known-bad combinations for ``device`` and route around each
    (``rerouted``), or raise ``KernelRefused`` with its text and fix. Returns ``report()``."""
    global _FINDINGS
    facts = facts if facts is not None else gather_facts(device)
    _FINDINGS = known_bad(facts)
    _REPORT["refused"], _REPORT["rerouted"] = [], []
    for finding in _FINDINGS:
        modules = [m for m in (_import(name) for name in LINEAR_ATTENTION_MODULES) if m is not None]
        for module in modules:
            if _fast_chunk(module) is not None and not reroute(module):
                _refuse(finding, f"{module.__name__} cannot be told to use its torch form")
        if any(_is_routed(m) for m in modules):
            _record_rerouted(finding)
        elif not any(hasattr(m, CHUNK_FUNCTION) for m in modules):
            _refuse(finding, "transformers' linear-attention modules cannot be told to use their torch form "
                             f"(no rebindable {CHUNK_FUNCTION})")
        # else: fla is installed but transformers did not pick it for these modules: nothing to go wrong
    return report()


def apply(model: Any) -> dict[str, list[dict]]:
    """Once the model has loaded (``model`` as ``from_pretrained`` returns it, before any wrapping): make sure its
    own modeling module follows the preflight (one not among ``LINEAR_ATTENTION_MODULES`` is rerouted now, or
    the run refused before step 1)."""
    module = importlib.import_module(type(model).__module__)
    for finding in _FINDINGS:
        if _fast_chunk(module) is not None and not reroute(module):
            _refuse(finding, f"{module.__name__} cannot be told to use its torch form")
        if _is_routed(module):
            _record_rerouted(finding)
    return report()


def reroute(module: ModuleType) -> bool:
    """Rebind ``module.torch_chunk_gated_delta_rule`` from fla's kernel to transformers' PyTorch function
    (kept in the wrapper's closure) -> whether the module now calls the torch form."""
    torch_function = _fast_chunk(module)
    if torch_function is None:
        return False
    setattr(module, CHUNK_FUNCTION, torch_function)
    if getattr(module, CHUNK_FUNCTION) is not torch_function:
        return False
    _ROUTED[module.__name__] = torch_function
    return True


def _is_routed(module: ModuleType) -> bool:
    bound = _ROUTED.get(module.__name__)
    return bound is not None and getattr(module, CHUNK_FUNCTION, None) is bound


def hub_wrapper_closure(fn: Any) -> dict[str, Any]:
    """What transformers' ``use_kernel_func_from_hub_with_fallback`` wrapper ``fn`` closed over:
    ``is_new_implementation`` (true: it resolved to the package's kernel) and ``torch_function`` (the
    PyTorch function it wraps); empty for None or a function that is no such wrapper."""
    if fn is None:
        return {}
    try:
        return dict(inspect.getclosurevars(fn).nonlocals)
    except (TypeError, ValueError):
        return {}


def _fast_chunk(module: ModuleType) -> Any:
    """The PyTorch function behind ``module.torch_chunk_gated_delta_rule`` when that name is transformers'
    hub wrapper resolved to a package kernel, else None."""
    closure = hub_wrapper_closure(getattr(module, CHUNK_FUNCTION, None))
    torch_function = closure.get("torch_function")
    if not closure.get("is_new_implementation") or not callable(torch_function):
        return None
    return torch_function


def _record_rerouted(finding: Finding) -> None:
    entry = {**asdict(finding), "action": "rerouted", "from": "fla", "to": "torch",
             "route": "chunked form (prompt prefill, the trainer's forward and backward) on transformers' torch "
                      "function; decoding keeps fla's recurrent kernel (forward only)"}
    if entry not in _REPORT["rerouted"]:
        _REPORT["rerouted"].append(entry)


def _refuse(finding: Finding, why: str) -> None:
    _REPORT["refused"].append({**asdict(finding), "action": "refused", "route": why})
    raise KernelRefused(f"refused: {finding.text()} ({why})")


def _version(distribution: str) -> str | None:
    try:
        return version(distribution)
    except PackageNotFoundError:
        return None


def _tilelang_usable() -> bool:
    """fla's own test (fla/backends.py TileLangBackend, fla/utils/env.py has_usable_nvcc), without importing fla."""
    if os.environ.get("FLA_TILELANG", "1") == "0" or _version("tilelang") is None:
        return False
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if home and (Path(home) / "bin" / "nvcc").exists():
        return True
    if shutil.which("nvcc") or Path("/usr/local/cuda/bin/nvcc").exists():
        return True
    try:
        return any(f.name == "nvcc" for f in files("nvidia-cuda-nvcc") or [])
    except PackageNotFoundError:
        return False


def _import(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(name)
    except ImportError:
        return None



def main(argv: list[str] | None = None) -> int:
    """``python -m training.kernels [--require-cuda]``: what the preflight sees on this machine, as one JSON
    object (`make gpu-env` ends with it). Exit 1 with ``--require-cuda`` when torch is a CPU build."""
    import argparse
    import json

    import torch

    ap = argparse.ArgumentParser(description=main.__doc__.split("\n\n")[0])
    ap.add_argument("--require-cuda", action="store_true", help="fail when torch is not a CUDA build")
    args = ap.parse_args(argv)
    device = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    facts = gather_facts(device)
    modules = [m for m in (_import(name) for name in LINEAR_ATTENTION_MODULES) if m is not None]
    print(json.dumps({"torch": torch.__version__, "cuda": torch.version.cuda, "facts": asdict(facts),
                      "fla_picked_by": [m.__name__ for m in modules if _fast_chunk(m) is not None],
                      "known_bad": [f.text() for f in known_bad(facts)]}, indent=1))
    if args.require_cuda and torch.version.cuda is None:
        print(f"torch {torch.__version__} is a CPU build: install the CUDA wheel (`pip install torch==2.13.0` from "
              f"the package index, not a CPU wheel house) before `make gpu-env`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
