"""The static-shape decode step (sampling.compile) against the eager loop: same tokens for a fixed seed,
on both tiny architectures, through every processor, stop strings, LoRA and a reused decoder."""

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from tests.training.conftest import tiny_run_config
from training import static_decoding
from training.config import LoraConfig, ModelConfig, SamplingConfig
from training.events import read_events
from training.generation import generate
from training.policy import generation_mode, load_policy
from training.trainer import train

PROMPTS = ["def add(a, b):\n", "def is_even(n):\n    \"\"\"Return True when n is even.\"\"\"\n", "x = ["]
SETTINGS = [
    {},
    {"top_k": 5},
    {"top_p": 0.9, "temperature": 0.8},
    {"temperature": 0.0},
    {"temperature": 0.7, "stop": ("\n",)},
]


@pytest.fixture(scope="module")
def model_and_tokenizer(tiny_model_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    return model, AutoTokenizer.from_pretrained(tiny_model_dir)


def _pair(model, tok, n=4, prompts=PROMPTS, **kw):
    out = {}
    for mode in ("off", "on"):
        sampling = SamplingConfig(max_new_tokens=20, compile=mode, **kw)
        out[mode] = generate(model, tok, prompts, sampling, num_return_sequences=n, generator_seed=3)
    return out["off"], out["on"]


def _assert_same(eager, static):
    assert static.completion_ids == eager.completion_ids
    assert static.texts == eager.texts
    assert static.finish_reasons == eager.finish_reasons
    for a, b in zip(eager.sampler_logprobs, static.sampler_logprobs):
        assert len(a) == len(b) and all(abs(x - y) < 1e-5 for x, y in zip(a, b))  # keys over a longer cache


@pytest.mark.parametrize("settings", SETTINGS, ids=lambda s: ",".join(f"{k}={v!r}" for k, v in s.items()) or "plain")
def test_the_static_step_samples_what_the_eager_loop_samples(model_and_tokenizer, settings):
    model, tok = model_and_tokenizer
    eager, static = _pair(model, tok, **settings)
    _assert_same(eager, static)
    assert model.__dict__.get("_crucible_static_decoders")  # the static path really ran


def test_rows_that_end_early_are_cut_as_the_eager_loop_cuts_them(model_and_tokenizer):
    model, tok = model_and_tokenizer
    # A stop string made of the commonest characters ends most rows within a few tokens, at different steps.
    eager, static = _pair(model, tok, n=6, stop=("e", "a", " "))
    assert "stop" in eager.finish_reasons and len(set(map(len, eager.completion_ids))) > 1
    _assert_same(eager, static)


def test_a_reused_decoder_starts_each_call_afresh(model_and_tokenizer):
    model, tok = model_and_tokenizer
    model.__dict__.pop("_crucible_static_decoders", None)
    sampling = SamplingConfig(max_new_tokens=12, compile="on", stop=())
    first = generate(model, tok, PROMPTS, sampling, num_return_sequences=2, generator_seed=11)
    other = generate(model, tok, PROMPTS[::-1], sampling, num_return_sequences=2, generator_seed=12)
    again = generate(model, tok, PROMPTS, sampling, num_return_sequences=2, generator_seed=11)
    assert len(model.__dict__["_crucible_static_decoders"]) <= static_decoding.KEEP_DECODERS
    assert again.completion_ids == first.completion_ids and other.completion_ids != first.completion_ids


def test_given_prompt_ids_are_decoded_as_the_eager_loop_decodes_them(model_and_tokenizer):
    model, tok = model_and_tokenizer
    ids = [tok(p)["input_ids"] for p in PROMPTS]
    out = {}
    for mode in ("off", "on"):
        sampling = SamplingConfig(max_new_tokens=10, compile=mode, stop=())
        out[mode] = generate(model, tok, PROMPTS, sampling, num_return_sequences=2, generator_seed=4, prompt_ids=ids)
    _assert_same(out["off"], out["on"])


def test_a_folded_lora_policy_samples_the_same_tokens_static_or_eager(tiny_model_dir):
    torch.manual_seed(0)
    pol = load_policy(ModelConfig(name_or_path=str(tiny_model_dir), lora=LoraConfig(r=4, alpha=8, dropout=0.0)))
    for name, p in pol.model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.05)
    with generation_mode(pol.model) as sampler:
        eager, static = _pair(sampler, pol.tokenizer, n=3, stop=())
    _assert_same(eager, static)


def test_eager_attention_gets_an_additive_mask_and_the_same_tokens(tiny_model_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, attn_implementation="eager").eval()
    eager, static = _pair(model, AutoTokenizer.from_pretrained(tiny_model_dir), n=2, stop=())
    _assert_same(eager, static)


def test_auto_decodes_eagerly_on_cpu_and_says_why(model_and_tokenizer):
    model, tok = model_and_tokenizer
    model.__dict__.pop("_crucible_static_decoders", None)
    sampling = SamplingConfig(max_new_tokens=4, stop=())
    assert sampling.compile == "auto"
    generate(model, tok, PROMPTS, sampling, num_return_sequences=2, generator_seed=1)
    assert not model.__dict__.get("_crucible_static_decoders")
    cpu = torch.device("cpu")
    assert static_decoding.describe(model, sampling, cpu) == {
        "compiled": False, "graphs": False, "batch_buckets": [], "eager_because": "sampling.compile is off here"}
    on = static_decoding.describe(model, SamplingConfig(compile="on"), cpu)
    assert on == {"compiled": True, "graphs": False, "batch_buckets": []}
    cuda = static_decoding.describe(model, sampling, torch.device("cuda"))
    assert cuda["compiled"] and cuda["graphs"] and cuda["batch_buckets"] == list(static_decoding.BATCH_BUCKETS)


def test_models_the_static_step_cannot_run_fall_back_to_the_eager_loop(model_and_tokenizer, monkeypatch):
    from types import SimpleNamespace

    sliding = SimpleNamespace(config=SimpleNamespace(_attn_implementation="sdpa",
                                                     layer_types=["sliding_attention", "full_attention"]))
    assert "sliding" in static_decoding.supported(sliding)
    flash = SimpleNamespace(config=SimpleNamespace(_attn_implementation="flash_attention_2"))
    assert "flash_attention_2" in static_decoding.supported(flash)
    model, tok = model_and_tokenizer
    assert static_decoding.supported(model) is None
    monkeypatch.setattr(static_decoding, "supported", lambda m: "a reason")
    model.__dict__.pop("_crucible_static_decoders", None)
    generate(model, tok, PROMPTS, SamplingConfig(max_new_tokens=4, compile="on", stop=()), num_return_sequences=2,
             generator_seed=1)
    assert not model.__dict__.get("_crucible_static_decoders")


def test_batches_are_padded_to_a_bucket_only_where_graphs_replay():
    assert static_decoding.bucket_for(5, graphs=False) == 5
    assert static_decoding.bucket_for(5, graphs=True) == 8
    assert static_decoding.bucket_for(128, graphs=True) == 128
    assert static_decoding.bucket_for(129, graphs=True) == 192
    assert static_decoding.bucket_for(10_000, graphs=True) == 10_000


def test_a_training_run_samples_with_the_static_step_and_says_so(tmp_path, tiny_model_dir, problems_file, runner):
    cfg = tiny_run_config(tiny_model_dir, problems_file, sampling={"compile": "on"})
    assert train(cfg, tmp_path / "run", runner=runner, progress=False) == "succeeded"
    events = read_events(tmp_path / "run" / "events.jsonl")
    assert events[0]["runtime"]["sampling"] == {"compiled": True, "graphs": False, "batch_buckets": [],
                                                "lora": "merged"}
    steps = [e for e in events if e["event"] == "step"]
    assert len(steps) == 2 and all(s["metrics"]["rollout/mismatch_kl"] < 1e-3 for s in steps)


def test_a_captured_step_replays_from_a_fresh_load(model_and_tokenizer, monkeypatch):
    """The CUDA path's order on CPU: warm-up and capture runs advance the buffers, the real call's load puts them
    back, and every token is a replay. Here a 'graph' replays the step eagerly, so the tokens must be exactly
    those of a decoder that never captured (the real capture is exercised by benchmarks/gpu_check.py)."""
    import contextlib

    model, tok = model_and_tokenizer
    sampling = SamplingConfig(max_new_tokens=2, compile="on", stop=())  # fewer tokens than warm-up + capture runs
    prompts = PROMPTS[:2]

    def decode_once(captured: bool):
        from transformers import DynamicCache

        from training.generation import _cache_kwarg, encode_prompts

        enc = encode_prompts(tok, prompts, sampling)
        p = max(map(len, enc))
        ids = torch.tensor([[tok.pad_token_id] * (p - len(e)) + e for e in enc])
        mask = torch.tensor([[0] * (p - len(e)) + [1] * len(e) for e in enc])
        cache = DynamicCache(config=model.config)
        with torch.no_grad():
            out = model(input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0),
                        use_cache=True, logits_to_keep=1, **{_cache_kwarg(model): cache})
            logits = out.logits[:, -1, :].repeat_interleave(3, dim=0)
            decoder = static_decoding.StaticDecoder(
                model, 6, p + 2, 2, logits.shape[1], cache_kwarg=_cache_kwarg(model), temperature=1.0, top_k=0, top_p=1.0,
                eos_ids=[tok.eos_token_id], pad_id=tok.pad_token_id, draw_rows=6, graphs=captured)
            decoder.load(cache, mask, 3, logits)
            if captured:
                class Graph:
                    def replay(self):
                        decoder.step()

                fake = type("cuda", (), {"Stream": lambda: type("S", (), {"wait_stream": lambda s, o: None})(),
                                         "stream": lambda s: contextlib.nullcontext(),
                                         "current_stream": lambda: type("S", (), {"wait_stream": lambda s, o: None})(),
                                         "CUDAGraph": Graph, "graph": lambda g: contextlib.nullcontext()})
                with monkeypatch.context() as m:
                    m.setattr(static_decoding.torch, "cuda", fake)
                    decoder.capture()
                assert isinstance(decoder.graph, Graph)
                decoder.load(cache, mask, 3, logits)
            torch.manual_seed(9)
            steps = decoder.run(2, None)
        return decoder.tokens[:, :steps].tolist(), decoder.logprobs[:, :steps].tolist()

    assert decode_once(captured=True) == decode_once(captured=False)
