"""The tiny demo model: Qwen3 architecture, Qwen-style tokenizer, warm start on right and wrong bodies."""

import dataclasses
import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from sandbox import Runner
from training.tiny_model import build_tiny_model, corruptions, load_problem_file, warmup_examples

PROBLEMS = [
    {"id": "sum-even", "kind": "function", "entry_point": "sum_even",
     "prompt": 'def sum_even(nums):\n    """Return the sum of the even numbers in nums."""\n',
     "tests": ["assert sum_even([1, 2, 3, 4]) == 6", "assert sum_even([]) == 0", "assert sum_even([5]) == 0"],
     "reference_solution": 'def sum_even(nums):\n    """Return the sum of the even numbers in nums."""\n'
                           "    return sum(x for x in nums if x % 2 == 0)\n", "split": "train"},
    {"id": "sub", "kind": "function", "entry_point": "sub", "prompt": 'def sub(a, b):\n    """Return a minus b."""\n',
     "tests": ["assert sub(3, 5) == -2", "assert sub(7, -2) == 9", "assert sub(0, 4) == -4"],
     "reference_solution": 'def sub(a, b):\n    """Return a minus b."""\n    return a - b\n', "split": "train"},
    {"id": "upper-rev", "kind": "function", "entry_point": "upper_rev",
     "prompt": 'def upper_rev(s):\n    """Return s reversed, then upper case."""\n',
     "tests": ["assert upper_rev('ab') == 'BA'", "assert upper_rev('') == ''", "assert upper_rev('xY') == 'YX'"],
     "reference_solution": 'def upper_rev(s):\n    """Return s reversed, then upper case."""\n'
                           "    return s[::-1].upper()\n", "split": "heldout"},
]


@pytest.fixture
def problem_file(tmp_path):
    path = tmp_path / "problems.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in PROBLEMS))
    return path


def test_it_builds_a_model_of_about_a_million_parameters(tiny_model_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    assert type(model).__name__ in ("Qwen3ForCausalLM", "Qwen3_5ForCausalLM")
    assert 500_000 <= sum(p.numel() for p in model.parameters()) <= 2_000_000
    info = json.loads((tiny_model_dir / "crucible_tiny.json").read_text())
    assert info["parameters"] == sum(p.numel() for p in model.parameters())
    assert info["architecture"] == type(model).__name__


def test_the_qwen3_5_model_is_qwen3_5_9b_s_hybrid_text_stack_at_tiny_size(qwen3_5_model_dir):
    from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5Attention, Qwen3_5GatedDeltaNet

    model = AutoModelForCausalLM.from_pretrained(qwen3_5_model_dir)
    config = model.config
    assert type(model).__name__ == "Qwen3_5ForCausalLM" and config.model_type == "qwen3_5_text"
    assert config.layer_types == ["linear_attention"] * 3 + ["full_attention"]  # 3:1 as in Qwen3.5-9B
    assert config.rope_parameters["partial_rotary_factor"] == 0.25
    layers = model.model.layers
    assert all(isinstance(layer.linear_attn, Qwen3_5GatedDeltaNet) for layer in layers[:3])
    assert isinstance(layers[3].self_attn, Qwen3_5Attention)
    # the same text stack and cache classes as the 9B checkpoint: a hybrid cache after a forward
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer, LinearAttentionLayer

    cache = DynamicCache(config=config)
    model(input_ids=torch.tensor([[1, 2, 3]]), cache=cache, use_cache=True)
    assert [type(layer) for layer in cache.layers] == [LinearAttentionLayer] * 3 + [DynamicLayer]


def test_an_unknown_architecture_is_refused_with_the_valid_ones(tmp_path):
    with pytest.raises(ValueError, match="qwen3, qwen3_5"):
        build_tiny_model(tmp_path / "m", arch="llama")


def test_the_tokenizer_loads_as_qwen2_with_qwen_special_tokens_and_chat_template(qwen3_model_dir):
    tok = AutoTokenizer.from_pretrained(qwen3_model_dir)
    assert type(tok).__name__ in ("Qwen2Tokenizer", "Qwen2TokenizerFast")
    for special in ("<|endoftext|>", "<|im_start|>", "<|im_end|>"):
        assert tok.convert_tokens_to_ids(special) != tok.unk_token_id
        assert len(tok(special, add_special_tokens=False)["input_ids"]) == 1
    assert tok.eos_token == "<|endoftext|>" and tok.pad_token == "<|endoftext|>"
    chat = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert chat == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_the_tokenizer_is_byte_level_and_lossless(qwen3_model_dir):
    tok = AutoTokenizer.from_pretrained(qwen3_model_dir)
    for text in ["def f(x):\n    return x ** 2  # carré ✓\n", "\t\n\n  ", "print('日本')"]:
        assert tok.decode(tok(text)["input_ids"]) == text


def test_the_pre_tokenizer_splits_numbers_into_single_digits_like_qwen(qwen3_model_dir):
    tok = AutoTokenizer.from_pretrained(qwen3_model_dir)
    ids = tok("12345", add_special_tokens=False)["input_ids"]
    assert [tok.decode([i]) for i in ids] == list("12345")


def test_the_generation_config_stops_at_either_end_token(tiny_model_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    assert set(model.generation_config.eos_token_id) == {tok.convert_tokens_to_ids("<|endoftext|>"),
                                                         tok.convert_tokens_to_ids("<|im_end|>")}
    assert model.generation_config.top_k == 0


def test_corruptions_are_plausible_single_edits():
    variants = corruptions("    return sum(x for x in nums if x % 2 == 0)\n")
    assert "    return sum(x for x in nums if x % 2 == 1)\n" in variants
    assert "    return max(x for x in nums if x % 2 == 0)\n" in variants
    assert "    return sum(x for x in nums)\n" in variants  # dropped filter
    assert "    return b - a\n" in corruptions("    return a - b\n")  # swapped arguments
    assert all(v != "    return a - b\n" for v in corruptions("    return a - b\n"))


def test_warmup_examples_mix_right_bodies_with_wrong_ones_that_really_fail(problem_file):
    problems = load_problem_file(problem_file)
    with Runner(workers=2) as runner:
        examples, stats = warmup_examples(problems, runner, correct_copies=2, wrong_per_problem=3)
    by_prompt = {}
    for prompt, body in examples:
        by_prompt.setdefault(prompt, []).append(body)
    assert len(by_prompt) == 2  # the heldout problem is never trained on
    sub = by_prompt[PROBLEMS[1]["prompt"]]
    assert sub.count("    return a - b\n") == 2
    wrong = [b for b in sub if b != "    return a - b\n"]
    assert 1 <= len(wrong) <= 3
    for body in wrong:
        ns = {}
        exec(PROBLEMS[1]["prompt"] + body, ns)
        with pytest.raises(AssertionError):
            for t in PROBLEMS[1]["tests"]:
                exec(t, ns)
    assert stats["problems"] == 2 and stats["variants_failing"] <= stats["variants_tried"]
    # an excluded train problem is not warmed up on either
    kept = [dataclasses.replace(p, excluded=True) if p.prompt == PROBLEMS[1]["prompt"] else p for p in problems]
    with Runner(workers=2) as runner:
        examples, stats = warmup_examples(kept, runner, correct_copies=1, wrong_per_problem=0)
    assert stats["problems"] == 1 and all(prompt != PROBLEMS[1]["prompt"] for prompt, _ in examples)


def test_a_short_warm_start_lowers_the_loss_and_saves_a_loadable_model(problem_file, tmp_path):
    out = build_tiny_model(tmp_path / "warm", warmup_problems=problem_file, warmup_steps=25)
    info = json.loads((out / "crucible_tiny.json").read_text())
    assert info["warmup"]["steps"] == 25 and info["warmup"]["problems"] == 2
    assert info["warmup"]["loss_last"] < info["warmup"]["loss_first"]
    AutoModelForCausalLM.from_pretrained(out)
    AutoTokenizer.from_pretrained(out)


def test_a_problem_file_with_errors_is_reported_with_line_and_field(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(PROBLEMS[0]) + "\n" + json.dumps({"id": "x", "kind": "function"}) + "\n")
    with pytest.raises(ValueError, match=r"line 2, field entry_point"):
        load_problem_file(path)
