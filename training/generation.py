"""Batched sampling of completions, stop strings and prompt building.

Sampling runs a minimal KV-cache loop (``_sample``: each prompt is prefilled once; for float32
full-attention models its keys/values are then kept once per prompt and attended to by all its
candidates (``_SharedPrefix``), finished rows leave the decoding batch, and the cache of generated
tokens is preallocated; otherwise the prompt cache is repeated per candidate) with the same
processors, in the same order, and the same random draws as Hugging Face ``generate``; a model whose
forward takes no cache argument goes through ``generate``.

The sampling distribution is exactly ``softmax(logits / temperature)`` restricted by ``top_p`` and
``top_k`` (``top_k=0``: no cut). Every other logits processor a checkpoint's ``generation_config``
might switch on (repetition penalty, min_p, typical_p, ...) is set to its neutral value, because the
trainer scores the sampled tokens under the policy and must see the distribution they came from.
``generate`` would otherwise apply ``top_k=50`` and a checkpoint's own temperature/top_p.

Stop strings: generation of a sequence ends as soon as its generated text contains a stop string
(checked each step on the last few tokens), and afterwards the completion is cut exactly:

* ``texts[i]`` is the generated text before the first stop string (or up to EOS / the length limit).
* ``completion_ids[i]`` is the shortest prefix of the sampled tokens whose decoding covers
  ``texts[i]``, so ``decode(completion_ids[i]).startswith(texts[i])``. When a stop string begins
  inside a token (``"\\n\\n"`` before ``"def "`` with stop ``"\\ndef "``), that boundary token is kept
  and its decoding carries the extra characters (here one ``"\\n"``): the token the policy chose is the
  one that is scored. At least one token is kept whenever one was generated, so a candidate that
  stopped immediately still gets a gradient.
* If the model emitted an end-of-sequence token before any stop string, that EOS id is the last
  element of ``completion_ids[i]`` (it is a sampled action), and it is not part of ``texts[i]``.
"""

from __future__ import annotations

import contextlib
import inspect
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch
from transformers import GenerationConfig, StoppingCriteria, StoppingCriteriaList

from training import static_decoding
from training.config import SamplingConfig

SYSTEM_PROMPT = ("You are an expert Python programmer. Reply with the complete solution in a single "
                 "```python fenced code block and nothing else.")


@dataclass
class GenerationBatch:
    """The sampled completions of one ``generate`` call, one entry per sequence.

    Sequences are grouped by prompt: with ``n = num_return_sequences`` sequence ``i`` belongs to
    prompt ``i // n`` (also given in ``prompt_index``).
    """

    prompt_ids: list[list[int]]
    """Token ids of the sequence's prompt, unpadded (the exact ids the model was conditioned on)."""
    completion_ids: list[list[int]]
    """Sampled token ids after the prompt, cut at the stop rule (module docstring); ends with the EOS
    id when the model emitted EOS; no padding. Score these for logprobs."""
    texts: list[str]
    """Decoded completion before the first stop string, without EOS: what goes to the sandbox."""
    prompt_index: list[int]
    """Index into the ``prompts`` argument of each sequence."""
    finish_reasons: list[str]
    """``"eos"``, ``"stop"`` (a stop string) or ``"length"`` (max_new_tokens reached)."""
    generated_tokens: list[int]
    """Tokens sampled per sequence before cutting (the work done; for tokens/s)."""
    prompts: list[str] = field(default_factory=list)
    """The prompt strings, one per input prompt (not per sequence)."""
    sampler_logprobs: list[list[float]] = field(default_factory=list)
    """Per sequence, the sampler's log-probability of each kept completion token under
    ``softmax(logits / temperature)`` (no top-k/top-p cut: the distribution the trainer scores), one
    per ``completion_ids`` entry. Compared with the trainer's old-policy log-probs of the same tokens
    under the same weights, it measures sampler/trainer mismatch (``rollout/mismatch_kl``)."""
    completion_turns: list[list[int]] = field(default_factory=list)
    """Multi-turn trajectories only (empty otherwise): per sequence, the 0-based turn of each
    ``completion_ids`` token, -1 on the feedback tokens between turns (not the model's: out of the loss,
    the KL and the entropy; their ``sampler_logprobs`` are 0)."""

    def __len__(self) -> int:
        return len(self.completion_ids)

    @property
    def num_generated_tokens(self) -> int:
        return sum(self.generated_tokens)

    @property
    def truncated(self) -> list[bool]:
        """Per sequence: generation hit ``max_new_tokens`` (no EOS, no stop string)."""
        return [r == "length" for r in self.finish_reasons]

    def padded(self, pad_token_id: int, device: torch.device | str | None = None) -> dict[str, torch.Tensor]:
        """Tensors to score the completions with one forward pass.

        Prompts are left-padded to ``P`` and completions right-padded to ``C``:

        * ``input_ids``      (B, P + C)
        * ``attention_mask`` (B, P + C)  1 on real prompt and completion tokens
        * ``position_ids``   (B, P + C)  ``cumsum(attention_mask) - 1``, as ``generate`` used; pass
          them to the forward or left padding shifts every position
        * ``completion_mask`` (B, C)     1 on kept completion tokens; the logits predicting
          completion token ``j`` sit at position ``P + j - 1``
        * ``prompt_length`` P (python int, via ``int(t["prompt_length"])``)
        * ``prompt_index``   (B,)        ``prompt_index`` of each sequence (which rows share a prompt)
        * ``sampler_logprobs`` (B, C)    the sampler's log-probs of the completion tokens (0 on padding),
          when recorded
        * ``loss_mask``      (B, C)      multi-turn only (``completion_turns``): ``completion_mask`` with the
          feedback tokens zeroed, the tokens the policy is trained on
        * ``token_turns``    (B, C)      multi-turn only: each completion token's turn, -1 on feedback and padding
        """
        b = len(self)
        p = max(len(x) for x in self.prompt_ids)
        c = max(1, max(len(x) for x in self.completion_ids))
        input_ids = torch.full((b, p + c), pad_token_id, dtype=torch.long)  # (B, P + C)
        attention_mask = torch.zeros((b, p + c), dtype=torch.long)  # (B, P + C)
        completion_mask = torch.zeros((b, c), dtype=torch.long)  # (B, C)
        for i, (pr, co) in enumerate(zip(self.prompt_ids, self.completion_ids)):
            input_ids[i, p - len(pr):p] = torch.tensor(pr, dtype=torch.long)
            attention_mask[i, p - len(pr):p] = 1
            if co:
                input_ids[i, p:p + len(co)] = torch.tensor(co, dtype=torch.long)
                attention_mask[i, p:p + len(co)] = 1
                completion_mask[i, :len(co)] = 1
        position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)  # (B, P + C)
        out = {"input_ids": input_ids, "attention_mask": attention_mask, "position_ids": position_ids,
               "completion_mask": completion_mask, "prompt_length": torch.tensor(p),
               "prompt_index": torch.tensor(self.prompt_index, dtype=torch.long)}
        if len(self.sampler_logprobs) == b:
            sampler = torch.zeros((b, c), dtype=torch.float32)  # (B, C)
            for i, lp in enumerate(self.sampler_logprobs):
                if lp:
                    sampler[i, :len(lp)] = torch.tensor(lp, dtype=torch.float32)
            out["sampler_logprobs"] = sampler
        if self.completion_turns:
            turns = torch.full((b, c), -1, dtype=torch.long)  # (B, C)
            for i, row in enumerate(self.completion_turns):
                if row:
                    turns[i, :len(row)] = torch.tensor(row, dtype=torch.long)
            out["token_turns"] = turns
            out["loss_mask"] = completion_mask * (turns >= 0).long()  # (B, C)
        if device is not None:
            out = {k: v.to(device) for k, v in out.items()}
        return out


def build_prompt(problem: Any, tokenizer: Any, prompt_style: str, thinking: bool = False) -> str:
    """The text the model continues.

    ``completion``: the problem's own prompt (HumanEval style: signature + docstring; the model
    writes the body). ``chat``: the tokenizer's chat template with a system message and a user
    message asking for the solution in a fenced python block, ending with the assistant turn opener;
    ``thinking`` is the template's ``enable_thinking`` (Qwen3/Qwen3.5: off pre-fills an empty
    ``<think></think>`` block so the model answers at once; on lets it reason first).
    """
    prompt = _get(problem, "prompt") or ""
    if prompt_style == "completion":
        return prompt
    if prompt_style != "chat":
        raise ValueError(f"unknown prompt_style {prompt_style!r}; use 'completion' or 'chat'")
    if getattr(tokenizer, "chat_template", None) is None:
        raise ValueError("prompt_style 'chat' needs a tokenizer with a chat template; this tokenizer has "
                         "none (use prompt_style: completion, or a chat/instruct model)")
    kind = _get(problem, "kind") or "function"
    if kind == "stdio":
        user = ("Write a Python program that reads from standard input and writes to standard output.\n\n"
                f"{prompt.strip()}")
    else:
        entry = _get(problem, "entry_point")
        name = f" `{entry}`" if entry else ""
        user = (f"Complete the Python function{name} below. Return the whole function.\n\n"
                f"```python\n{prompt.rstrip()}\n```")
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                         enable_thinking=bool(thinking))
    return text if isinstance(text, str) else tokenizer.decode(text)


THINK_CLOSE = "</think>"


def answer_after_thinking(reply: str) -> str | None:
    """The answer of a thinking model's reply: the text after its last ``</think>``; None when the
    thinking never closed (cut off at the token limit), so that such a reply gets no code."""
    end = reply.rfind(THINK_CLOSE)
    return None if end < 0 else reply[end + len(THINK_CLOSE):]


def _get(obj: Any, name: str) -> Any:
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)


def eos_token_ids(model: Any, tokenizer: Any) -> list[int]:
    """Every id that ends a sequence: the tokenizer's EOS plus the model's generation_config EOS ids."""
    ids: list[int] = []
    for source in (getattr(getattr(model, "generation_config", None), "eos_token_id", None),
                   tokenizer.eos_token_id):
        if source is None:
            continue
        for i in (source if isinstance(source, (list, tuple)) else [source]):
            if i is not None and int(i) not in ids:
                ids.append(int(i))
    return ids


class _StopOnStrings(StoppingCriteria):
    """Marks a sequence done once the tail of its generated text contains a stop string.

    Only the last ``window`` generated tokens are decoded each step (a token decodes to at least one
    byte, so ``longest stop + 1`` tokens always cover a stop string that just completed).
    """

    def __init__(self, tokenizer: Any, stops: Sequence[str], prompt_length: int):
        self.tokenizer = tokenizer
        self.stops = tuple(stops)
        self.prompt_length = prompt_length
        self.window = max(len(s) for s in self.stops) + 1
        self.done: torch.Tensor | None = None

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        b = input_ids.shape[0]
        if self.done is None:
            self.done = torch.zeros(b, dtype=torch.bool, device=input_ids.device)
        gen = input_ids[:, self.prompt_length:]  # (B, T_gen)
        start = max(0, gen.shape[1] - self.window)
        todo = (~self.done).nonzero().flatten().tolist()
        if todo:
            tails = self.tokenizer.batch_decode(gen[todo, start:].tolist(), skip_special_tokens=False,
                                                clean_up_tokenization_spaces=False)
            for i, tail in zip(todo, tails):
                if any(s in tail for s in self.stops):
                    self.done[i] = True
        return self.done.clone()


@torch.no_grad()
def generate(model: Any, tokenizer: Any, prompts: Sequence[str], sampling: SamplingConfig, *,
             num_return_sequences: int = 1, generator_seed: int | None = None,
             add_special_tokens: bool | None = None,
             prompt_ids: Sequence[Sequence[int]] | None = None) -> GenerationBatch:
    """Sample ``num_return_sequences`` completions for each prompt in one batched ``generate``.

    Left padding, attention mask and KV cache; ``temperature == 0`` decodes greedily. With
    ``generator_seed`` the call is deterministic and leaves the global RNG state untouched; without
    it, sampling draws from the global torch RNG (seed it once per run). ``add_special_tokens``
    defaults to True for completion prompts (a BOS where the tokenizer uses one) and False for chat
    prompts (the template already holds the special tokens). ``prompt_ids``: the exact token ids of
    each prompt (a multi-turn trajectory so far), used as they are instead of tokenising ``prompts``.
    """
    eos_ids = eos_token_ids(model, tokenizer)
    pad_id = tokenizer.pad_token_id
    if pad_id is None:
        if not eos_ids:
            raise ValueError("the tokenizer has neither a pad token nor an EOS token; set tokenizer.pad_token")
        pad_id = eos_ids[0]

    encoded = encode_prompts(tokenizer, prompts, sampling, add_special_tokens, prompt_ids=prompt_ids)
    p_len = max(len(e) for e in encoded)
    input_ids = torch.full((len(encoded), p_len), pad_id, dtype=torch.long)  # (N, P) left-padded
    attention_mask = torch.zeros((len(encoded), p_len), dtype=torch.long)  # (N, P)
    for i, e in enumerate(encoded):
        input_ids[i, p_len - len(e):] = torch.tensor(e, dtype=torch.long)
        attention_mask[i, p_len - len(e):] = 1
    device = next(model.parameters()).device
    input_ids, attention_mask = input_ids.to(device), attention_mask.to(device)
    greedy = sampling.temperature == 0
    stops = sampling.stop_strings
    rng = contextlib.nullcontext()
    if generator_seed is not None:
        devices = [device] if device.type == "cuda" else []
        rng = torch.random.fork_rng(devices=devices, device_type=device.type if devices else "cuda")
    cache_kwarg = _cache_kwarg(model)
    if cache_kwarg is not None:
        with rng:
            if generator_seed is not None:
                torch.manual_seed(generator_seed)
            sequences, logprobs = _sample(_forward_model(model), input_ids, attention_mask, num_return_sequences,
                                          sampling, eos_ids, pad_id,
                                          _StopOnStrings(tokenizer, stops, 0) if stops else None, cache_kwarg)
        return _batch(sequences.tolist(), encoded, prompts, num_return_sequences, tokenizer, stops, eos_ids, pad_id,
                      logprobs.tolist())

    # Fallback (a model whose forward takes no KV cache argument): Hugging Face generate.
    # Repeat each prompt n times ourselves: generate refuses num_return_sequences > 1 when greedy.
    input_ids = input_ids.repeat_interleave(num_return_sequences, dim=0)  # (N * n, P)
    attention_mask = attention_mask.repeat_interleave(num_return_sequences, dim=0)  # (N * n, P)
    gen_config = GenerationConfig(
        max_new_tokens=sampling.max_new_tokens,
        do_sample=not greedy,
        temperature=1.0 if greedy else float(sampling.temperature),
        top_p=1.0 if greedy else float(sampling.top_p),
        top_k=0 if greedy else int(sampling.top_k),  # explicit: generate's default would be 50
        # Neutral values, so a checkpoint's generation_config cannot reshape the distribution.
        min_p=0.0, typical_p=1.0, repetition_penalty=1.0, no_repeat_ngram_size=0,
        epsilon_cutoff=0.0, eta_cutoff=0.0, num_beams=1, use_cache=True,
        num_return_sequences=1,
        pad_token_id=pad_id, eos_token_id=eos_ids or None,
        output_logits=True, return_dict_in_generate=True,  # raw logits: the sampler's log-probs
    )
    criteria = StoppingCriteriaList([_StopOnStrings(tokenizer, stops, p_len)]) if stops else None
    with rng:
        if generator_seed is not None:
            torch.manual_seed(generator_seed)
        out = model.generate(input_ids=input_ids, attention_mask=attention_mask,
                             generation_config=gen_config, stopping_criteria=criteria)
    generated = out.sequences[:, p_len:]  # (N * n, T)
    scale = 1.0 if greedy else float(sampling.temperature)
    logprobs = torch.stack([(step.float() / scale).log_softmax(-1) for step in out.logits], 1)  # (N * n, T, V)
    logprobs = logprobs.gather(-1, generated[:, :, None]).squeeze(-1)  # (N * n, T)
    return _batch(generated.tolist(), encoded, prompts, num_return_sequences, tokenizer, stops, eos_ids, pad_id,
                  logprobs.tolist())


def encode_prompts(tokenizer: Any, prompts: Sequence[str], sampling: SamplingConfig,
                   add_special_tokens: bool | None = None,
                   prompt_ids: Sequence[Sequence[int]] | None = None) -> list[list[int]]:
    """The token ids every engine conditions on. ``add_special_tokens`` defaults to True for completion
    prompts (a BOS where the tokenizer uses one) and False for chat prompts (the template holds them).
    ``prompt_ids`` given (one list per prompt): those ids exactly, nothing tokenised."""
    if not prompts:
        raise ValueError("generate() needs at least one prompt")
    if prompt_ids is not None:
        if len(prompt_ids) != len(prompts):
            raise ValueError(f"prompt_ids has {len(prompt_ids)} entries for {len(prompts)} prompts; "
                             "give one per prompt")
        if any(len(ids) == 0 for ids in prompt_ids):
            raise ValueError("a prompt's token ids are empty; the model needs at least one token to continue")
        return [[int(i) for i in ids] for ids in prompt_ids]
    if add_special_tokens is None:
        add_special_tokens = sampling.prompt_style == "completion"
    encoded = [tokenizer(p, add_special_tokens=add_special_tokens)["input_ids"] for p in prompts]
    if any(len(e) == 0 for e in encoded):
        raise ValueError("a prompt encodes to zero tokens; the model needs at least one token to continue "
                         "(give the problem a prompt, or use a tokenizer that adds a BOS token)")
    return encoded


def _forward_model(model: Any) -> Any:
    """The module whose forward the decoding loop calls: the inner transformers model of a LoRA
    ``PeftModel`` (its wrapper forward only hands the arguments through, Python overhead on every
    decoding step), the model itself otherwise (prompt-learning adapters change the inputs)."""
    config = getattr(model, "active_peft_config", None)
    if config is None or getattr(config, "is_prompt_learning", True) or getattr(model, "modules_to_save", None):
        return model
    inner = _base_model(model)
    return inner if isinstance(inner, torch.nn.Module) else model


def _cache_kwarg(model: Any) -> str | None:
    """Name of the KV-cache argument of the model's forward (transformers 5.24 renamed
    ``past_key_values`` to ``cache``), or None when it takes neither (then ``generate`` is used)."""
    inner = model
    while hasattr(inner, "get_base_model") and inner is not inner.get_base_model():
        inner = inner.get_base_model()  # PeftModel: its own forward only forwards **kwargs
    try:
        params = inspect.signature(inner.forward).parameters
    except (TypeError, ValueError):
        return None
    if getattr(getattr(inner, "config", None), "is_encoder_decoder", False):
        return None
    return next((name for name in ("cache", "past_key_values") if name in params), None)


def _sample(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, n: int, sampling: SamplingConfig,
            eos_ids: list[int], pad_id: int, stop: _StopOnStrings | None, cache_kwarg: str
            ) -> tuple[torch.Tensor, torch.Tensor]:
    """The sampling loop of ``generate`` without its overhead: each prompt is prefilled once and its KV
    cache shared by its ``n`` sequences (``_SharedPrefix``) or, where that does not apply, repeated
    for them. Same distribution and order of processors as
    ``generate``: ``softmax(top_p(top_k(logits / temperature)))``, argmax when ``temperature == 0``;
    a finished row (EOS or stop string) is padded with ``pad_id`` afterwards.

    input_ids, attention_mask: (N, P) left-padded -> generated ids (N * n, T), T <= max_new_tokens,
    and their sampler log-probs (N * n, T)
    """
    from transformers import DynamicCache

    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)  # (N, P)
    cache = DynamicCache(config=model.config)
    out = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=True,
                logits_to_keep=1, **{cache_kwarg: cache})
    max_new = sampling.max_new_tokens
    if static_decoding.wanted(getattr(sampling, "compile", "off"), input_ids.device) and (
            static_decoding.supported(model) is None):
        logits = out.logits[:, -1, :].repeat_interleave(n, dim=0)  # (B, V), B = N * n
        return static_decoding.decode(model, cache, attention_mask, n, logits, sampling, eos_ids, pad_id,
                                      stop.tokenizer if stop else None, stop.stops if stop else (), cache_kwarg)
    prefix = _SharedPrefix.build(model, cache, attention_mask, n)
    if prefix is not None:  # the prompts' keys/values stay one per prompt; the cache holds completions only
        prefix.detach_prompt(cache)
    if n > 1:  # linear-attention state (and, without a shared prefix, the prompt's keys/values) per candidate
        select_cache_rows(cache, torch.arange(input_ids.shape[0], device=input_ids.device).repeat_interleave(n))
    if prefix is None:
        _preallocate(cache, max_new)
    logits = out.logits[:, -1, :].repeat_interleave(n, dim=0)  # (B, V), B = N * n
    position = position_ids[:, -1:].repeat_interleave(n, dim=0)  # (B, 1)
    b, p = logits.shape[0], attention_mask.shape[1]
    mask = torch.cat([attention_mask.repeat_interleave(n, dim=0),
                      attention_mask.new_ones(b, max_new)], dim=1)  # (B, P + max_new)
    with prefix or contextlib.nullcontext():
        return _decode_loop(model, logits, position, mask, p, cache, cache_kwarg, sampling, eos_ids, pad_id, stop,
                            prefix)


def _decode_loop(model: Any, logits: torch.Tensor, position: torch.Tensor, mask: torch.Tensor, p: int, cache: Any,
                 cache_kwarg: str, sampling: SamplingConfig, eos_ids: list[int], pad_id: int,
                 stop: _StopOnStrings | None, prefix: "_SharedPrefix | None") -> tuple[torch.Tensor, torch.Tensor]:
    """Sample token by token from the prefill's last ``logits`` (B, V) -> generated ids (B, T) and
    their log-probs under ``softmax(logits / temperature)`` (B, T).

    Finished rows leave the batch (``active``: the rows still decoding) once a quarter of it has
    finished, so the forward passes stop computing them (every cache layer type drops their rows). Sampling still draws the
    random numbers of the whole batch, exactly as ``torch.multinomial`` on (B, V) probabilities
    does (``argmax(p / q)``, ``q ~ Exp(1)`` per entry), so the draws do not depend on which rows are
    still decoding.
    """
    b, max_new = logits.shape[0], sampling.max_new_tokens
    device = logits.device
    eos = torch.tensor(eos_ids, dtype=torch.long, device=device)  # (E,)
    done = torch.zeros(b, dtype=torch.bool, device=device)  # (B,)
    active = torch.arange(b, device=device)  # (B',) rows still in the decoding batch
    temperature, top_k, top_p = float(sampling.temperature), int(sampling.top_k), float(sampling.top_p)
    cut = 0 < top_k or top_p < 1.0
    tokens: list[torch.Tensor] = []
    logprobs = torch.zeros((b, max_new), dtype=torch.float32, device=device)  # (B, max_new)
    for t in range(max_new):
        scores = logits.float()  # (B', V)
        if temperature == 0:
            drawn = scores.argmax(-1)  # (B',)
            tempered = scores  # the trainer scores greedy samples at temperature 1
        else:
            if temperature != 1.0:
                scores = scores / temperature
            tempered = scores  # (B', V) what the trainer scores; the cuts below make new tensors
            if 0 < top_k < scores.shape[-1]:  # TopKLogitsWarper
                kth = torch.topk(scores, top_k, dim=-1).values[:, -1:]  # (B', 1)
                scores = scores.masked_fill(scores < kth, float("-inf"))
            if top_p < 1.0:  # TopPLogitsWarper: drop the low tail of mass <= 1 - top_p, keep >= 1 token
                sorted_scores, sorted_idx = torch.sort(scores, descending=False)  # (B', V)
                cum = sorted_scores.softmax(-1).cumsum(-1)  # (B', V)
                drop = cum <= (1 - top_p)
                drop[:, -1] = False
                scores = scores.masked_fill(drop.scatter(1, sorted_idx, drop), float("-inf"))
            probs = scores.softmax(-1)  # (B', V)
            if active.numel() == b:
                drawn = torch.multinomial(probs, num_samples=1).squeeze(1)  # (B,)
            else:  # torch.multinomial's own algorithm, on the whole batch's random numbers
                q = torch.empty((b, probs.shape[1]), dtype=probs.dtype, device=device).exponential_(1)  # (B, V)
                drawn = (probs / q[active]).argmax(-1)  # (B',)
        nxt = torch.full((b,), pad_id, dtype=torch.long, device=device)  # (B,)
        nxt[active] = drawn
        nxt = torch.where(done, torch.full_like(nxt, pad_id), nxt)
        tokens.append(nxt)
        # The sampler's log-prob of each drawn token under softmax(logits / temperature): without a
        # top-k/top-p cut the sampling probabilities are exactly that distribution (no second pass).
        if temperature == 0 or cut:
            drawn_lp = tempered.gather(-1, drawn[:, None]).squeeze(-1) - torch.logsumexp(tempered, -1)  # (B',)
        else:
            drawn_lp = probs.gather(-1, drawn[:, None]).squeeze(-1).log()  # (B',)
        logprobs[active, t] = drawn_lp
        if eos.numel():
            done = done | torch.isin(nxt, eos)
        if stop is not None:
            done = done | stop(torch.stack(tokens, 1), scores)
        if t == max_new - 1 or bool(done.all()):
            break
        position = position + 1
        finished = done[active]  # (B',)
        n_finished = int(finished.sum())
        if n_finished and n_finished * 4 >= active.numel():
            keep = (~finished).nonzero().flatten()  # (B'',)
            active, position, mask = active[keep], position[keep], mask[keep]
            select_cache_rows(cache, keep)
            if prefix is not None:
                prefix.rows = active
        # With a shared prefix every key in the cache is a sampled token (none is padding): no mask.
        step_mask = None if prefix is not None else mask[:, :p + t + 1]
        out = model(input_ids=nxt[active][:, None], attention_mask=step_mask, position_ids=position,
                    use_cache=True, **{cache_kwarg: cache})
        if prefix is not None and t == 0:
            _preallocate(cache, max_new)
        logits = out.logits[:, -1, :]
    return torch.stack(tokens, 1), logprobs[:, :len(tokens)]  # (B, T), (B, T)


_PREFIX_ATTENTION = "crucible_shared_prefix"


class _SharedPrefix:
    """Decoding attention over a prompt shared by ``n`` sequences, kept once ("cascade" attention).

    The ``n`` candidates of a prompt attend to the same prompt keys/values. Repeating them ``n``
    times in the cache makes every decoding step read ``n`` copies, and decoding is bound by reading
    the cache. Here the prompt's keys/values (``N`` rows) stay outside the cache, which holds only the
    generated tokens (``N * n`` rows), and attention combines both halves in one softmax:
    ``softmax([q K_prompt^T + padding bias | q K_gen^T] * scale) [V_prompt; V_gen]`` — the same
    function as attention over the concatenation (tested against the plain loop).

    Used only where this is known to be exact: float32 models whose layers are plain full attention
    with a plain ``DynamicLayer`` cache (no sliding window) or linear attention (Qwen3.5's gated delta
    rule: its conv and recurrent state is fixed-size, so it is simply copied per candidate), and
    ``n > 1``. While active (a context manager) the model's attention implementation is switched to a
    registered function that handles single-token decoding steps and delegates anything else to the
    original implementation.
    """

    _active: "_SharedPrefix | None" = None

    def __init__(self, config: Any, keys: dict[int, torch.Tensor], values: dict[int, torch.Tensor],
                 bias: torch.Tensor, n: int):
        self.config = config
        self.keys, self.values = keys, values  # per attention layer index (N, H_kv, P, D)
        self.bias = bias  # (N, 1, 1, P): 0 on prompt tokens, -inf on left padding
        self.n = n
        self.rows: torch.Tensor | None = None
        """Rows (of the N * n) still decoding, when finished ones have left the batch; None: all."""
        self._previous: Any = None

    @classmethod
    def build(cls, model: Any, cache: Any, attention_mask: torch.Tensor, n: int) -> "_SharedPrefix | None":
        from transformers.cache_utils import DynamicLayer

        config = getattr(_base_model(model), "config", None)
        if n <= 1 or config is None or getattr(config, "is_encoder_decoder", False):
            return None
        if getattr(config, "_attn_implementation", None) not in ("sdpa", "eager"):
            return None
        if getattr(config, "sliding_window", None) and getattr(config, "use_sliding_window", True):
            return None
        types = list(getattr(config, "layer_types", None) or [])
        if any(t not in ("full_attention", "linear_attention") for t in types):
            return None
        layers = getattr(cache, "layers", None)
        if not layers or len(layers) != (len(types) or len(layers)):
            return None
        attention = {}  # layer index -> its prompt cache; linear-attention layers keep a fixed-size state
        for i, layer in enumerate(layers):
            if types and types[i] == "linear_attention":
                if not _is_linear_layer(layer):
                    return None
                continue
            if (type(layer) is not DynamicLayer or not layer.is_initialized or layer.keys.dim() != 4
                    or layer.keys.dtype != torch.float32):
                return None
            attention[i] = layer
        if not attention:
            return None
        bias = torch.zeros(attention_mask.shape, dtype=torch.float32, device=attention_mask.device)
        bias = bias.masked_fill(attention_mask == 0, float("-inf"))[:, None, None, :]  # (N, 1, 1, P)
        return cls(config, {i: layer.keys for i, layer in attention.items()},
                   {i: layer.values for i, layer in attention.items()}, bias, n)

    def detach_prompt(self, cache: Any) -> None:
        """Empty the attention layers of ``cache`` (their prompt keys/values now live here, once per
        prompt); from here on they hold generated tokens only. Linear-attention layers keep their state."""
        from transformers.cache_utils import DynamicLayer

        for i in self.keys:
            cache.layers[i] = DynamicLayer()

    def __enter__(self) -> "_SharedPrefix":
        _register_shared_prefix_attention()
        self._previous = self.config._attn_implementation
        self.config._attn_implementation = _PREFIX_ATTENTION
        _SharedPrefix._active = self
        return self

    def __exit__(self, *exc: Any) -> None:
        _SharedPrefix._active = None
        self.config._attn_implementation = self._previous

    def attend(self, module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
               scaling: float) -> torch.Tensor:
        """One decoding step of layer ``module.layer_idx``.

        query (B, H, 1, D); key, value: generated tokens (B, H_kv, t, D) -> output (B, 1, H, D)
        """
        kp, vp = self.keys[module.layer_idx], self.values[module.layer_idx]  # (N, H_kv, P, D)
        groups, h_kv, p, d = kp.shape
        b, h = query.shape[0], query.shape[1]  # b = B' rows still decoding
        n, rep, full = self.n, h // h_kv, groups * self.n
        q = query.reshape(b, h_kv, rep, d)  # query head j * rep + r reads key head j (repeat_kv)
        rows = self.rows
        q_all = q if rows is None else q.new_zeros(full, h_kv, rep, d).index_copy_(0, rows, q)  # (B, H_kv, rep, D)
        q_grouped = q_all.view(groups, n, h_kv, rep, d).transpose(1, 2).reshape(groups, h_kv, n * rep, d)
        s_prompt = torch.matmul(q_grouped, kp.transpose(-1, -2)).mul_(scaling).add_(self.bias)  # (N, H_kv, n*rep, P)
        s_prompt = s_prompt.view(groups, h_kv, n, rep, p).transpose(1, 2).reshape(full, h_kv, rep, p)
        if rows is not None:
            s_prompt = s_prompt[rows]  # (B', H_kv, rep, P)
        s_gen = torch.matmul(q, key.transpose(-1, -2)).mul_(scaling)  # (B', H_kv, rep, t)
        w = torch.cat([s_prompt, s_gen], dim=-1).softmax(-1)  # (B', H_kv, rep, P + t)
        w_prompt = w[..., :p]
        if rows is not None:
            w_prompt = w_prompt.new_zeros(full, h_kv, rep, p).index_copy_(0, rows, w_prompt)  # (B, H_kv, rep, P)
        w_prompt = w_prompt.reshape(groups, n, h_kv, rep, p).transpose(1, 2).reshape(groups, h_kv, n * rep, p)
        out = torch.matmul(w_prompt, vp).view(groups, h_kv, n, rep, -1).transpose(1, 2).reshape(full, h_kv, rep, -1)
        if rows is not None:
            out = out[rows]  # (B', H_kv, rep, D_v)
        out = out + torch.matmul(w[..., p:], value)  # (B', H_kv, rep, D_v)
        return out.reshape(b, h, 1, -1).transpose(1, 2)  # (B', 1, H, D_v)


def _shared_prefix_attention(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                             attention_mask: torch.Tensor | None, scaling: float | None = None, **kwargs: Any
                             ) -> tuple[torch.Tensor, None]:
    state = _SharedPrefix._active
    if (state is None or query.shape[2] != 1 or kwargs.get("sliding_window") is not None
            or getattr(module, "layer_idx", None) not in state.keys):
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, **kwargs)
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    return state.attend(module, query, key, value, scale), None


def _register_shared_prefix_attention() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    if _PREFIX_ATTENTION not in AttentionInterface._global_mapping:
        AttentionInterface.register(_PREFIX_ATTENTION, _shared_prefix_attention)
        AttentionMaskInterface.register(_PREFIX_ATTENTION, sdpa_mask)


def _is_linear_layer(layer: Any) -> bool:
    from transformers.cache_utils import LinearAttentionCacheLayerMixin

    return isinstance(layer, LinearAttentionCacheLayerMixin)


def select_cache_rows(cache: Any, rows: torch.Tensor) -> None:
    """Keep (and reorder, or repeat) batch rows ``rows`` (R,) of every layer of ``cache``: keys/values
    of attention layers, conv and recurrent state of linear-attention layers (which have no
    ``batch_select_indices``; their ``reorder_cache`` is the same row selection)."""
    for layer in cache.layers:
        if _is_linear_layer(layer):
            layer.reorder_cache(rows)
        else:
            layer.batch_select_indices(rows)


def _base_model(model: Any) -> Any:
    inner = model
    while hasattr(inner, "get_base_model") and inner is not inner.get_base_model():
        inner = inner.get_base_model()
    return inner


def _preallocate(cache: Any, extra: int) -> None:
    """Give every plain dynamic layer of ``cache`` room for ``extra`` more positions, so that each
    decoding step writes its keys/values in place instead of re-copying the whole cache (``torch.cat``).
    The layers still expose ``keys``/``values`` as (B, H, S, D) tensors of the current length."""
    from transformers.cache_utils import DynamicLayer

    for layer in getattr(cache, "layers", []):
        if type(layer) is DynamicLayer and layer.is_initialized and layer.keys.dim() == 4:
            layer.__class__ = _PreallocatedLayer
            layer.preallocate(extra)


def _preallocated_layer_class() -> type:
    from transformers.cache_utils import DynamicLayer

    class PreallocatedLayer(DynamicLayer):
        """A DynamicLayer whose keys/values are views of a buffer with spare positions."""

        def preallocate(self, extra: int) -> None:
            b, h, s, d = self.keys.shape
            self._kbuf = self.keys.new_empty(b, h, s + extra, d)
            self._vbuf = self.values.new_empty(b, h, s + extra, self.values.shape[-1])
            self._kbuf[:, :, :s] = self.keys
            self._vbuf[:, :, :s] = self.values
            self.keys, self.values = self._kbuf[:, :, :s], self._vbuf[:, :, :s]

        def batch_select_indices(self, indices: torch.Tensor) -> None:
            s = self.keys.shape[-2]
            self._kbuf, self._vbuf = self._kbuf[indices], self._vbuf[indices]
            self.keys, self.values = self._kbuf[:, :, :s], self._vbuf[:, :, :s]

        def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any,
                   **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
            s, end = self.keys.shape[-2], self.keys.shape[-2] + key_states.shape[-2]
            if end > self._kbuf.shape[-2] or key_states.shape[0] != self._kbuf.shape[0]:
                return super().update(key_states, value_states, *args, **kwargs)  # out of room: grow
            self._kbuf[:, :, s:end] = key_states
            self._vbuf[:, :, s:end] = value_states
            self.keys, self.values = self._kbuf[:, :, :end], self._vbuf[:, :, :end]
            return self.keys, self.values

    return PreallocatedLayer


_PreallocatedLayer = _preallocated_layer_class()


def _batch(generated: list[list[int]], encoded: list[list[int]], prompts: Sequence[str], num_return_sequences: int,
           tokenizer: Any, stops: Sequence[str], eos_ids: list[int], pad_id: int,
           logprobs: list[list[float]]) -> GenerationBatch:
    batch = GenerationBatch([], [], [], [], [], [], prompts=list(prompts))
    eos_set = set(eos_ids)
    for row, gen in enumerate(generated):
        k = row // num_return_sequences
        ids, text, reason, n_sampled = cut_completion(gen, tokenizer, stops, eos_set, pad_id)
        batch.prompt_ids.append(list(encoded[k]))
        batch.completion_ids.append(ids)
        batch.sampler_logprobs.append(logprobs[row][:len(ids)])  # completion ids are a prefix of the row
        batch.texts.append(text)
        batch.prompt_index.append(k)
        batch.finish_reasons.append(reason)
        batch.generated_tokens.append(n_sampled)
    return batch


def _decode(tokenizer: Any, ids: Sequence[int]) -> str:
    return tokenizer.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)


def cut_completion(gen: list[int], tokenizer: Any, stops: Sequence[str], eos: set[int],
                   pad_id: int) -> tuple[list[int], str, str, int]:
    """Apply EOS and stop strings to one generated row: (completion_ids, text, finish_reason, sampled).

    The module docstring's contract, for every engine (a row without padding passes ``pad_id=-1``)."""
    # Everything after the first EOS is padding (generate pads finished rows; pad may equal EOS).
    end = next((j for j, t in enumerate(gen) if t in eos), None)
    body = gen[:end] if end is not None else gen
    # A row ended by a stop string is padded with pad_id afterwards; those ids were never sampled.
    sampled = len(body)
    while sampled and body[sampled - 1] == pad_id:
        sampled -= 1
    text = _decode(tokenizer, body[:sampled])
    hits = [pos for pos in (text.find(s) for s in stops) if pos >= 0]
    if hits:
        text = text[:min(hits)]
        n = max(1, _covering_prefix(body, text, tokenizer))
        return body[:n], text, "stop", sampled
    if end is not None:
        return body + [gen[end]], text, "eos", end + 1
    return body[:sampled], text, "length", sampled


def _covering_prefix(ids: list[int], text: str, tokenizer: Any) -> int:
    """Smallest ``n`` with ``decode(ids[:n]).startswith(text)`` (binary search; the predicate is
    monotone for byte-level tokenizers, verified and fixed up by a linear scan otherwise)."""
    if not text:
        return 0
    lo, hi = 1, len(ids)
    while lo < hi:
        mid = (lo + hi) // 2
        if _decode(tokenizer, ids[:mid]).startswith(text):
            hi = mid
        else:
            lo = mid + 1
    if _decode(tokenizer, ids[:lo]).startswith(text) and (
            lo == 1 or not _decode(tokenizer, ids[:lo - 1]).startswith(text)):
        return lo
    for n in range(1, len(ids) + 1):
        if _decode(tokenizer, ids[:n]).startswith(text):
            return n
    return len(ids)
