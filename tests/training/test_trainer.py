"""The RL loop on the tiny model: events, LoRA-only updates, gradient accumulation, stop and resume."""

import json
import os
import signal
from pathlib import Path

import pytest
import torch

from tests.training.conftest import (PROBLEMS, lora_state, make_trainer, record_gradients, tiny_run_config,
                                    watch_and)
from training import metrics as metric_registry
from training.events import parse_event, read_events
from training.trainer import train

DESIGN_METRICS = {"reward/mean", "reward/pass_rate", "reward/syntax", "reward/efficiency", "reward/conciseness",
                  "reward/format", "pass@1/train", "kl", "loss/policy", "loss/kl", "clip_frac", "entropy",
                  "grad_norm", "lr", "tokens_per_s", "time/rollout_s", "time/sandbox_s", "time/update_s",
                  "zero_variance_groups", "rollout/mismatch_kl", "rollout/logprob_diff_max",
                  "rollout/truncated_frac", "completion_len/max"}


# PeftModel.from_pretrained (the merged model's check) still asks transformers for the deprecated v4 name.
@pytest.mark.filterwarnings("ignore:.*is_gradient_checkpointing.*:FutureWarning")
def test_events_follow_the_contract_in_order(tmp_path, tiny_model_dir, problems_file, runner):
    cfg = tiny_run_config(tiny_model_dir, problems_file, train={"checkpoint_every": 1, "save_merged": True})
    assert train(cfg, tmp_path / "run", runner=runner, progress=False) == "succeeded"
    events = read_events(tmp_path / "run" / "events.jsonl")
    kinds = [e["event"] for e in events]
    assert kinds == ["start", "eval", "step", "problem", "problem", "checkpoint",
                     "step", "problem", "problem", "eval", "checkpoint", "checkpoint", "done"]
    assert all(isinstance(e["time"], float) for e in events)
    start, eval0 = events[0], events[1]
    assert start["config"]["sampling"]["candidates_per_problem"] == 4 and start["model"] == str(tiny_model_dir)
    runtime = start["runtime"]
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(tiny_model_dir)
    assert runtime["architecture"] == config.architectures[0] and runtime["dtype"] == "float32"
    assert runtime["device"] == "cpu" and runtime["torch"] and runtime["transformers"] and runtime["peft"]
    assert sum(runtime["layer_types"].values()) == config.num_hidden_layers
    assert runtime["kernels"]["attention"] == "sdpa" and runtime["warnings"] == []
    assert runtime["flush_denormal"] is True  # cpu_float_mode, set when the policy loaded (x86 here)
    if "linear_attention" in runtime["layer_types"]:  # no fla / causal-conv1d on this machine
        assert runtime["kernels"]["gated_delta_rule"] == "torch" and runtime["kernels"]["causal_conv1d"] == "torch"
    assert runtime["sampling"] == {"compiled": False, "graphs": False, "batch_buckets": [],
                                   "eager_because": "sampling.compile is off here", "lora": "merged"}
    assert eval0["step"] == 0 and eval0["split"] == "heldout" and 0.0 <= eval0["pass@1"] <= 1.0
    assert set(eval0["pass@k"]) == {"2"}  # pass@1 has its own field
    for ev in (eval0, events[-4]):  # before and after training: each held-out sample as a train candidate is
        assert ev["event"] == "eval" and set(ev["per_problem"]) == {"mul"}
        mul = ev["per_problem"]["mul"]
        assert mul["n"] == 2 and len(mul["candidates"]) == 2
        assert sum(c["result"]["status"] == "passed" for c in mul["candidates"]) == mul["c"]
        for cand in mul["candidates"]:
            assert set(cand) >= {"code", "reward", "rewards", "result", "truncated"}
            assert cand["code"].startswith("def mul(a, b):\n")
            assert set(cand["rewards"]) == {"pass_rate", "syntax", "efficiency", "conciseness", "format"}
            assert cand["result"]["tests_total"] == 2 and "stderr" in cand["result"] and "flags" in cand["result"]
    assert [type(parse_event(e)).__name__.lower() for e in events] == kinds  # each line follows its definition
    step = events[2]
    assert step["step"] == 1 and DESIGN_METRICS <= set(step["metrics"])
    for e in events:  # every key the trainer emits is defined once, in training/metrics.py
        assert metric_registry.unknown_keys(e.get("metrics", {})) == []
    assert step["metrics"]["clip_frac"] == 0.0  # one epoch, one minibatch: ratio exactly 1
    assert step["metrics"]["kl"] == pytest.approx(0.0, abs=1e-6)  # adapters start at zero: policy == reference
    problem = events[3]
    assert problem["step"] == 1 and problem["problem_id"] in {p["id"] for p in PROBLEMS if p["split"] == "train"}
    assert len(problem["candidates"]) == 4
    assert problem["solve_rate"] == sum(c["result"]["status"] == "passed" for c in problem["candidates"]) / 4
    assert problem["pass_rate"] == problem["solve_rate"]  # the old name, still written
    for cand in problem["candidates"]:
        assert set(cand) >= {"code", "reward", "rewards", "result", "truncated"}
        assert "reward_normalized" not in cand  # reward.normalize: sum (the default) adds nothing
        assert cand["code"].startswith(next(p["prompt"] for p in PROBLEMS if p["id"] == problem["problem_id"]))
        assert set(cand["rewards"]) == {"pass_rate", "syntax", "efficiency", "conciseness", "format"}
        assert cand["result"]["status"] in {"passed", "failed", "error", "syntax_error", "timeout", "memory",
                                            "output_limit", "killed"}
    assert events[5] == {**events[5], "step": 1, "path": "checkpoints/step-1", "kind": "adapter"}
    assert events[-3] == {**events[-3], "step": 2, "path": "checkpoints/step-2", "kind": "adapter"}
    assert events[-2] == {**events[-2], "step": 2, "path": "checkpoints/final-merged", "kind": "merged"}
    assert events[-1]["status"] == "succeeded"
    assert (tmp_path / "run" / "checkpoints" / "step-2" / "adapter_model.safetensors").is_file()
    _assert_merged_is_the_base_plus_the_final_adapter(tmp_path / "run" / "checkpoints", tiny_model_dir)


def _assert_merged_is_the_base_plus_the_final_adapter(checkpoints: Path, base_dir: Path) -> None:
    """final-merged loads on its own (weights and tokenizer) and computes what the base model with the
    last step's adapter computes, an adapter that moved the model: the merge folded the training in."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    merged_dir = checkpoints / "final-merged"
    merged = AutoModelForCausalLM.from_pretrained(str(merged_dir), dtype=torch.float32).eval()
    assert not [k for k in merged.state_dict() if "lora_" in k]  # a plain model, no adapter layers left
    text = "def add(a, b):\n    return a + b\n"
    ids = AutoTokenizer.from_pretrained(str(merged_dir))(text, return_tensors="pt").input_ids
    assert ids.tolist() == AutoTokenizer.from_pretrained(str(base_dir))(text, return_tensors="pt").input_ids.tolist()
    base = AutoModelForCausalLM.from_pretrained(str(base_dir), dtype=torch.float32).eval()
    with torch.no_grad():
        base_logits = base(ids).logits  # (1, T, vocab)
        adapted = PeftModel.from_pretrained(base, str(checkpoints / "step-2")).eval()
        adapted_logits, merged_logits = adapted(ids).logits, merged(ids).logits
    moved = (adapted_logits - base_logits).abs().max().item()
    assert moved > 1e-3, f"the final adapter barely moved the model ({moved}): the comparison would prove nothing"
    torch.testing.assert_close(merged_logits, adapted_logits, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("checkpointing", [False, True], ids=["plain", "activation-checkpointing"])
def test_one_step_changes_only_the_lora_parameters(tmp_path, tiny_model_dir, train_problems_file, runner,
                                                   checkpointing):
    cfg = tiny_run_config(tiny_model_dir, train_problems_file, train={"steps": 1},
                          model={"gradient_checkpointing": checkpointing})
    trainer = make_trainer(cfg, tmp_path / "run", runner)
    before = {k: v.detach().clone() for k, v in trainer.policy.model.state_dict().items()}
    trainer.run()
    after = trainer.policy.model.state_dict()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed and all("lora_" in k for k in changed)
    assert any("lora_B" in k for k in changed)


# The test wraps optimizer.step to record gradients; torch warns that the scheduler saw a new step.
@pytest.mark.filterwarnings("ignore:Seems like `optimizer.step\\(\\)` has been overridden:UserWarning")
def test_micro_batch_size_never_changes_the_result(tmp_path, tiny_model_dir, train_problems_file, runner):
    # The property: a minibatch's accumulated gradient does not depend on how it is split into
    # micro-batches (global normalisers), whatever the grouping of prompts and packing of completions
    # per micro-batch. Compared where it is defined, at the first optimizer step (same weights, same
    # minibatch); later steps start from weights that Adam's first step moved by ~lr * sign(g), which
    # amplifies float rounding (~1e-7) in near-zero gradient entries, so they are not compared.
    grads = []
    for micro in (8, 3):
        cfg = tiny_run_config(tiny_model_dir, train_problems_file, train={"steps": 1},
                              ppo={"micro_batch_size": micro, "minibatch_size": 4, "epochs_per_batch": 2})
        trainer = make_trainer(cfg, tmp_path / f"run-{micro}", runner)
        recorded = record_gradients(trainer)
        trainer.run()
        assert len(recorded) == 4  # 8 candidates / minibatch 4 x 2 epochs
        grads.append(recorded[0])
    assert grads[0].keys() == grads[1].keys() and grads[0]
    assert any(g.abs().max() > 0 for g in grads[0].values())  # a real gradient, not all zeros
    for key, g in grads[0].items():
        err = (g - grads[1][key]).abs().max().item()
        assert err <= 1e-4 * g.abs().max().item() + 1e-9, (key, err)


def _with_never_solved(tmp_path, train_problems_file):
    """The train problems plus three that no candidate solves and whose conciseness is 1 whatever the
    candidate (a very long reference): under pass_rate + conciseness weights their groups have zero
    variance, while the others' vary with the length of what the tiny model writes."""
    rows = [json.loads(line) for line in train_problems_file.read_text().splitlines()]
    rows += [{"id": f"never-{i}", "kind": "function", "prompt": f"def f{i}(x):\n", "entry_point": f"f{i}",
              "tests": ["assert False"], "reference_solution": "#" * 5000, "split": "train"} for i in range(3)]
    path = tmp_path / "with-never.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.parametrize("dynamic", [False, True], ids=["plain", "dynamic"])
def test_sigterm_checkpoints_and_a_resumed_run_matches_an_uninterrupted_one(tmp_path, tiny_model_dir,
                                                                               train_problems_file, runner, dynamic):
    cfg = tiny_run_config(tiny_model_dir, train_problems_file, train={"steps": 2, "checkpoint_every": 0})
    if dynamic:  # seed 3 starts step 2 with two never-solved problems: it needs a second round
        cfg = tiny_run_config(tiny_model_dir, _with_never_solved(tmp_path, train_problems_file),
                              train={"steps": 2, "checkpoint_every": 0, "seed": 3},
                              sampling={"dynamic": True, "max_rounds": 3},
                              reward={"weights": {"pass_rate": 0.5, "syntax": 0.0, "efficiency": 0.0,
                                                  "conciseness": 0.5, "format": 0.0}})
    assert train(cfg, tmp_path / "straight", runner=runner, progress=False) == "succeeded"

    interrupted = tmp_path / "interrupted"
    watcher = watch_and(lambda: os.kill(os.getpid(), signal.SIGTERM), interrupted / "events.jsonl", 1)
    assert train(cfg, interrupted, runner=runner, progress=False) == "cancelled"
    watcher.join()
    events = read_events(interrupted / "events.jsonl")
    assert [e["event"] for e in events][-2:] == ["checkpoint", "done"]
    assert events[-1]["status"] == "cancelled" and events[-2]["path"] == "checkpoints/step-1"
    assert sum(e["event"] == "step" for e in events) == 1

    assert train(cfg, interrupted, resume=True, runner=runner, progress=False) == "succeeded"
    resumed = read_events(interrupted / "events.jsonl")
    restart = max(i for i, e in enumerate(resumed) if e["event"] == "start")
    assert resumed[restart]["resumed_from"] == 1
    straight = read_events(tmp_path / "straight" / "events.jsonl")
    step2 = lambda evs: next(e for e in evs if e["event"] == "step" and e["step"] == 2)  # noqa: E731
    a, b = step2(straight)["metrics"], step2(resumed[restart:])["metrics"]
    for key in ("reward/mean", "loss/policy", "kl", "grad_norm", "entropy", "lr"):
        assert a[key] == pytest.approx(b[key], rel=1e-4, abs=1e-6), key
    codes = lambda evs, s: [c["code"] for e in evs if e["event"] == "problem" and e["step"] == s  # noqa: E731
                            for c in e["candidates"]]
    assert codes(straight, 2) == codes(resumed[restart:], 2)
    if dynamic:
        for key in ("sampling/groups_sampled", "sampling/groups_kept", "sampling/rounds", "zero_variance_groups"):
            assert a[key] == b[key], key
        assert a["sampling/rounds"] >= 2 and a["sampling/groups_kept"] == 2
        groups = lambda evs: [(e["problem_id"], e["round"], e["used"]) for e in evs  # noqa: E731
                              if e["event"] == "problem" and e["step"] == 2]
        assert groups(straight) == groups(resumed[restart:])

    from safetensors.torch import load_file
    wa = load_file(str(tmp_path / "straight" / "checkpoints" / "step-2" / "adapter_model.safetensors"))
    wb = load_file(str(interrupted / "checkpoints" / "step-2" / "adapter_model.safetensors"))
    assert all(torch.allclose(wa[k], wb[k], atol=1e-6) for k in wa)


def test_a_stop_file_cancels_before_the_first_step(tmp_path, tiny_model_dir, train_problems_file, runner):
    cfg = tiny_run_config(tiny_model_dir, train_problems_file)
    out = tmp_path / "run"
    out.mkdir()
    (out / "STOP").touch()
    assert train(cfg, out, runner=runner, progress=False) == "cancelled"
    events = read_events(out / "events.jsonl")
    assert [e["event"] for e in events] == ["start", "checkpoint", "done"]
    assert events[-2]["path"] == "checkpoints/step-0" and events[-1]["status"] == "cancelled"


def test_an_error_writes_done_failed_and_propagates(tmp_path, tiny_model_dir, runner):
    only_heldout = tmp_path / "heldout.jsonl"
    only_heldout.write_text(json.dumps(PROBLEMS[-1]) + "\n")
    cfg = tiny_run_config(tiny_model_dir, only_heldout)
    with pytest.raises(ValueError, match="no problem with split 'train'"):
        train(cfg, tmp_path / "run", runner=runner, progress=False)
    done = read_events(tmp_path / "run" / "events.jsonl")[-1]
    assert done["event"] == "done" and done["status"] == "failed" and "split 'train'" in done["error"]


def test_a_run_skips_problems_marked_excluded(tmp_path, tiny_model_dir, runner):
    exported = tmp_path / "exported.jsonl"  # a web app export whose only train problem was excluded
    exported.write_text(json.dumps({**PROBLEMS[0], "excluded": True}) + "\n" + json.dumps(PROBLEMS[-1]) + "\n")
    with pytest.raises(ValueError, match="no problem with split 'train' to train on \\(problems marked excluded"):
        train(tiny_run_config(tiny_model_dir, exported), tmp_path / "run", runner=runner, progress=False)


def test_zero_variance_groups_are_counted_and_can_be_dropped(tmp_path, tiny_model_dir, runner):
    impossible = [{"id": f"never-{i}", "kind": "function", "prompt": f"def f{i}(x):\n", "entry_point": f"f{i}",
                   "tests": ["assert False"], "split": "train"} for i in range(2)]
    path = tmp_path / "impossible.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in impossible))
    cfg = tiny_run_config(tiny_model_dir, path, train={"steps": 1},
                          reward={"weights": {"pass_rate": 1.0, "syntax": 0.0, "efficiency": 0.0,
                                              "conciseness": 0.0, "format": 0.0}},
                          ppo={"drop_zero_variance_groups": True})
    trainer = make_trainer(cfg, tmp_path / "run", runner)
    before = lora_state(trainer.policy.model)
    trainer.run()
    step = next(e for e in read_events(tmp_path / "run" / "events.jsonl") if e["event"] == "step")
    assert step["metrics"]["zero_variance_groups"] == 2 and step["metrics"]["grad_norm"] == 0.0
    problems = [e for e in read_events(tmp_path / "run" / "events.jsonl") if e["event"] == "problem"]
    assert all(p["zero_variance"] for p in problems)
    assert all(p["used"] is False and p["set_aside"] == "zero_variance" for p in problems)  # left out: marked
    after = lora_state(trainer.policy.model)
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_a_full_fine_tune_keeps_a_frozen_reference(tmp_path, tiny_model_dir, train_problems_file, runner):
    cfg = tiny_run_config(tiny_model_dir, train_problems_file, model={"lora": None}, train={"steps": 1},
                          ppo={"learning_rate": 1e-4})
    trainer = make_trainer(cfg, tmp_path / "run", runner)
    assert trainer.policy.ref_model is not None and not trainer.policy.is_lora
    ref_before = {k: v.clone() for k, v in trainer.policy.ref_model.state_dict().items()}
    before = {k: v.clone() for k, v in trainer.policy.model.state_dict().items()}
    trainer.run()
    after = trainer.policy.model.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before)
    assert all(torch.equal(ref_before[k], v) for k, v in trainer.policy.ref_model.state_dict().items())
    events = read_events(tmp_path / "run" / "events.jsonl")
    assert next(e for e in events if e["event"] == "checkpoint")["kind"] == "full"
    assert (tmp_path / "run" / "checkpoints" / "step-1" / "model.safetensors").is_file()


def test_problem_picking_is_seeded_covers_an_epoch_and_never_repeats_within_a_step():
    from training.rollout import pick_problems

    steps = [pick_problems(10, 4, s, seed=3) for s in range(1, 6)]
    assert steps == [pick_problems(10, 4, s, seed=3) for s in range(1, 6)]
    assert all(len(set(s)) == 4 for s in steps)
    assert set(steps[0] + steps[1] + steps[2][:2]) == set(range(10))
    assert pick_problems(3, 8, 1, seed=0) in ([0, 1, 2], [0, 2, 1], [1, 0, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0])
    assert pick_problems(10, 4, 1, seed=4) != steps[0]


@pytest.mark.parametrize("chunks,repeats", [(1, 1), (2, 2)])
def test_chunked_rollouts_keep_candidates_grouped_by_problem(tiny_model_dir, runner, chunks, repeats):
    from sandbox import Problem

    from training.config import ModelConfig, SamplingConfig
    from training.policy import load_policy
    from training.rollout import start_rollout

    policy = load_policy(ModelConfig(name_or_path=str(tiny_model_dir)))
    problems = [Problem.from_dict(p) for p in PROBLEMS[:3]]
    sampling = SamplingConfig(problems_per_step=3, candidates_per_problem=2, max_new_tokens=8)
    pending = start_rollout(policy.model, policy.tokenizer, problems, sampling, runner, generator_seed=5,
                            chunks=chunks, repeats=repeats)
    rollout = pending.finish()
    assert rollout.rewards.shape == (3, 2)
    assert [c.problem_id for c in rollout.candidates] == ["add", "add", "sub", "sub", "neg", "neg"]
    assert [c.group for c in rollout.candidates] == [0, 0, 1, 1, 2, 2]
    assert rollout.batch.prompt_index == [0, 0, 1, 1, 2, 2]
    for cand, problem in zip(rollout.candidates, [p for p in problems for _ in range(2)]):
        assert cand.code.startswith(problem.prompt) and cand.result["tests_total"] == len(problem.tests)
        assert 0.0 <= cand.reward <= 1.0
    assert policy.model.training  # sampling switched to eval mode and back


def test_sampler_and_trainer_logprobs_agree_in_float32(tmp_path, tiny_model_dir, train_problems_file, runner):
    cfg = tiny_run_config(tiny_model_dir, train_problems_file, train={"steps": 1})
    assert train(cfg, tmp_path / "run", runner=runner, progress=False) == "succeeded"
    metrics = next(e for e in read_events(tmp_path / "run" / "events.jsonl") if e["event"] == "step")["metrics"]
    assert metrics["rollout/logprob_diff_max"] < 1e-3
    assert metrics["rollout/mismatch_kl"] < 1e-6


def test_a_sampler_that_drifts_from_the_trainer_is_detected_and_tis_weights_it(tmp_path, tiny_model_dir,
                                                                             train_problems_file, runner,
                                                                             monkeypatch):
    import training.generation as generation

    decode = generation._decode_loop

    def drifting(model, logits, *args, **kwargs):  # a sampler whose logits are off, as a bad kernel's would be
        noise = torch.Generator(device=logits.device).manual_seed(0)

        def forward(*a, **k):
            out = model(*a, **k)
            out.logits = out.logits + 0.5 * torch.randn(out.logits.shape, generator=noise)
            return out
        return decode(forward, logits, *args, **kwargs)

    monkeypatch.setattr(generation, "_decode_loop", drifting)
    results = {}
    for cap in (None, 1.0):
        cfg = tiny_run_config(tiny_model_dir, train_problems_file, train={"steps": 1}, ppo={"tis_cap": cap})
        assert train(cfg, tmp_path / f"run-{cap}", runner=runner, progress=False) == "succeeded"
        results[cap] = next(e for e in read_events(tmp_path / f"run-{cap}" / "events.jsonl")
                            if e["event"] == "step")["metrics"]
    assert results[None]["rollout/logprob_diff_max"] > 0.1 and results[None]["rollout/mismatch_kl"] > 1e-3
    # capped at 1, tokens the sampler over-rated weigh less: the same batch gives a different loss
    assert results[1.0]["loss/policy"] != pytest.approx(results[None]["loss/policy"], abs=1e-9)


@pytest.mark.parametrize("mode", ["mask", "soft"])
def test_truncated_candidates_are_recorded_and_masked_or_penalised(tmp_path, tiny_model_dir, train_problems_file,
                                                                 runner, mode):
    cfg = tiny_run_config(tiny_model_dir, train_problems_file, train={"steps": 1},
                          sampling={"max_new_tokens": 3, "stop": []},  # every candidate hits the limit
                          reward={"overlong": {"mode": mode, "buffer_tokens": 2}})
    assert train(cfg, tmp_path / "run", runner=runner, progress=False) == "succeeded"
    events = read_events(tmp_path / "run" / "events.jsonl")
    metrics = next(e for e in events if e["event"] == "step")["metrics"]
    assert metrics["rollout/truncated_frac"] == 1.0 and metrics["completion_len/max"] == 3
    cands = [c for e in events if e["event"] == "problem" for c in e["candidates"]]
    assert all(c["truncated"] for c in cands)
    if mode == "mask":  # nothing left to learn from: no optimizer step
        assert metrics["grad_norm"] == 0.0 and metrics["loss/policy"] == 0.0
    else:  # length 3 at max 3 with a buffer of 2: the full penalty of -1
        assert all(c["overlong_penalty"] == -1.0 for c in cands)


@pytest.mark.parametrize("dynamic", [False, True], ids=["plain", "dynamic"])
def test_a_per_component_run_writes_the_plain_total_and_the_normalized_value(tmp_path, qwen3_model_dir,
                                                                            train_problems_file, runner, dynamic):
    from training.advantages import group_rewards
    from training.rewards import combine

    cfg = tiny_run_config(qwen3_model_dir, train_problems_file, train={"steps": 1},
                          sampling={"dynamic": dynamic, "max_rounds": 2}, reward={"normalize": "per_component"})
    assert train(cfg, tmp_path / "run", runner=runner, progress=False) == "succeeded"
    problems = [e for e in read_events(tmp_path / "run" / "events.jsonl") if e["event"] == "problem"]
    assert problems
    weights = cfg.reward.weights.as_dict()
    for event in problems:
        cands = event["candidates"]
        # ``reward`` stays the weighted total users read; ``reward_normalized`` is what the estimator saw
        assert all(c["reward"] == pytest.approx(combine(c["rewards"], weights)) for c in cands)
        expected = group_rewards("per_component", [c["rewards"] for c in cands], weights, len(cands))
        assert [c["reward_normalized"] for c in cands] == pytest.approx(expected[0].tolist(), abs=1e-6)
        assert sum(c["reward_normalized"] for c in cands) == pytest.approx(0.0, abs=1e-5)
