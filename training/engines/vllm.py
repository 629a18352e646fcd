"""The ``vllm`` engine: sampling through a vLLM OpenAI-compatible server.

Token-exact: prompts are tokenised here with the trainer's tokenizer and sent as ids; vLLM answers
the sampled ids (``return_token_ids``) with their log-probs under the processed distribution
(``--logprobs-mode processed_logprobs``: temperature, top-k and top-p applied, i.e. the distribution
the token was drawn from), and the completion is cut here by training/generation.py's stop-string
contract on those ids. Nothing is re-tokenised from text.

One request per candidate (``n = 1``, its own seed on a GPU server; see ``VLLMEngine.seeded``) so that
continuous batching hands each completion back the moment it ends; the rollout submits its execution
straight away (the completions that came back together as one piece: one sandbox submission). The
prompt's KV is computed once per prompt through vLLM's prefix cache.

The policy (``vllm.sync``): the base model is loaded once, then after every optimizer step ``sync``
either saves the LoRA adapter and hot-loads it under the name ``policy`` (``policy-<id>`` on a server given
by ``vllm.url``, which other runs may share; unloaded when the engine closes) (``adapter``:
``/v1/load_lora_adapter``, a new directory per version, so the prefix cache never serves a prompt's KV
from an older adapter), or writes the policy's weights with the adapter folded in and has the server
reload them in place (``weights``: ``/collective_rpc reload_weights``; every request then carries the
weights' version as its ``cache_salt``, so no prompt KV computed by older weights is reused). ``weights``
samples at the base model's speed (vLLM's CPU LoRA path runs at about half of it) and serves a full
fine-tune; it writes the whole model each step. Both write under the run directory, so a server given by
``vllm.url`` must see the trainer's files (same host, or a shared mount).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

from training.config import MAX_STOP_STRINGS
from training.engines.base import EngineError, Piece, merge_pieces
from training.engines.vllm_server import VLLMServer, version
from training.engines.vllm_sync import choose_sync
from training.generation import GenerationBatch, cut_completion, encode_prompts, eos_token_ids

BASE_NAME = "base"
ADAPTER_NAME = "policy"
MAX_IN_FLIGHT = 256
"""Most requests open at once (vLLM queues the rest of a step's candidates itself)."""
REQUEST_TIMEOUT_S = 3600.0
MAX_API_STOPS = 4
"""Stop strings a vLLM server takes per request unless started with a larger ``VLLM_MAX_STOP_STRINGS`` (the
runs' own servers are: ``vllm_server.VLLMServer.start``); a user's server (``vllm.url``) gets the first four."""
SYNCS = ("adapter", "weights")
ENGINE_LOG = "engine/vllm.log"
"""The server's log, relative to the run directory (the start event names it so, never by server path)."""


class VLLMEngine:
    name = "vllm"

    def __init__(self, url: str, tokenizer: Any, *, eos_ids: Sequence[int], adapter_dir: Path,
                 server: VLLMServer | None = None, dtype: str | None = None, base_name: str = BASE_NAME,
                 seeded: bool = True, sync_mode: str = "adapter", weights_dir: Path | None = None,
                 max_stops: int = MAX_API_STOPS):
        if sync_mode not in SYNCS:
            raise ValueError(f"sync_mode must be one of {SYNCS}; got {sync_mode!r}")
        self.url = url.rstrip("/")
        self.tokenizer = tokenizer
        self.eos_ids = list(eos_ids)
        self.adapter_dir = adapter_dir
        self.server = server
        self.dtype = dtype
        self.base_name = base_name
        self.model_name = base_name  # ``adapter_name`` once an adapter is loaded
        self.adapter_name = ADAPTER_NAME if server is not None else f"{ADAPTER_NAME}-{uuid.uuid4().hex[:12]}"
        """The name the policy's adapter is served under: ``policy`` on the run's own server; on a server given by
        ``vllm.url``, which other runs may share, a name of this engine's own, so that no run replaces another's
        adapter (a fixed name is loaded in place: the last run to sync would sample for all of them)."""
        self.adapter_version = 0
        self.sync_mode = sync_mode
        self.weights_dir = weights_dir if weights_dir is not None else adapter_dir.parent / "weights"
        self.weights_version = 0
        """Pushes of whole weights so far (``weights``); each request's ``cache_salt`` names it."""
        self.seeded = seeded
        """Send each candidate's seed. Off on the CPU build: vLLM 0.32 rewinds a request's generator when a
        prefill is split across steps, which CPU generators cannot do ('CPU Generator does not use offset' kills
        the engine), so a CPU server samples from its own seeded stream and candidates are not repeatable there."""
        self.max_stops = max_stops
        """Stop strings sent per request (vLLM ends a sequence at them; more than the server takes is a 400)."""
        self.sync_why = ""
        """Why the run syncs by ``sync_mode`` (``sync_reason``), shown in the runtime block."""
        self._pool = ThreadPoolExecutor(max_workers=MAX_IN_FLIGHT, thread_name_prefix="vllm-request")

    # ------------------------------------------------------------------------------------ sampling

    def stream(self, prompts: Sequence[str], sampling: Any, *, n: int, seed: int | None,
               prompt_ids: Sequence[Sequence[int]] | None = None) -> Iterator[Piece]:
        encoded = encode_prompts(self.tokenizer, prompts, sampling, prompt_ids=prompt_ids)
        stops = list(sampling.stop_strings)
        eos = set(self.eos_ids)
        futures = {}
        for p, ids in enumerate(encoded):
            for j in range(n):
                slot = p * n + j
                seeded = seed is not None and self.seeded
                body = self._request(ids, sampling, _slot_seed(seed, slot) if seeded else None, stops)
                futures[self._pool.submit(self._post, "/v1/completions", body)] = (slot, p)
        pending = set(futures)
        try:
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                # the completions that ended together are one piece (one sandbox submission), in slot order
                ready = sorted((futures[fut], fut) for fut in done)
                pieces = [([slot], self._piece(fut.result(), encoded[p], p, prompts, stops, eos))
                          for (slot, p), fut in ready]
                yield [slot for (slot, _), _ in ready], merge_pieces(pieces, prompts)
        finally:
            for fut in pending:
                fut.cancel()

    def _request(self, prompt_ids: list[int], sampling: Any, seed: int | None, stops: list[str]) -> dict:
        greedy = sampling.temperature == 0
        body = {
            "model": self.model_name, "prompt": prompt_ids, "max_tokens": int(sampling.max_new_tokens),
            "temperature": float(sampling.temperature), "top_p": 1.0 if greedy else float(sampling.top_p),
            "top_k": 0 if greedy else int(sampling.top_k),
            # Neutral values, so neither the server's defaults nor a checkpoint's reshape the distribution.
            "min_p": 0.0, "repetition_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0,
            "logprobs": 0, "return_token_ids": True, "stop_token_ids": self.eos_ids, "skip_special_tokens": False,
            "n": 1,
        }
        if stops:
            # vLLM ends the sequence at one of these; the cut itself is ours, on the ids, with every stop
            # string. A stop the server was not sent is still cut by us, but only after the completion ran on to
            # its EOS or max_tokens: sampled tokens thrown away (a user's server takes four unless told more).
            body["stop"] = stops[:self.max_stops]
        if seed is not None:
            body["seed"] = seed
        if self.weights_version:
            body["cache_salt"] = f"weights-{self.weights_version}"  # no prompt KV of older weights is reused
        return body

    def _piece(self, answer: dict, prompt_ids: list[int], p: int, prompts: Sequence[str], stops: list[str],
               eos: set[int]) -> GenerationBatch:
        try:
            choice = answer["choices"][0]
            sampled = [int(t) for t in choice["token_ids"]]
            logprobs = [float(x) for x in choice["logprobs"]["token_logprobs"]]
        except (KeyError, IndexError, TypeError, ValueError) as e:
            raise EngineError(f"the vLLM server at {self.url} answered a completion without token ids and "
                              f"log-probs ({type(e).__name__}: {e}); it needs vLLM >= 0.10 "
                              f"(return_token_ids)") from None
        ids, text, reason, n_sampled = cut_completion(sampled, self.tokenizer, stops, eos, pad_id=-1)
        return GenerationBatch(prompt_ids=[list(prompt_ids)], completion_ids=[ids], texts=[text], prompt_index=[p],
                               finish_reasons=[reason], generated_tokens=[n_sampled], prompts=list(prompts),
                               sampler_logprobs=[logprobs[:len(ids)]])

    # ------------------------------------------------------------------------------------- policy

    def sync(self, model: Any) -> None:
        """Hand ``model`` to the server: the next request samples the new policy. ``adapter``: save its LoRA
        adapter and hot-load it (a model without an adapter, e.g. the probe's base, needs nothing: the base is
        what the server loaded); ``weights``: write its weights with the adapter folded in and reload them."""
        if self.sync_mode == "weights":
            self.push_weights(model)
            return
        if not hasattr(model, "peft_config"):
            return
        self.adapter_version += 1
        target = self.adapter_dir / f"v{self.adapter_version}"
        if target.exists():
            shutil.rmtree(target)
        model.save_pretrained(str(target))
        self.load_adapter(target)
        previous = self.adapter_dir / f"v{self.adapter_version - 1}"
        if previous.exists():  # the server has read it; only the loaded one is kept
            shutil.rmtree(previous, ignore_errors=True)

    def push_weights(self, model: Any) -> None:
        """Write ``model``'s weights (LoRA folded in, in the server's dtype) to ``weights_dir`` and have the
        server reload them in place; later requests are salted with the new version."""
        import torch
        from safetensors.torch import save_file

        from training.policy import _base, merged_state_dict

        dtype = {"bfloat16": torch.bfloat16, "float16": torch.float16}.get(self.dtype or "", torch.float32)
        target = self.weights_dir
        target.mkdir(parents=True, exist_ok=True)
        if not (target / "config.json").exists():
            _base(model).config.save_pretrained(str(target))
        partial = target / "model.safetensors.partial"  # not a *.safetensors the server would read
        save_file(merged_state_dict(model, dtype), str(partial))
        os.replace(partial, target / "model.safetensors")
        self._post("/collective_rpc", {"method": "reload_weights", "kwargs": {"weights_path": str(target)}},
                   raw=True, missing=(
                       f"vllm.sync: weights reloads the policy through the server's /collective_rpc, which the "
                       f"server at {self.url} does not serve: vLLM serves it only when started with "
                       f"VLLM_SERVER_DEV_MODE=1. Restart it so, or set vllm.sync: adapter (LoRA runs)"))
        self.weights_version += 1

    def load_adapter(self, path: str | Path) -> None:
        """Sample through the PEFT adapter in ``path`` from now on (replacing the one loaded before)."""
        self._post("/v1/load_lora_adapter", {"lora_name": self.adapter_name, "lora_path": str(path),
                                             "load_inplace": self.model_name == self.adapter_name}, raw=True)
        self.model_name = self.adapter_name

    def describe(self) -> dict:
        return {"name": self.name, "version": version(self.url), "url": self.url, "dtype": self.dtype,
                "sync": self.sync_mode, "sync_why": self.sync_why, "log": ENGINE_LOG if self.server else None}

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self.server is not None:
            self.server.stop()
        elif self.model_name == self.adapter_name:  # a shared server: take this run's adapter off it
            try:
                self._post("/v1/unload_lora_adapter", {"lora_name": self.adapter_name}, raw=True, timeout=30.0)
            except EngineError:
                pass  # the server is gone or refuses: nothing of this run is left to sample from either way
            self.model_name = self.base_name

    # -------------------------------------------------------------------------------------- http

    def _post(self, path: str, body: dict, raw: bool = False, missing: str | None = None,
              timeout: float = REQUEST_TIMEOUT_S) -> Any:
        data = json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                out = resp.read()
        except urllib.error.HTTPError as e:
            if e.code == 404 and missing:
                raise EngineError(missing) from None
            detail = e.read().decode(errors="replace")[:2000]
            raise EngineError(f"the vLLM server at {self.url} refused {path} (HTTP {e.code}): {detail}") from None
        except OSError as e:
            raise EngineError(self._gone(path, e)) from None
        return out.decode(errors="replace") if raw else json.loads(out)

    def _gone(self, path: str, error: Exception) -> str:
        if self.server is None:
            return f"the vLLM server at {self.url} did not answer {path}: {type(error).__name__}: {error}"
        try:  # a killed server drops its connections a moment before it is reaped
            self.server.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return (f"the vLLM server at {self.url} did not answer {path} ({type(error).__name__}: {error}); its "
                    f"log ({self.server.log_path}) ends:\n{self.server.log_tail()}")
        return (f"the vLLM server died (exit code {self.server.proc.returncode}) during {path}; its log "
                f"({self.server.log_path}) ends:\n{self.server.log_tail()}")


def _slot_seed(seed: int, slot: int) -> int:
    return (seed * 1_000_003 + slot) % (2**31 - 1)


def start_vllm_engine(config: Any, model: Any, tokenizer: Any, *, run_dir: Any, stop: Callable[[], bool] | None = None,
                      log: Callable[[str], None] | None = None, max_prompt_tokens: int | None = None,
                      model_config: Any = None) -> VLLMEngine:
    """The run's engine: its own server (``vllm.url`` null) or the given one, sampling ``model``.

    The server loads ``model_config`` (default ``config.model``: its base, with ``adapters`` merged); a
    PEFT ``model`` (the policy being trained, or an evaluated adapter) has its adapter loaded too, and
    ``sync`` reloads it after every update."""
    run_dir = Path(run_dir)
    engine_dir = run_dir / "engine"
    vcfg = config.vllm
    model_config = model_config if model_config is not None else config.model
    dtype = "bfloat16" if vcfg.dtype == "auto" else vcfg.dtype
    import torch

    cuda = torch.cuda.is_available()
    mode, why = choose_sync(vcfg.sync, full_finetune=config.model.lora is None, own_server=vcfg.url is None,
                             cuda=cuda)
    server = None
    if vcfg.url is None:
        base = _served_base(model_config, engine_dir)
        max_len = vcfg.max_model_len
        if max_len is None and max_prompt_tokens is not None:
            need = max_prompt_tokens + config.sampling.max_new_tokens
            max_len = min(_model_max_len(model) or need, -(-need // 256) * 256)
        server = VLLMServer.start(base, log_path=run_dir / ENGINE_LOG, dtype=dtype,
                                  max_lora_rank=_adapter_rank(model) if mode == "adapter" else None,
                                  max_model_len=max_len, gpu_memory_utilization=vcfg.gpu_memory_utilization,
                                  tensor_parallel_size=vcfg.tensor_parallel_size, seed=config.train.seed,
                                  reloadable_weights=mode == "weights", stop=stop, log=log)
        url = server.url
    else:
        url = vcfg.url.strip()

    # a server of our own on a machine without CUDA is the CPU build (see VLLMEngine.seeded)
    seeded = server is None or cuda
    engine = VLLMEngine(url, tokenizer, eos_ids=eos_token_ids(model, tokenizer), adapter_dir=engine_dir / "adapter",
                        server=server, dtype=dtype if server else vcfg.dtype, seeded=seeded, sync_mode=mode,
                        weights_dir=engine_dir / "weights", max_stops=MAX_STOP_STRINGS if server else MAX_API_STOPS)
    engine.sync_why = why
    try:
        if server is None:
            engine.base_name = engine.model_name = _served_model(url)
        engine.sync(model)
    except BaseException:
        engine.close()
        raise
    return engine


def _adapter_rank(model: Any) -> int | None:
    """The LoRA rank of a PEFT ``model`` (the server's ``--max-lora-rank``); None: no adapter to serve."""
    configs = getattr(model, "peft_config", None) or {}
    return max((int(c.r) for c in configs.values() if getattr(c, "r", None)), default=None)


def _served_base(model_config: Any, engine_dir: Path) -> str:
    """What the server loads: the run's base model, or, when ``model.adapters`` were merged into it at load,
    that merged base written once under ``engine/base`` (the server must start from the trainer's weights)."""
    if not model_config.adapters:
        return model_config.name_or_path
    target = engine_dir / "base"
    if not (target / "config.json").exists():
        from training.policy import load_tokenizer, merge_adapter

        from transformers import AutoModelForCausalLM

        base = AutoModelForCausalLM.from_pretrained(model_config.name_or_path)
        for adapter in model_config.adapters:
            base = merge_adapter(base, adapter)
        base.save_pretrained(str(target))
        load_tokenizer(model_config.name_or_path).save_pretrained(str(target))
    return str(target)


def _served_model(url: str) -> str:
    """The base model's name on a server the user runs (the first it lists)."""
    try:
        with urllib.request.urlopen(f"{url.rstrip('/')}/v1/models", timeout=30) as resp:
            models = json.loads(resp.read()).get("data") or []
    except (OSError, ValueError) as e:
        raise EngineError(f"vllm.url: the server at {url} did not answer /v1/models ({type(e).__name__}: {e}); "
                          "start it with --enable-lora, or set vllm.url: null to let the run start one") from None
    if not models:
        raise EngineError(f"vllm.url: the server at {url} serves no model")
    return str(models[0]["id"])


def _model_max_len(model: Any) -> int | None:
    inner = model
    while hasattr(inner, "get_base_model") and inner is not inner.get_base_model():
        inner = inner.get_base_model()
    return getattr(getattr(inner, "config", None), "max_position_embeddings", None)

