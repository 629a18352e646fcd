"""Fast log-prob paths of the trainer against the plain ones they replace: prompts shared across a
group (with and without packing short completions), the fused LoRA forward, the skipped old-policy
pass, and the decoding loop's shared-prefix attention and batch compaction."""

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from training.config import DEFAULT_COMPLETION_STOP, LoraConfig, ModelConfig, SamplingConfig
from training.generation import generate
from training.policy import (fused_lora, load_policy, sequence_logprobs, shared_prompt_logprobs,
                             shared_prompts_supported)

PROMPTS = ["def add(a, b):\n", "def is_even(n):\n    \"\"\"Return True when n is even.\"\"\"\n", "x = ["]


@pytest.fixture(scope="module")
def policy(tiny_model_dir):
    torch.manual_seed(0)  # LoRA's A init draws from the global generator: the same weights whatever ran before
    pol = load_policy(ModelConfig(name_or_path=str(tiny_model_dir), lora=LoraConfig(r=4, alpha=8, dropout=0.0)))
    for name, p in pol.model.named_parameters():
        if "lora_B" in name:  # a LoRA that has moved away from its zero init, so adapters matter
            torch.nn.init.normal_(p, std=0.05)
    return pol


def _batch(policy, stop=(), n=4, max_new_tokens=12):
    sampling = SamplingConfig(max_new_tokens=max_new_tokens, stop=tuple(stop))
    batch = generate(policy.model, policy.tokenizer, PROMPTS, sampling, num_return_sequences=n, generator_seed=5)
    return batch, batch.padded(policy.tokenizer.pad_token_id)


def _handmade(policy, lengths=(16, 3, 5, 9, 1, 12, 2, 7)):
    """Every prompt with completions of the given lengths (random tokens): short ones to pack."""
    from training.generation import GenerationBatch

    tok = policy.tokenizer
    g = torch.Generator().manual_seed(0)
    batch = GenerationBatch([], [], [], [], [], [], prompts=list(PROMPTS))
    for k, prompt in enumerate(PROMPTS):
        for n in lengths:
            batch.prompt_ids.append(tok(prompt)["input_ids"])
            batch.completion_ids.append(torch.randint(0, len(tok), (n,), generator=g).tolist())
            batch.texts.append("")
            batch.prompt_index.append(k)
            batch.finish_reasons.append("length")
            batch.generated_tokens.append(n)
    return batch.padded(tok.pad_token_id)


def _shared_inputs(t):
    """The trainer's split of a padded batch: distinct prompts once, the prompt row of every sequence."""
    from training.trainer import _shared_micro_batch

    return _shared_micro_batch(t, torch.arange(t["input_ids"].shape[0]))


def _grads(model):
    return {k: p.grad.detach().clone() for k, p in model.named_parameters() if p.grad is not None}


def _grad_rel(model):
    """Relative tolerance of gradient comparisons. Qwen3.5's gated delta rule sums its state in
    64-token chunks and gates through softplus: a prompt split or another matmul order changes the
    float summation, and its gate projections (in_proj_a/b) get gradients near 1e-4, so float noise
    of 1e-7 is a larger share of them: ~1e-3 rather than the dense model's ~1e-4."""
    from training.policy import _base

    hybrid = "linear_attention" in (getattr(_base(model).config, "layer_types", None) or [])
    return 1e-3 if hybrid else 1e-4


def _assert_grads_close(a, b, rel=1e-4):
    assert a.keys() == b.keys() and a
    for key in a:
        err = (a[key] - b[key]).abs().max().item()
        assert err <= rel * a[key].abs().max().item() + 1e-9, (key, err)


def test_the_policy_supports_shared_prompts(policy):
    assert shared_prompts_supported(policy.model)


def test_shared_prompts_are_refused_where_packing_or_the_cache_would_be_wrong(tiny_model_dir):
    from training.policy import enable_gradient_checkpointing

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    assert shared_prompts_supported(model)
    types = list(model.config.layer_types)
    model.config.layer_types = types[:-1] + ["sliding_attention"]  # a window would not honour the block mask
    assert not shared_prompts_supported(model)
    model.config.layer_types = types
    enable_gradient_checkpointing(model)
    assert not shared_prompts_supported(model)


def test_a_hybrid_model_continues_from_the_prompt_state_but_never_packs(qwen3_5_model_dir, monkeypatch):
    import training.policy as policy_module

    pol = load_policy(ModelConfig(name_or_path=str(qwen3_5_model_dir), lora=LoraConfig(r=4, alpha=8, dropout=0.0)))
    assert shared_prompts_supported(pol.model)
    plans = []
    monkeypatch.setattr(policy_module, "_pack_plan", lambda *a: plans.append(a))
    t = _handmade(pol)
    with torch.no_grad():
        got, _ = shared_prompt_logprobs(pol.model, *_shared_inputs(t)[:5], pack=True)
        ref, _ = sequence_logprobs(pol.model, t["input_ids"], t["attention_mask"], t["completion_mask"].shape[1])
    assert plans == []  # a recurrent state must not run from one packed completion into the next
    m = t["completion_mask"].bool()
    assert torch.allclose(got[m], ref[m], atol=1e-5)


def test_lora_reaches_every_projection_of_the_linear_attention_layers(qwen3_5_model_dir):
    pol = load_policy(ModelConfig(name_or_path=str(qwen3_5_model_dir), lora=LoraConfig(r=4, alpha=8, dropout=0.0)))
    adapted = {name.split(".")[-1] for name, module in pol.model.named_modules()
               if hasattr(module, "lora_A") and ".linear_attn." in name}
    assert adapted >= {"in_proj_qkv", "in_proj_z", "in_proj_a", "in_proj_b", "out_proj"}


@pytest.mark.parametrize("pack", [False, True], ids=["rows", "packed"])
def test_shared_prompt_logprobs_and_gradients_equal_the_per_sequence_ones(policy, pack):
    t = _handmade(policy)  # completions of very different lengths, so packing has short ones to combine
    cmask = t["completion_mask"]
    width = cmask.shape[1]
    lengths = cmask.sum(-1)
    if pack:
        from training.policy import _pack_plan

        prompt_ids, prompt_mask, group, comp_ids, cm, _ = _shared_inputs(t)
        plan = _pack_plan(cm, group, width - 1)
        assert plan is not None and len(plan[0]) < len(lengths), "the test batch must actually get packed"
    model = policy.model
    model.zero_grad(set_to_none=True)
    ref, ref_ent = sequence_logprobs(model, t["input_ids"], t["attention_mask"], width, with_entropy=True)
    (ref * cmask).sum().backward()
    ref_grads = _grads(model)
    model.zero_grad(set_to_none=True)
    prompt_ids, prompt_mask, group, comp_ids, cm, _ = _shared_inputs(t)
    assert prompt_ids.shape[0] == len(PROMPTS)  # each distinct prompt once
    got, got_ent = shared_prompt_logprobs(model, prompt_ids, prompt_mask, group, comp_ids, cm, with_entropy=True,
                                          pack=pack)
    (got * cm).sum().backward()
    got_grads = _grads(model)
    model.zero_grad(set_to_none=True)
    m = cmask.bool()
    assert torch.allclose(got[m], ref[m], atol=1e-5)
    assert torch.allclose(got_ent[m], ref_ent[m], atol=1e-5)
    _assert_grads_close(ref_grads, got_grads, rel=_grad_rel(model))


def test_shared_prompt_logprobs_follow_the_temperature(policy):
    _, t = _batch(policy)
    width = t["completion_mask"].shape[1]
    m = t["completion_mask"].bool()
    with torch.no_grad():
        ref, _ = sequence_logprobs(policy.model, t["input_ids"], t["attention_mask"], width, temperature=0.7)
        got, _ = shared_prompt_logprobs(policy.model, *_shared_inputs(t)[:5], temperature=0.7)
    assert torch.allclose(got[m], ref[m], atol=1e-5)


def test_fused_lora_gives_peft_logprobs_and_gradients_and_is_undone(policy):
    _, t = _batch(policy)
    model = policy.model
    width = t["completion_mask"].shape[1]
    m = t["completion_mask"].bool()

    def run():
        model.zero_grad(set_to_none=True)
        logp, _ = sequence_logprobs(model, t["input_ids"], t["attention_mask"], width)
        (logp * t["completion_mask"]).sum().backward()
        return logp.detach(), _grads(model)

    plain, plain_grads = run()
    with fused_lora(model) as patched:
        assert patched > 0
        fused, fused_grads = run()
        with torch.no_grad(), policy.reference() as ref_model:  # adapters disabled inside the context
            ref_fused, _ = sequence_logprobs(ref_model, t["input_ids"], t["attention_mask"], width)
    model.zero_grad(set_to_none=True)
    assert not any("forward" in mod.__dict__ for mod in model.modules())  # PEFT's forward is back
    with torch.no_grad(), policy.reference() as ref_model:
        ref_plain, _ = sequence_logprobs(ref_model, t["input_ids"], t["attention_mask"], width)
    assert torch.allclose(fused[m], plain[m], atol=1e-5)
    assert torch.allclose(ref_fused[m], ref_plain[m], atol=1e-6)
    assert not torch.allclose(ref_plain[m], plain[m], atol=1e-3)  # the adapters really change the policy
    _assert_grads_close(plain_grads, fused_grads, rel=_grad_rel(model))


def test_fused_lora_linear_gives_the_autograd_gradients_of_the_merged_weight():
    from training.policy import _FusedLoraLinear

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(3, 7, 12, generator=gen, requires_grad=True)  # (B, T, in)
    weight, bias = torch.randn(10, 12, generator=gen), torch.randn(10, generator=gen)  # frozen
    lora_a = torch.randn(4, 12, generator=gen, requires_grad=True)  # (r, in)
    lora_b = torch.randn(10, 4, generator=gen, requires_grad=True)  # (out, r)
    grad_out = torch.randn(3, 7, 10, generator=gen)
    want = torch.nn.functional.linear(x, weight + 0.5 * lora_b @ lora_a, bias)
    got = _FusedLoraLinear.apply(x, weight, bias, lora_a, lora_b, 0.5)
    assert torch.allclose(got, want, atol=1e-5)
    want_grads = torch.autograd.grad(want, (x, lora_a, lora_b), grad_out)
    got_grads = torch.autograd.grad(got, (x, lora_a, lora_b), grad_out)
    for w, g in zip(want_grads, got_grads):
        assert g.shape == w.shape and torch.allclose(g, w, rtol=1e-5, atol=1e-5)
    x_frozen = x.detach()  # no input gradient asked for: only the adapter gradients
    da, db = torch.autograd.grad(_FusedLoraLinear.apply(x_frozen, weight, bias, lora_a, lora_b, 0.5),
                                 (lora_a, lora_b), grad_out)
    assert torch.allclose(da, want_grads[1], atol=1e-5) and torch.allclose(db, want_grads[2], atol=1e-5)


def test_generation_mode_samples_what_the_unmerged_adapters_sample_and_restores_them(policy):
    from training.generation import _forward_model
    from training.policy import generation_mode, lora_sampling

    sampling = SamplingConfig(max_new_tokens=10, stop=())
    plain = generate(policy.model, policy.tokenizer, PROMPTS, sampling, num_return_sequences=3, generator_seed=7)
    ids = policy.tokenizer(PROMPTS[1], return_tensors="pt")["input_ids"]
    with torch.no_grad():
        want = policy.model(input_ids=ids).logits
    with generation_mode(policy.model) as model:
        folded = [m for m in model.modules() if "forward" in m.__dict__]
        assert folded and not any(m.merged for m in folded)  # folded copies: the adapters stay unmerged
        assert _forward_model(model) is model.get_base_model()
        with torch.no_grad():
            got = model(input_ids=ids).logits
        merged = generate(model, policy.tokenizer, PROMPTS, sampling, num_return_sequences=3, generator_seed=7)
    assert torch.allclose(got, want, atol=1e-5)
    assert merged.completion_ids == plain.completion_ids
    assert lora_sampling(policy.model) == "merged"
    assert not any("forward" in m.__dict__ for m in policy.model.modules())
    assert policy.model.training and not any(getattr(m, "merged", False) for m in policy.model.modules())


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_rollout_leaves_the_trainers_weights_bit_identical(tiny_model_dir, dtype):
    from training.policy import generation_mode

    torch.manual_seed(0)
    pol = load_policy(ModelConfig(name_or_path=str(tiny_model_dir), dtype=dtype,
                                  lora=LoraConfig(r=4, alpha=8, dropout=0.0)))
    for name, p in pol.model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.05)
    before = {k: v.detach().clone() for k, v in pol.model.state_dict().items()}
    sampling = SamplingConfig(max_new_tokens=6, stop=())
    for _ in range(3):  # in-place merge/unmerge would drift a bf16 base weight a little every rollout
        with generation_mode(pol.model) as model:
            assert any("forward" in m.__dict__ for m in model.modules())
            generate(model, pol.tokenizer, PROMPTS, sampling, num_return_sequences=2, generator_seed=1)
    after = pol.model.state_dict()
    assert before.keys() == after.keys()
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_adapters_sample_unfolded_when_a_folded_copy_does_not_fit(policy, monkeypatch):
    import training.policy as policy_module
    from training.policy import generation_mode, lora_sampling

    monkeypatch.setattr(policy_module, "_fits", lambda layers: False)
    with generation_mode(policy.model) as model:
        assert not any("forward" in m.__dict__ for m in model.modules())
        assert lora_sampling(policy.model) == "adapter"
    with generation_mode(policy.model):
        pass
    monkeypatch.undo()
    with generation_mode(policy.model):
        assert lora_sampling(policy.model) == "merged"


def test_fused_lora_leaves_half_precision_layers_alone(tiny_model_dir):
    pol = load_policy(ModelConfig(name_or_path=str(tiny_model_dir), dtype="bfloat16",
                                  lora=LoraConfig(r=4, alpha=8, dropout=0.0)))
    with fused_lora(pol.model) as patched:
        assert patched == 0


def test_skipping_the_old_logprob_pass_gives_the_same_update(tmp_path, tiny_model_dir, train_problems_file, runner):
    # One epoch, one minibatch: the trainer takes old = logp.detach() instead of a separate no-grad
    # pass. Two identical trainers, one given the explicit old log-probs: same gradient, same loss.
    from tests.training.conftest import tiny_run_config
    from tests.training.conftest import make_trainer, record_gradients

    cfg = tiny_run_config(tiny_model_dir, train_problems_file, train={"steps": 1}, ppo={"micro_batch_size": 3})
    trainers, grads = [], []
    for name in ("implicit", "explicit"):
        trainer = make_trainer(cfg, tmp_path / name, runner)
        trainer.model, trainer.optimizer = trainer.accelerator.prepare(trainer.policy.model, trainer.optimizer)
        trainer.shared_prompts = shared_prompts_supported(trainer.model)
        torch.manual_seed(0)
        for key, p in trainer.policy.model.named_parameters():
            if "lora_B" in key:
                torch.nn.init.normal_(p, std=0.05)
        trainers.append(trainer)
        grads.append(record_gradients(trainer))
    _, t = _batch(trainers[0].policy, n=4)
    n = t["input_ids"].shape[0]
    advantages = torch.linspace(-1.0, 1.0, n)
    keep = torch.ones(n, dtype=torch.bool)
    ref = trainers[0]._logprobs(t, reference=True)
    old = trainers[0]._logprobs(t)  # the explicit old-policy pass, before either update
    implicit = trainers[0]._update(t, advantages, keep, None, ref, 0.04, step=1)
    explicit = trainers[1]._update(t, advantages, keep, old, ref, 0.04, step=1)
    assert len(grads[0]) == len(grads[1]) == 1
    _assert_grads_close(grads[0][0], grads[1][0], rel=_grad_rel(trainers[0].policy.model))
    for key in ("loss/policy", "loss/kl", "kl", "approx_kl", "clip_frac", "entropy"):
        assert implicit[key] == pytest.approx(explicit[key], rel=1e-4, abs=1e-6), key
    assert implicit["clip_frac"] == 0.0 and explicit["approx_kl"] == pytest.approx(0.0, abs=1e-6)


def test_shared_prefix_decoding_draws_what_the_plain_loop_draws(tiny_model_dir, monkeypatch):
    import training.generation as generation

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    sampling = SamplingConfig(max_new_tokens=96, stop=DEFAULT_COMPLETION_STOP, temperature=1.0, top_p=0.95)
    rows_seen = []
    attend = generation._SharedPrefix.attend

    def spy(self, module, query, *args, **kwargs):
        rows_seen.append(query.shape[0])
        return attend(self, module, query, *args, **kwargs)

    monkeypatch.setattr(generation._SharedPrefix, "attend", spy)
    fast = generate(model, tok, PROMPTS, sampling, num_return_sequences=8, generator_seed=11)
    assert rows_seen and max(rows_seen) == 24
    assert min(rows_seen) < 24, "some rows finished early and left the batch"
    monkeypatch.setattr(generation._SharedPrefix, "build", classmethod(lambda cls, *a: None))
    plain = generate(model, tok, PROMPTS, sampling, num_return_sequences=8, generator_seed=11)
    assert fast.completion_ids == plain.completion_ids
    assert fast.finish_reasons == plain.finish_reasons
    assert fast.texts == plain.texts


def test_adapters_in_the_model_config_are_merged_into_the_base(policy, tiny_model_dir, tmp_path):
    """A run continued from an adapter checkpoint starts from exactly the weights that adapter trained."""
    policy.model.save_pretrained(tmp_path / "adapter")
    ids = policy.tokenizer(PROMPTS[0], return_tensors="pt").input_ids
    with torch.no_grad():
        expected = policy.model(input_ids=ids).logits  # (1, T, V) base + adapter
        merged = load_policy(ModelConfig(name_or_path=str(tiny_model_dir), lora=None,
                                         adapters=(str(tmp_path / "adapter"),)), kl_coef=0.0)
        torch.testing.assert_close(merged.model(input_ids=ids).logits, expected, rtol=1e-4, atol=1e-5)
        plain = load_policy(ModelConfig(name_or_path=str(tiny_model_dir), lora=None), kl_coef=0.0)
        assert not torch.allclose(plain.model(input_ids=ids).logits, expected, atol=1e-5)


def test_flushing_denormals_changes_no_gated_delta_rule_output_beyond_rounding():
    """``cpu_float_mode`` (set by ``load_policy``) flushes float32 denormals to zero for speed: the
    gated delta rule's decays reach them within a chunk, and its outputs stay the same."""
    from transformers.models.qwen3_5.modeling_qwen3_5 import torch_chunk_gated_delta_rule

    from training.runtime import cpu_float_mode

    gen = torch.Generator().manual_seed(0)
    b, t, h, d = 2, 128, 4, 32
    q, k, v = (torch.randn(b, t, h, d, generator=gen) for _ in range(3))
    g = -torch.rand(b, t, h, generator=gen) * 3.0  # cumulative decays down to ~-190 over a 64-token chunk
    beta = torch.rand(b, t, h, generator=gen)
    assert torch.exp(g.reshape(b, 2, 64, h).cumsum(2)).abs().lt(torch.finfo(torch.float32).tiny).any()
    try:
        torch.set_flush_denormal(False)
        exact, state = torch_chunk_gated_delta_rule(q, k, v, g, beta, output_final_state=True,
                                                    use_qk_l2norm_in_kernel=True)
        assert cpu_float_mode() is True  # x86 CPUs support FTZ/DAZ
        flushed, flushed_state = torch_chunk_gated_delta_rule(q, k, v, g, beta, output_final_state=True,
                                                              use_qk_l2norm_in_kernel=True)
    finally:
        cpu_float_mode()
    torch.testing.assert_close(flushed, exact, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(flushed_state, state, rtol=1e-6, atol=1e-6)
