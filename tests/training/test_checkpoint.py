import json
import warnings

import pytest
import torch

from training import checkpoint as ckpt
from training.config import ModelConfig
from training.policy import load_policy


def _perturb_lora(model, seed=1):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.add_(torch.randn(p.shape, generator=g) * 0.05)


def _logits(model, tokenizer, text="def add(a, b):\n    return"):
    ids = tokenizer(text, return_tensors="pt")
    with torch.no_grad():
        return model(**ids).logits


@pytest.fixture
def policy(tiny_model_dir):
    p = load_policy(ModelConfig(name_or_path=str(tiny_model_dir)))
    _perturb_lora(p.model)
    p.model.eval()
    return p


def _optimizer(policy):
    opt = torch.optim.AdamW(policy.trainable_parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (s + 1))
    policy.model.train()
    out = policy.model(**policy.tokenizer("def f(x):", return_tensors="pt"))
    out.logits.mean().backward()
    opt.step()
    sched.step()
    return opt, sched


def test_a_checkpoint_holds_the_adapter_and_the_training_state(tmp_path, policy):
    opt, sched = _optimizer(policy)
    path, kind = ckpt.save_checkpoint(tmp_path, 7, policy.model, policy.tokenizer, opt, sched, {"seed": 3})
    assert kind == "adapter" and path == tmp_path / "checkpoints" / "step-7"
    names = {p.name for p in path.iterdir()}
    assert {"adapter_config.json", "adapter_model.safetensors", "tokenizer_config.json", "training_state"} <= names
    state = ckpt.read_trainer_state(path)
    assert (state.step, state.kind, state.config) == (7, "adapter", {"seed": 3})
    assert ckpt.latest_checkpoint(tmp_path) == path


def test_load_checkpoint_restores_weights_optimizer_scheduler_and_rng(tmp_path, tiny_model_dir, policy):
    opt, sched = _optimizer(policy)
    torch.manual_seed(123)
    path, _ = ckpt.save_checkpoint(tmp_path, 1, policy.model, policy.tokenizer, opt, sched, {})
    expected_draw = torch.rand(3)
    fresh = load_policy(ModelConfig(name_or_path=str(tiny_model_dir)))
    opt2 = torch.optim.AdamW(fresh.trainable_parameters(), lr=1e-3)
    sched2 = torch.optim.lr_scheduler.LambdaLR(opt2, lambda s: 1.0 / (s + 1))
    state = ckpt.load_checkpoint(path, fresh.model, opt2, sched2)
    assert state.step == 1
    fresh.model.eval()
    policy.model.eval()
    assert torch.allclose(_logits(fresh.model, fresh.tokenizer), _logits(policy.model, policy.tokenizer), atol=1e-6)
    assert sched2.last_epoch == sched.last_epoch == 1
    assert opt2.param_groups[0]["lr"] == pytest.approx(0.5e-3)
    exp_avg = [s["exp_avg"] for s in opt.state.values()]
    exp_avg2 = [s["exp_avg"] for s in opt2.state.values()]
    assert len(exp_avg2) == len(exp_avg) > 0 and all(torch.equal(a, b) for a, b in zip(exp_avg, exp_avg2))
    assert torch.equal(torch.rand(3), expected_draw)


def test_an_unfinished_checkpoint_is_never_the_latest(tmp_path, policy):
    ckpt.save_checkpoint(tmp_path, 2, policy.model, None, None, None, {})
    (tmp_path / "checkpoints" / "step-9.partial").mkdir()
    (tmp_path / "checkpoints" / "step-10").mkdir()  # no trainer_state.json: a crash mid-save
    assert ckpt.latest_checkpoint(tmp_path).name == "step-2"
    assert ckpt.latest_checkpoint(tmp_path / "nowhere") is None


def test_the_adapter_loads_with_peft_and_the_merged_model_with_transformers(tmp_path, tiny_model_dir, policy):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path, _ = ckpt.save_checkpoint(tmp_path, 1, policy.model, policy.tokenizer, None, None, {})
    expected = _logits(policy.model, policy.tokenizer)

    base = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir))
    with warnings.catch_warnings():  # peft queries a name transformers 5 deprecated
        warnings.simplefilter("ignore", FutureWarning)
        adapted = PeftModel.from_pretrained(base, str(path)).eval()
    assert torch.allclose(_logits(adapted, policy.tokenizer), expected, atol=1e-5)

    merged_dir = ckpt.export_merged(path, tmp_path / "merged", base_model=str(tiny_model_dir))
    assert {"config.json", "model.safetensors", "tokenizer_config.json"} <= {p.name for p in merged_dir.iterdir()}
    assert not (merged_dir / "adapter_config.json").exists()
    merged = AutoModelForCausalLM.from_pretrained(str(merged_dir)).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(merged_dir))
    assert torch.allclose(_logits(merged, tokenizer), expected, atol=1e-5)
    assert "lora" not in json.dumps(list(merged.state_dict()))


def test_merging_a_live_model_writes_the_same_weights(tmp_path, policy):
    from transformers import AutoModelForCausalLM

    expected = _logits(policy.model, policy.tokenizer)
    out = ckpt.save_merged(ckpt.merge_lora(policy.model), policy.tokenizer, tmp_path / "final-merged")
    merged = AutoModelForCausalLM.from_pretrained(str(out)).eval()
    assert torch.allclose(_logits(merged, policy.tokenizer), expected, atol=1e-5)
