"""Batched sampling: padding, seeds, top_k=0, stop-string cut rule, prompt building."""

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from training.config import DEFAULT_COMPLETION_STOP, SamplingConfig
from training.generation import cut_completion, build_prompt, eos_token_ids, generate

PROMPTS = ["def add(a, b):\n", "def is_even(n):\n    \"\"\"Return True when n is even.\"\"\"\n", "x = ["]


@pytest.fixture(scope="module")
def tok(tiny_model_dir):
    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture
def model(tiny_model_dir):
    m = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    m.eval()
    return m


def test_sequences_are_grouped_by_prompt(model, tok):
    batch = generate(model, tok, PROMPTS, SamplingConfig(max_new_tokens=8), num_return_sequences=3, generator_seed=0)
    assert len(batch) == 9
    assert batch.prompt_index == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert batch.prompt_ids[4] == tok(PROMPTS[1])["input_ids"]
    assert all(r in ("eos", "stop", "length") for r in batch.finish_reasons)
    assert all(1 <= len(c) <= 8 for c in batch.completion_ids)


def test_the_same_seed_gives_the_same_samples_and_leaves_the_global_rng_alone(model, tok):
    cfg = SamplingConfig(max_new_tokens=12, stop=())
    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    a = generate(model, tok, PROMPTS, cfg, num_return_sequences=2, generator_seed=7)
    assert torch.equal(before, torch.random.get_rng_state())
    b = generate(model, tok, PROMPTS, cfg, num_return_sequences=2, generator_seed=7)
    c = generate(model, tok, PROMPTS, cfg, num_return_sequences=2, generator_seed=8)
    assert a.completion_ids == b.completion_ids and a.texts == b.texts
    assert a.completion_ids != c.completion_ids


def test_temperature_zero_is_greedy(model, tok):
    cfg = SamplingConfig(max_new_tokens=10, temperature=0.0, stop=())
    a = generate(model, tok, PROMPTS, cfg, num_return_sequences=2, generator_seed=1)
    b = generate(model, tok, PROMPTS, cfg, num_return_sequences=2, generator_seed=2)
    assert a.completion_ids == b.completion_ids
    assert a.completion_ids[0] == a.completion_ids[1]


def test_left_padding_gives_the_same_greedy_completion_as_generating_alone(model, tok):
    cfg = SamplingConfig(max_new_tokens=10, temperature=0.0, stop=())
    together = generate(model, tok, PROMPTS, cfg)
    for i, prompt in enumerate(PROMPTS):
        alone = generate(model, tok, [prompt], cfg)
        assert together.completion_ids[i] == alone.completion_ids[0]


def test_top_k_zero_means_no_cut_even_when_the_checkpoint_says_otherwise(model, tok):
    # A checkpoint whose generation_config would make sampling (nearly) deterministic.
    model.generation_config.top_k = 1
    model.generation_config.temperature = 0.01
    model.generation_config.repetition_penalty = 5.0
    batch = generate(model, tok, ["def f(x):\n"], SamplingConfig(max_new_tokens=6, stop=()),
                     num_return_sequences=8, generator_seed=0)
    assert len({tuple(c) for c in batch.completion_ids}) > 1


def test_stop_string_inside_a_token_keeps_the_covering_token(tok):
    text = "    return x\n\ndef g():\n    pass"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    kept, kept_text, reason, sampled = cut_completion(ids, tok, DEFAULT_COMPLETION_STOP, {tok.eos_token_id}, tok.eos_token_id)
    assert (kept_text, reason, sampled) == ("    return x\n", "stop", len(ids))
    decoded = tok.decode(kept)
    assert decoded.startswith(kept_text)
    assert not tok.decode(kept[:-1]).startswith(kept_text)  # shortest covering prefix
    assert (text.startswith(decoded))


def test_eos_is_kept_as_the_last_completion_id_but_not_in_the_text(tok):
    eos = tok.eos_token_id
    ids = tok("    return a + b\n", add_special_tokens=False)["input_ids"]
    kept, text, reason, sampled = cut_completion(ids + [eos, eos, eos], tok, DEFAULT_COMPLETION_STOP, {eos}, eos)
    assert kept == ids + [eos] and text == "    return a + b\n" and reason == "eos" and sampled == len(ids) + 1


def test_a_stop_at_the_very_start_still_keeps_one_token(tok):
    ids = tok("\ndef other():\n", add_special_tokens=False)["input_ids"]
    kept, text, reason, _ = cut_completion(ids, tok, DEFAULT_COMPLETION_STOP, {tok.eos_token_id}, tok.eos_token_id)
    assert text == "" and reason == "stop" and len(kept) == 1


def test_sampled_completions_obey_the_cut_rule(model, tok):
    stops = ("\n", " (", "e")
    batch = generate(model, tok, PROMPTS, SamplingConfig(max_new_tokens=24, stop=stops),
                     num_return_sequences=6, generator_seed=3)
    eos = set(eos_token_ids(model, tok))
    assert "stop" in batch.finish_reasons
    for ids, text, reason in zip(batch.completion_ids, batch.texts, batch.finish_reasons):
        assert not any(s in text for s in stops)
        body = ids[:-1] if reason == "eos" else ids
        assert not (set(body) & eos)
        decoded = tok.decode(body, skip_special_tokens=False)
        assert decoded.startswith(text)
        if reason == "stop" and len(body) > 1:
            assert not tok.decode(body[:-1]).startswith(text)
        if reason == "eos":
            assert ids[-1] in eos and decoded == text


def test_padded_tensors_score_like_unpadded_sequences(model, tok):
    batch = generate(model, tok, PROMPTS, SamplingConfig(max_new_tokens=8, stop=()), num_return_sequences=2,
                     generator_seed=0)
    t = batch.padded(tok.pad_token_id)
    p = int(t["prompt_length"])
    with torch.no_grad():
        logits = model(input_ids=t["input_ids"], attention_mask=t["attention_mask"],
                       position_ids=t["position_ids"]).logits  # (B, P + C, V)
        for i in range(len(batch)):
            ids = batch.prompt_ids[i] + batch.completion_ids[i]
            alone = model(input_ids=torch.tensor([ids])).logits[0]  # (T, V)
            n = len(batch.completion_ids[i])
            padded_rows = logits[i, p - 1:p - 1 + n]  # predicts the completion tokens
            alone_rows = alone[len(batch.prompt_ids[i]) - 1:len(ids) - 1]
            assert torch.allclose(padded_rows, alone_rows, atol=1e-4)
            assert t["completion_mask"][i].sum() == n


def test_completion_prompt_is_the_problem_prompt(tok):
    assert build_prompt({"prompt": "def f(x):\n"}, tok, "completion") == "def f(x):\n"


def test_chat_prompt_asks_for_a_fenced_block_and_opens_the_assistant_turn(tok):
    text = build_prompt({"prompt": "def f(x):\n", "entry_point": "f", "kind": "function"}, tok, "chat")
    assert "```python\ndef f(x):\n```" in text and "fenced code block" in text
    # Qwen's convention without thinking: an empty thinking block is pre-filled, the model answers at once
    assert text.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")


def test_a_thinking_chat_prompt_leaves_the_thinking_to_the_model(tok):
    text = build_prompt({"prompt": "def f(x):\n", "entry_point": "f", "kind": "function"}, tok, "chat",
                        thinking=True)
    assert text.endswith("<|im_start|>assistant\n")
    for tag in ("<think>", "</think>"):
        assert len(tok(tag, add_special_tokens=False)["input_ids"]) == 1


def test_sampler_logprobs_are_those_of_the_sampled_tokens_at_the_sampling_temperature(model, tok):
    from training.policy import sequence_logprobs

    batch = generate(model, tok, PROMPTS, SamplingConfig(max_new_tokens=12, stop=(), temperature=0.7, top_p=0.9),
                     num_return_sequences=3, generator_seed=4)
    assert [len(lp) for lp in batch.sampler_logprobs] == [len(c) for c in batch.completion_ids]
    t = batch.padded(tok.pad_token_id)
    with torch.no_grad():
        trainer, _ = sequence_logprobs(model, t["input_ids"], t["attention_mask"], t["completion_mask"].shape[1],
                                       temperature=0.7)
    m = t["completion_mask"].bool()
    assert torch.allclose(trainer[m], t["sampler_logprobs"][m], atol=1e-4)


def test_the_generate_fallback_records_the_same_sampler_logprobs(model, tok, monkeypatch):
    import training.generation as generation

    sampling = SamplingConfig(max_new_tokens=10, stop=(), temperature=1.0)
    fast = generate(model, tok, PROMPTS, sampling, num_return_sequences=2, generator_seed=9)
    monkeypatch.setattr(generation, "_cache_kwarg", lambda model: None)
    slow = generate(model, tok, PROMPTS, sampling, num_return_sequences=2, generator_seed=9)
    assert fast.completion_ids == slow.completion_ids
    for a, b in zip(fast.sampler_logprobs, slow.sampler_logprobs):
        assert a == pytest.approx(b, abs=1e-4)


def test_chat_prompt_without_a_template_is_refused(tok):
    class NoTemplate:
        chat_template = None

    with pytest.raises(ValueError, match="chat template"):
        build_prompt({"prompt": "x"}, NoTemplate(), "chat")


@pytest.mark.parametrize("sampling", [
    SamplingConfig(max_new_tokens=16, stop=(), temperature=1.0, top_p=1.0, top_k=0),
    SamplingConfig(max_new_tokens=16, stop=(), temperature=0.7, top_p=0.9, top_k=20),
    SamplingConfig(max_new_tokens=16, stop=DEFAULT_COMPLETION_STOP, temperature=1.0, top_p=0.95, top_k=0),
    SamplingConfig(max_new_tokens=16, stop=(), temperature=0.0),
])
def test_the_cached_sampling_loop_draws_exactly_what_hugging_face_generate_draws(model, tok, sampling, monkeypatch):
    import training.generation as generation

    fast = generate(model, tok, PROMPTS, sampling, num_return_sequences=4, generator_seed=3)
    monkeypatch.setattr(generation, "_cache_kwarg", lambda model: None)  # force the generate() fallback
    slow = generate(model, tok, PROMPTS, sampling, num_return_sequences=4, generator_seed=3)
    assert fast.completion_ids == slow.completion_ids
    assert fast.texts == slow.texts
    assert fast.finish_reasons == slow.finish_reasons
    assert fast.generated_tokens == slow.generated_tokens
