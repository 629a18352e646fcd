"""benchmarks/gpu_check.py --tiny: the GPU check's own code path (Qwen3.5's architecture built from a
config with random weights, train(), the table) on CPU, so the script a GPU session runs is known to work."""

import json
import os

import pytest
import torch

from benchmarks import gpu_check


def test_the_gpu_check_runs_qwen3_5_s_architecture_through_train_and_reports_it(tmp_path, capsys):
    out = tmp_path / "gpu_check.json"
    code = gpu_check.main(["--tiny", "--no-write", "--steps", "2", "--prompts", "2", "--candidates", "2",
                           "--max-new-tokens", "8", "--micro-batch", "4", "--json-out", str(out)])
    assert code == 0
    result = json.loads(out.read_text())
    runtime = result["runtime"]
    assert runtime["architecture"] == "Qwen3_5ForCausalLM"
    assert runtime["layer_types"] == {"linear_attention": 3, "full_attention": 1}
    assert set(runtime["kernels"]) == {"attention", "gated_delta_rule", "causal_conv1d"}
    assert result["median"]["mismatch_kl"] < 1e-6  # float32 on CPU: sampler and trainer agree
    printed = capsys.readouterr().out
    assert "gated_delta_rule `torch`" in printed and "mismatch KL" in printed


def test_the_9b_shape_is_qwen3_5_9b_s_text_stack():
    from transformers import Qwen3_5TextConfig

    config = Qwen3_5TextConfig(**gpu_check.SHAPE_9B)
    assert config.num_hidden_layers == 32 and config.hidden_size == 4096 and config.vocab_size == 248320
    assert config.layer_types.count("linear_attention") == 24 and config.layer_types.count("full_attention") == 8
    assert (config.linear_num_key_heads, config.linear_num_value_heads, config.linear_key_head_dim) == (16, 32, 128)
    assert (config.num_attention_heads, config.head_dim, config.num_key_value_heads) == (16, 256, 4)


@pytest.mark.slow
@pytest.mark.e2e
def test_the_gpu_check_with_engine_vllm_samples_through_a_vllm_server_where_the_machine_has_one(tmp_path):
    from training.engines.vllm_server import unavailable_reason

    if unavailable_reason():
        if os.environ.get("CI"):
            pytest.fail(unavailable_reason())
        pytest.skip(unavailable_reason())
    out = tmp_path / "gpu_check.json"
    code = gpu_check.main(["--tiny", "--engine", "vllm", "--staleness", "1", "--no-write", "--steps", "3",
                           "--prompts", "2", "--candidates", "2", "--max-new-tokens", "8", "--micro-batch", "4",
                           "--json-out", str(out)])
    assert code == 0
    result = json.loads(out.read_text())
    assert result["runtime"]["engine"]["name"] == "vllm" and result["facts"]["engine"].startswith("vllm")
    assert "sampling ahead" in result["facts"]["engine"] and "`vllm.sync: auto`" in result["facts"]["engine"]
    # auto: merged weights reloaded on the CPU build (its LoRA path runs at half speed), the adapter on a GPU
    assert result["runtime"]["engine"]["sync"] == ("adapter" if torch.cuda.is_available() else "weights")
    assert result["median"]["staleness"] == 1.0  # the timed steps (after step 1) were sampled one update behind
    assert result["median"]["logprob_diff_max"] > 0  # bfloat16 sampler vs float32 trainer: seen


def test_the_gpu_check_falls_back_to_hf_and_says_why_where_vllm_is_missing(monkeypatch, tmp_path):
    monkeypatch.setenv("CRUCIBLE_VLLM_PYTHON", str(tmp_path / "none" / "python"))
    engine, note = gpu_check.engine_for("vllm")
    assert engine == "hf" and "vLLM is not on this machine" in note
