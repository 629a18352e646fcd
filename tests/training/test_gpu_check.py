"""benchmarks/gpu_check.py --tiny: the GPU check's own code path (Qwen3.5's architecture built from a
config with random weights, train(), the table) on CPU, so the script a GPU session runs is known to work."""

import json
import os
import sys

import pytest
import torch

from benchmarks import gpu_check, gpu_check_rows


def test_the_gpu_check_runs_qwen3_5_s_architecture_through_train_and_reports_it(tmp_path, capsys):
    out = tmp_path / "gpu_check.json"
    code = gpu_check.main(["--tiny", "--no-write", "--steps", "2", "--prompts", "2", "--candidates", "2",
                           "--max-new-tokens", "8", "--micro-batch", "4", "--json-out", str(out)])
    assert code == 0
    result = json.loads(out.read_text())
    runtime = result["runtime"]
    assert runtime["architecture"] == "Qwen3_5ForCausalLM"
    assert runtime["layer_types"] == {"linear_attention": 3, "full_attention": 1}
    assert set(runtime["kernels"]) == {"attention", "gated_delta_rule", "gated_delta_rule_decode", "causal_conv1d",
                                       "refused", "rerouted"}
    assert runtime["kernels"]["refused"] == runtime["kernels"]["rerouted"] == []  # no known-bad combination on CPU
    assert runtime["linear_attention"]["sampler"] == "recurrent" and runtime["linear_attention"]["trainer"] == "chunked"
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


def test_the_rows_run_eager_vs_compiled_and_fla_vs_torch_most_informative_first():
    rows = gpu_check_rows.plan(gpu_check_rows.SHAPES, ["off", "on"], ["fla", "torch"])
    assert len({r.name for r in rows}) == 12
    assert rows[0].name == "16x8x256 compile=on kernels=fla"  # the target row before the others
    assert [r.shape.name for r in rows[::4]] == ["16x8x256", "8x4x128", "32x8x512"]
    assert {(s.prompts, s.candidates, s.max_new_tokens) for s in gpu_check_rows.SHAPES} == {
        (8, 4, 128), (16, 8, 256), (32, 8, 512)}
    assert gpu_check_rows.BUDGET_S < 8 * 60  # the whole check, every row's limit capped by what is left of it


def test_each_row_runs_in_its_own_process_and_reports_what_the_trainer_says_of_its_sampling(tmp_path, capsys):
    out = tmp_path / "rows.jsonl"
    code = gpu_check.main(["--rows", "--tiny", "--no-write", "--shapes", "2x2x8", "--compile", "on",
                           "--kernels", "fla,torch", "--jsonl-out", str(out), "--log-dir", str(tmp_path / "logs")])
    assert code == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["row"] for r in rows] == ["2x2x8 compile=on kernels=fla", "2x2x8 compile=on kernels=torch"]
    fla, torch_row = rows
    if gpu_check_rows.fla_installed() is None:
        assert fla["status"] == "skipped" and "not installed" in fla["reason"]
    assert torch_row["status"] == "ok" and torch_row["compile_requested"] == "on"
    assert torch_row["kernels"]["gated_delta_rule"] == "torch" and torch_row["mismatch_kl"] < 1e-6
    sampling = torch_row["sampling"]  # what start.runtime.sampling said, never what was asked for
    if sampling is None:
        assert torch_row["compiled"] is None and "start.runtime.sampling absent" in torch_row["compile_note"]
    else:
        assert torch_row["compiled"] == sampling["compiled"]
    printed = capsys.readouterr().out
    assert "| 2x2x8 compile=on kernels=torch | ok |" in printed and "mismatch per kernel set" in printed


def test_a_hung_row_costs_that_row_and_not_the_others(tmp_path, monkeypatch):
    def command(row, out, tiny):
        if row.compile == "off":  # hangs, with a child of its own: the whole group must go
            return [sys.executable, "-c", ("import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', "
                                           "'import time; time.sleep(120)']); time.sleep(120)")]
        result = {"median": {"gen_tok_s": 10.0, "update_tok_s": 20.0, "step_s": 1.0, "rollout_s": 0.5,
                             "update_s": 0.5, "mismatch_kl": 1e-3, "logprob_diff_max": 0.2},
                  "runtime": {"kernels": {"gated_delta_rule": "torch", "gated_delta_rule_decode": "fla",
                                          "rerouted": [{"kernel": "gated_delta_rule"}]}},
                  "sampling": {"compiled": True, "graphs": True, "batch_buckets": [4], "lora": "merged"}}
        return [sys.executable, "-c", f"import json, sys; open(sys.argv[1], 'w').write(json.dumps({result!r}))",
                str(out)]

    monkeypatch.setattr(gpu_check_rows, "child_command", command)
    monkeypatch.setattr(gpu_check_rows, "fla_installed", lambda: "0.6.0")
    out = tmp_path / "rows.jsonl"
    code = gpu_check_rows.main(["--tiny", "--no-write", "--shapes", "2x2x8", "--kernels", "torch", "--row-limit-s",
                                "3", "--jsonl-out", str(out), "--log-dir", str(tmp_path)])
    assert code == 0
    on, off = [json.loads(line) for line in out.read_text().splitlines()]
    assert off["status"] == "timeout" and 2.5 < off["wall_s"] < 30 and "3 s limit" in off["reason"]
    assert on["status"] == "ok" and on["compiled"] is True and on["compile_note"] is None
    assert gpu_check_rows.kernel_set(on) == "chunked torch, decode fla (rerouted)"
    assert gpu_check_rows.mismatch_by_kernel_set([on, off]) == {
        "chunked torch, decode fla (rerouted)": {"rows": 1, "mismatch_kl": 1e-3, "logprob_diff_max": 0.2}}


def test_a_row_that_cannot_start_within_the_budget_is_reported_skipped(tmp_path):
    out = tmp_path / "rows.jsonl"
    code = gpu_check_rows.main(["--tiny", "--no-write", "--kernels", "torch", "--budget-s", "0",
                                "--jsonl-out", str(out)])
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert code == 1 and len(rows) == 6 and all(r["status"] == "skipped" and "budget" in r["reason"] for r in rows)
