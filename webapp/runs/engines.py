"""Whether a run's generation engine can run here, checked when the run is created (not minutes later in
the worker): ``sampling.engine: vllm`` needs the engine environment on this host, or a ``vllm.url`` that
the operator lists in ``CRUCIBLE_VLLM_URLS`` (a web user never points the trainer at an address of their
choosing: the trainer would send it requests and adapter paths). A listed server is shared: a run on it loads its
LoRA adapter under a name of its own, and may not reload the server's weights (``vllm.sync: weights``)."""
from __future__ import annotations

from django.conf import settings

from training.config import ENGINES, ConfigError
from training.engines.vllm_server import unavailable_reason
from training.engines.vllm_sync import resolve_sync


def check_engine(full: dict) -> None:
    """Raise ``ConfigError`` naming the field when ``full`` (a merged run config) asks for an engine this
    server cannot give it."""
    url = (full.get("vllm") or {}).get("url")
    if url is not None and url.rstrip("/") not in settings.VLLM_URLS:
        listed = ", ".join(settings.VLLM_URLS) or "none are listed"
        raise ConfigError("vllm.url", f"must be one of the vLLM servers this deployment offers (CRUCIBLE_VLLM_URLS: "
                                      f"{listed}); leave it null to let the run start its own server")
    if url is not None and full["sampling"]["engine"] == "vllm":
        sync = full["vllm"]["sync"]
        if resolve_sync(sync, full_finetune=full["model"]["lora"] is None, own_server=False, cuda=False) == "weights":
            why = "vllm.sync: weights" if sync == "weights" else "a full fine-tune (model.lora null) syncs by weights"
            raise ConfigError("vllm.sync", f"{why}: it would reload the whole model of the listed server {url}, "
                                           "which other runs sample from too; a run on a listed server syncs its "
                                           "LoRA adapter (vllm.sync: adapter), or leave vllm.url null for a server "
                                           "of the run's own")
    if full["sampling"]["engine"] != "vllm" or url is not None:
        return
    reason = unavailable_reason()
    if reason:
        raise ConfigError("sampling.engine", f"vllm cannot start on this server: {reason}; or use engine: hf")


def engine_offers() -> list[dict]:
    """``[{name, available, reason}]``: each ``sampling.engine`` and whether a run here can use it as the form
    offers it (a server of its own for the run), for the new-run form and ``GET /api/engines``. ``reason``
    says why not, and what still works: a listed server (``vllm.url``) needs no engine environment."""
    offers = []
    for name in ENGINES:
        reason = unavailable_reason() if name == "vllm" else None
        if reason and settings.VLLM_URLS:
            reason += f"; a listed server still works: set vllm.url to one of {', '.join(settings.VLLM_URLS)}"
        offers.append({"name": name, "available": reason is None, "reason": reason})
    return offers
