"""vllm.sync without a vLLM server: which way the policy reaches the engine, the merged weights it is sent
as, the requests' cache salt, and the message when a server cannot reload weights. The live server's side
is in test_vllm_engine.py."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import torch

from training.config import ConfigError, ModelConfig, SamplingConfig, config_from_dict
from training.engines import EngineError
from training.engines.vllm import VLLMEngine
from training.engines.vllm_sync import resolve_sync, sync_reason
from training.policy import load_policy, merged_state_dict


@pytest.mark.parametrize("requested, full, own, cuda, expected", [
    ("auto", False, True, False, "weights"),   # the CPU build's LoRA path runs at about half speed
    ("auto", False, True, True, "adapter"),    # a GPU: an adapter is a few MB, the weights the whole model
    ("auto", False, False, False, "adapter"),  # a server the user runs may not reload weights
    ("auto", True, False, True, "weights"),    # a full fine-tune has no adapter to load
    ("auto", True, True, True, "weights"),
    ("adapter", False, True, False, "adapter"),
    ("weights", False, False, True, "weights"),
])
def test_auto_sync_picks_weights_for_a_full_fine_tune_and_the_cpu_build_else_the_adapter(
        requested, full, own, cuda, expected):
    assert resolve_sync(requested, full_finetune=full, own_server=own, cuda=cuda) == expected
    why = sync_reason(requested, full_finetune=full, own_server=own, cuda=cuda)
    assert why.startswith("auto: " if requested == "auto" else "set in the run config")
    if requested == "auto" and own and not cuda and not full:  # the CPU choice says what it rests on
        assert "measured" in why and "RESULTS.md" in why and "vllm.sync: adapter" in why


def test_a_full_fine_tune_with_vllm_needs_weights_sync_and_the_refusal_names_vllm_sync():
    with pytest.raises(ConfigError, match="vllm.sync") as e:
        config_from_dict({"sampling": {"engine": "vllm"}, "model": {"lora": None}, "vllm": {"sync": "adapter"}})
    assert "weights" in str(e.value)
    for sync in ("auto", "weights"):
        cfg = config_from_dict({"sampling": {"engine": "vllm"}, "model": {"lora": None}, "vllm": {"sync": sync}})
        assert cfg.vllm.sync == sync
    with pytest.raises(ConfigError, match="vllm.sync"):
        config_from_dict({"vllm": {"sync": "merged"}})


def test_merged_weights_are_the_merged_models_under_checkpoint_names_and_leave_the_policy_untouched(
        tiny_model_dir):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    policy = load_policy(ModelConfig(name_or_path=str(tiny_model_dir)), kl_coef=0.0)
    model = policy.model
    for name, w in model.named_parameters():
        if "lora_B" in name:  # PEFT starts B at zero: make the adapter do something
            w.data.normal_(0.0, 0.1)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    merged = merged_state_dict(model)

    assert {k: v for k, v in model.state_dict().items() if not torch.equal(v, before[k])} == {}  # untouched
    assert not any(m.merged for m in model.modules() if hasattr(m, "merged"))
    reference = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir))
    names = set(reference.state_dict())
    tied = {"lm_head.weight"} if reference.config.tie_word_embeddings else set()
    assert set(merged) == names - tied  # the checkpoint's names; a tied output embedding is left out
    import copy

    expected = copy.deepcopy(model).merge_and_unload().state_dict()
    changed = 0
    for name, tensor in merged.items():
        assert torch.allclose(tensor, expected[name], atol=1e-6), name
        changed += not torch.equal(tensor, reference.state_dict()[name])
    assert changed >= 4 * reference.config.num_hidden_layers  # every adapted linear layer moved
    half = merged_state_dict(model, torch.bfloat16)
    assert all(t.dtype == torch.bfloat16 for t in half.values() if t.is_floating_point())

    # the merged weights are the policy: a plain model loading them computes what the adapter computes
    reference.load_state_dict(merged, strict=False)
    reference.tie_weights()
    ids = torch.tensor([[1, 5, 9, 12, 40, 7]])
    with torch.no_grad():
        assert torch.allclose(reference(ids).logits, model(input_ids=ids).logits, atol=1e-4)


class _NoDevEndpoints(BaseHTTPRequestHandler):
    """A server without vLLM's development endpoints (started without VLLM_SERVER_DEV_MODE=1)."""

    def do_POST(self):  # noqa: N802 (http.server's name)
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(404)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(json.dumps({"detail": "Not Found"}).encode())

    def log_message(self, *args):
        pass


def test_weights_sync_to_a_server_that_cannot_reload_says_how_to_start_it_or_which_sync_to_use(
        tmp_path, qwen3_5_model_dir):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _NoDevEndpoints)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    policy = load_policy(ModelConfig(name_or_path=str(qwen3_5_model_dir)), kl_coef=0.0)
    engine = VLLMEngine(f"http://127.0.0.1:{server.server_address[1]}", policy.tokenizer, eos_ids=[0],
                        adapter_dir=tmp_path / "engine" / "adapter", dtype="bfloat16", sync_mode="weights")
    try:
        with pytest.raises(EngineError, match="VLLM_SERVER_DEV_MODE=1") as e:
            engine.sync(policy.model)
        assert "vllm.sync: adapter" in str(e.value)
        assert engine.weights_version == 0
        written = sorted(p.name for p in (tmp_path / "engine" / "weights").iterdir())
        assert written == ["config.json", "model.safetensors"]  # no partial file left beside them
    finally:
        engine.close()
        server.shutdown()


def test_every_request_after_a_weights_push_is_salted_with_its_version(tmp_path):
    engine = VLLMEngine("http://127.0.0.1:9", None, eos_ids=[0], adapter_dir=Path(tmp_path) / "adapter",
                        sync_mode="weights")
    sampling = SamplingConfig(max_new_tokens=4)
    try:
        assert "cache_salt" not in engine._request([1, 2], sampling, None, [])
        engine.weights_version = 1
        first = engine._request([1, 2], sampling, None, [])["cache_salt"]
        engine.weights_version = 2
        assert engine._request([1, 2], sampling, None, [])["cache_salt"] != first
    finally:
        engine.close()
