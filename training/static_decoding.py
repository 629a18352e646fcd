"""A static-shape decode step for the ``hf`` engine: fixed cache, batch buckets, CUDA graphs.

The eager loop (``generation._decode_loop``) pays, per generated token, for hundreds of small kernel
launches and a host sync (EOS, stop strings, finished rows leaving the batch). On a GPU that overhead,
not the arithmetic, is the decoding time. Here every tensor a token step touches lives at a fixed
address for the whole call:

* a ``StaticCache`` of ``(bucket, max_len)`` (full-attention keys/values preallocated; Gated DeltaNet
  conv and recurrent states fixed-size), filled from the eager prefill's cache, each prompt's rows
  repeated for its candidates;
* the step's inputs (last token, position, key mask, write index) and outputs (token and log-prob
  per step, done flags) as buffers the step updates in place.

So one step (model forward + the sampling processors + the drawn token's log-prob + EOS bookkeeping)
is a pure function of those buffers, and on CUDA it is captured once as a CUDA graph per batch bucket
and replayed for every token. The host looks at the batch only every ``CHECK_EVERY`` tokens (all rows
done? a stop string in a row's tail?). Rows that finish stay in the batch (their tokens are padding):
what counts is tokens/s, and a fixed batch is what a graph replays.

The contract is the eager loop's: the same processors in the same order, the sampler's log-prob of
each drawn token under ``softmax(logits / temperature)``, padding after EOS, the stop cut applied
afterwards by ``generation.cut_completion``. On CPU (no graph, the bucket is the batch) it draws the
same random numbers as the eager loop, ``argmax(p / q)`` with ``q ~ Exp(1)`` over the whole batch, so
for a fixed seed it samples the same tokens (tested). Two differences, both outside the completion:
a row ended by a stop string keeps sampling until the next check (``generated_tokens`` counts up to
``CHECK_EVERY - 1`` tokens more), and the random stream advances past where the eager loop stopped.

``sampling.compile``: ``auto`` uses this path where the step runs on CUDA. On CPU the eager loop is faster
(it drops finished rows and shares prompt keys/values; without a graph the static step only adds work):
measured on a quiet 2-core machine, the static step samples at 0.63x (tiny Qwen3.5) and 0.91x (tiny Qwen3)
the eager loop's tokens/s (``python -m benchmarks.rollout_bench --hf-only``, RESULTS.md
``rollout-bench-static``), so only ``on`` uses it there.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

CHECK_EVERY = 16
"""Tokens between two host checks (all done? stop strings?): one sync per this many tokens."""
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256, 384, 512)
"""Batch sizes a graph is captured for (CUDA); a batch is padded to the next one. Past the last: its size."""
LENGTH_STEP = 256
"""Cache lengths are rounded up to a multiple of this (CUDA), so calls with similar prompts share a graph."""
KEEP_DECODERS = 2
"""Decoders (cache + graph) kept per model between calls: one for training steps, one for evaluation."""


def wanted(mode: str, device: torch.device) -> bool:
    """Whether ``sampling.compile`` asks for the static step on ``device``."""
    if mode == "on":
        return True
    if mode == "off":
        return False
    return device.type == "cuda"


def supported(model: Any) -> str | None:
    """None when the static step can run ``model``, else why not (the eager loop is used then)."""
    config = getattr(model, "config", None)
    if config is None:
        return "the model has no config"
    text = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    impl = getattr(text, "_attn_implementation", None) or getattr(config, "_attn_implementation", None)
    if impl not in ("sdpa", "eager"):
        return f"attention implementation {impl!r} (the static step builds sdpa/eager masks)"
    kinds = set(getattr(text, "layer_types", None) or ["full_attention"])
    if not kinds <= {"full_attention", "linear_attention"}:
        return f"layer types {sorted(kinds)} (sliding or chunked attention has no static form here)"
    return None


def bucket_for(rows: int, graphs: bool) -> int:
    if not graphs:
        return rows
    return next((b for b in BATCH_BUCKETS if b >= rows), rows)


class StaticDecoder:
    """The buffers and (on CUDA) the captured graph of one ``(bucket, max_len, sampling)`` shape."""

    def __init__(self, model: Any, bucket: int, max_len: int, max_new: int, vocab: int, *, cache_kwarg: str,
                 temperature: float, top_k: int, top_p: float, eos_ids: list[int], pad_id: int, draw_rows: int,
                 graphs: bool):
        from transformers import StaticCache

        self.model, self.cache_kwarg = model, cache_kwarg
        self.bucket, self.max_len, self.vocab = bucket, max_len, vocab
        self.temperature, self.top_k, self.top_p = temperature, top_k, top_p
        self.pad_id, self.draw_rows = pad_id, draw_rows
        self.graphs = graphs
        self.graph: Any = None
        device = next(model.parameters()).device
        self.device = device
        self.cache = StaticCache(config=model.config, max_cache_len=max_len)
        text = model.config.get_text_config(decoder=True) if hasattr(model.config, "get_text_config") else model.config
        self.layer_types = list(getattr(text, "layer_types", None) or ["full_attention"] * len(self.cache.layers))
        self.eager_masks = getattr(text, "_attn_implementation", "sdpa") == "eager"
        self.dtype = next(model.parameters()).dtype
        self.eos = torch.tensor(eos_ids or [-1], dtype=torch.long, device=device)  # (E,)
        self.token = torch.full((bucket,), pad_id, dtype=torch.long, device=device)  # (Bk,) last token
        self.position = torch.zeros((bucket, 1), dtype=torch.long, device=device)  # (Bk, 1)
        self.key_mask = torch.zeros((bucket, max_len), dtype=torch.bool, device=device)  # (Bk, L)
        # eager attention adds its mask (0 where allowed, the dtype's minimum elsewhere): kept beside key_mask
        # and updated with it, so no step builds one
        self.additive = (torch.zeros((bucket, max_len), dtype=self.dtype, device=device)
                         if self.eager_masks else None)  # (Bk, L)
        self.write_at = torch.zeros((1,), dtype=torch.long, device=device)  # cache index of this step's token
        self.step_index = torch.zeros((1,), dtype=torch.long, device=device)  # t
        self.done = torch.zeros((bucket,), dtype=torch.bool, device=device)  # (Bk,)
        self.logits = torch.zeros((bucket, vocab), dtype=torch.float32, device=device)  # (Bk, V)
        self.tokens = torch.full((bucket, max_new), pad_id, dtype=torch.long, device=device)  # (Bk, T)
        self.logprobs = torch.zeros((bucket, max_new), dtype=torch.float32, device=device)  # (Bk, T)
        self._prime()

    def _prime(self) -> None:
        """Run one dummy token through the model so every cache layer allocates its static tensors."""
        with torch.no_grad():
            self.model(input_ids=self.token[:, None], position_ids=self.position, use_cache=True,
                       attention_mask=self._masks(), **{self.cache_kwarg: self.cache})

    def _masks(self) -> dict:
        if self.additive is not None:
            full = self.additive[:, None, None, :]  # (Bk, 1, 1, L)
        else:
            full = self.key_mask[:, None, None, :]  # (Bk, 1, 1, L) True = attend
        return {"full_attention": full, "linear_attention": None}

    def load(self, prefill_cache: Any, attention_mask: torch.Tensor, n: int, logits: torch.Tensor) -> None:
        """Start a call: the prompts' cache rows (N of them, left-padded to P) repeated ``n`` times into the
        static cache, the key mask of the prompts, and the prefill's last logits (N * n, V)."""
        rows, p = attention_mask.shape[0] * n, attention_mask.shape[1]
        repeat = torch.arange(attention_mask.shape[0], device=self.device).repeat_interleave(n)  # (B,)
        for layer, static in zip(prefill_cache.layers, self.cache.layers):
            if hasattr(static, "recurrent_states"):  # linear attention: fixed-size conv + recurrent state
                for idx in range(static.number_of_states):
                    for name in ("conv_states", "recurrent_states"):
                        src, dst = getattr(layer, name)[idx], getattr(static, name)[idx]
                        if src is None or dst is None:
                            continue
                        dst.zero_()
                        dst[:rows].copy_(src[repeat])
                    static.has_previous_state[idx] = True
            if hasattr(static, "keys") and getattr(static, "is_initialized", False):
                static.keys.zero_()
                static.values.zero_()
                static.keys[:rows, :, :p].copy_(layer.keys[repeat])
                static.values[:rows, :, :p].copy_(layer.values[repeat])
                static.cumulative_length.fill_(p)
        self.key_mask.zero_()
        self.key_mask[:rows, :p] = attention_mask[repeat].bool()
        self.key_mask[rows:, 0] = True  # padding rows attend to one (zero) key: finite, never read
        if self.additive is not None:
            self.additive.zero_()
            self.additive.masked_fill_(~self.key_mask, torch.finfo(self.dtype).min)
        positions = (attention_mask.cumsum(-1) - 1).clamp(min=0)[:, -1:]  # (N, 1)
        self.position.zero_()
        self.position[:rows] = positions[repeat]
        self.write_at.fill_(p)
        self.step_index.zero_()
        self.done.zero_()
        self.done[rows:] = True
        self.logits.zero_()
        self.logits[:rows] = logits.float()
        self.tokens.fill_(self.pad_id)
        self.logprobs.zero_()

    def _sample(self) -> None:
        """Draw this step's token from ``self.logits`` -> tokens[:, t], logprobs[:, t], done, token.

        The eager loop's processors and formulas, op for op (so CPU draws and log-probs are bit-equal)."""
        scores = self.logits  # (Bk, V) float32
        t = self.step_index
        temperature, top_k, top_p = self.temperature, self.top_k, self.top_p
        cut = 0 < top_k or top_p < 1.0
        if temperature == 0:
            drawn = scores.argmax(-1)  # (Bk,)
            tempered = scores
        else:
            if temperature != 1.0:
                scores = scores / temperature
            tempered = scores
            if 0 < top_k < scores.shape[-1]:
                kth = torch.topk(scores, top_k, dim=-1).values[:, -1:]  # (Bk, 1)
                scores = scores.masked_fill(scores < kth, float("-inf"))
            if top_p < 1.0:
                sorted_scores, sorted_idx = torch.sort(scores, descending=False)  # (Bk, V)
                cum = sorted_scores.softmax(-1).cumsum(-1)  # (Bk, V)
                drop = cum <= (1 - top_p)
                drop[:, -1] = False
                scores = scores.masked_fill(drop.scatter(1, sorted_idx, drop), float("-inf"))
            probs = scores.softmax(-1)  # (Bk, V)
            # torch.multinomial's algorithm on exactly the eager loop's random numbers: Exp(1) per entry of
            # the real rows (the bucket's padding rows draw nothing on CPU; in a graph every row draws).
            q = torch.empty((self.draw_rows, probs.shape[1]), dtype=probs.dtype, device=probs.device).exponential_(1)
            if self.draw_rows < self.bucket:
                q = torch.cat([q, q.new_ones(self.bucket - self.draw_rows, probs.shape[1])])
            drawn = (probs / q).argmax(-1)  # (Bk,)
        if temperature == 0 or cut:
            drawn_lp = tempered.gather(-1, drawn[:, None]).squeeze(-1) - torch.logsumexp(tempered, -1)  # (Bk,)
        else:
            drawn_lp = probs.gather(-1, drawn[:, None]).squeeze(-1).log()  # (Bk,)
        nxt = torch.where(self.done, torch.full_like(drawn, self.pad_id), drawn)  # (Bk,)
        self.tokens.index_copy_(1, t, nxt[:, None])
        self.logprobs.index_copy_(1, t, drawn_lp[:, None])
        self.done |= torch.isin(nxt, self.eos)
        self.token.copy_(nxt)

    def _forward(self) -> None:
        """The next token's forward: its key becomes visible, it is written at ``write_at``."""
        self.key_mask.index_fill_(1, self.write_at, True)
        if self.additive is not None:
            self.additive.index_fill_(1, self.write_at, 0.0)
        self.position.add_(1)
        out = self.model(input_ids=self.token[:, None], position_ids=self.position, use_cache=True,
                         attention_mask=self._masks(), **{self.cache_kwarg: self.cache})
        self.logits.copy_(out.logits[:, -1, :])
        self.write_at.add_(1)
        self.step_index.add_(1)

    def step(self) -> None:
        """One token: sample from the current logits, then run the model on what was drawn."""
        self._sample()
        self._forward()

    def capture(self) -> None:
        """Record ``step`` as a CUDA graph (after warm-up runs on a side stream, as graph capture needs).

        The warm-up steps change the buffers; ``load`` is called again before the real decoding."""
        # Every run of the step advances the write positions: each one starts from the same place, so that a
        # call with few new tokens never writes past its buffers.
        counters = [self.step_index, self.write_at] + [
            layer.cumulative_length for layer in self.cache.layers if hasattr(layer, "cumulative_length")]
        start = [c.clone() for c in counters]

        def rewind() -> None:
            for c, s in zip(counters, start):
                c.copy_(s)

        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):
                rewind()
                self.step()
        torch.cuda.current_stream().wait_stream(stream)
        rewind()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self.step()
        self.graph = graph

    def run(self, steps: int, stop: Any) -> int:
        """Decode ``steps`` tokens (fewer once every row is done) -> tokens decoded."""
        t = 0
        while t < steps:
            chunk = min(CHECK_EVERY, steps - t)
            for _ in range(chunk):
                if self.graph is not None:
                    self.graph.replay()
                else:
                    self.step()
            t += chunk
            if stop is not None:
                stop.mark(self, t)
            if bool(self.done.all()):
                break
        return t


class StopCheck:
    """Stop strings looked for every ``CHECK_EVERY`` tokens in the tails of the rows still decoding."""

    def __init__(self, tokenizer: Any, stops: tuple[str, ...], rows: int):
        self.tokenizer, self.stops, self.rows = tokenizer, stops, rows
        self.window = max(len(s) for s in stops) + 1

    def mark(self, decoder: StaticDecoder, t: int) -> None:
        todo = (~decoder.done[:self.rows]).nonzero().flatten().tolist()
        if not todo:
            return
        start = max(0, t - CHECK_EVERY - self.window)
        tails = self.tokenizer.batch_decode(decoder.tokens[todo, start:t].tolist(), skip_special_tokens=False,
                                            clean_up_tokenization_spaces=False)
        hit = [i for i, tail in zip(todo, tails) if any(s in tail for s in self.stops)]
        if hit:
            decoder.done[hit] = True


def decode(model: Any, prefill_cache: Any, attention_mask: torch.Tensor, n: int, logits: torch.Tensor, sampling: Any,
           eos_ids: list[int], pad_id: int, tokenizer: Any, stops: tuple[str, ...], cache_kwarg: str
           ) -> tuple[torch.Tensor, torch.Tensor]:
    """Decode after the eager prefill -> generated ids (N * n, T) and their sampler log-probs (N * n, T).

    ``prefill_cache``: the DynamicCache of the N prompts (left-padded to P, ``attention_mask`` (N, P));
    ``logits``: the prefill's last logits repeated per candidate (N * n, V)."""
    rows, p = logits.shape[0], attention_mask.shape[1]
    max_new = int(sampling.max_new_tokens)
    graphs = logits.device.type == "cuda"
    bucket = bucket_for(rows, graphs)
    max_len = p + max_new
    if graphs:
        max_len = -(-max_len // LENGTH_STEP) * LENGTH_STEP
    key = (bucket, max_len, max_new, float(sampling.temperature), int(sampling.top_k), float(sampling.top_p),
           tuple(eos_ids), pad_id, logits.shape[1], rows if not graphs else bucket)
    decoder = _decoder(model, key, graphs, lambda: StaticDecoder(
        model, bucket, max_len, max_new, logits.shape[1], cache_kwarg=cache_kwarg,
        temperature=float(sampling.temperature), top_k=int(sampling.top_k), top_p=float(sampling.top_p),
        eos_ids=eos_ids, pad_id=pad_id, draw_rows=bucket if graphs else rows, graphs=graphs))
    if graphs and decoder.graph is None and decoder.graphs:
        decoder.load(prefill_cache, attention_mask, n, logits)
        try:
            decoder.capture()
        except Exception as exc:  # a forward that syncs with the host cannot be captured: decode without a graph
            decoder.graphs = False
            warnings.warn(f"sampling: the decode step could not be captured as a CUDA graph ({exc}); "
                          "decoding with the static step without a graph", RuntimeWarning, stacklevel=2)
    decoder.load(prefill_cache, attention_mask, n, logits)
    stop = StopCheck(tokenizer, stops, rows) if stops else None
    steps = decoder.run(max_new, stop)
    return decoder.tokens[:rows, :steps], decoder.logprobs[:rows, :steps]


def _decoder(model: Any, key: tuple, graphs: bool, build: Any) -> StaticDecoder:
    """The model's decoder for ``key``, built on first use; the least recently used beyond KEEP_DECODERS goes."""
    kept: dict = model.__dict__.setdefault("_crucible_static_decoders", {})
    decoder = kept.pop(key, None)
    if decoder is None:
        while len(kept) >= KEEP_DECODERS:
            kept.pop(next(iter(kept)))
        if graphs:
            torch.cuda.empty_cache()
        decoder = build()
    kept[key] = decoder
    return decoder


def describe(model: Any, sampling: Any, device: torch.device) -> dict:
    """``start.runtime.sampling``: whether the static step is used, with graphs, on which batch buckets."""
    why_not = supported(model) if wanted(sampling.compile, device) else "sampling.compile is off here"
    compiled = why_not is None and sampling.engine == "hf"
    graphs = compiled and device.type == "cuda"
    out = {"compiled": compiled, "graphs": graphs, "batch_buckets": list(BATCH_BUCKETS) if graphs else []}
    if not compiled and sampling.engine == "hf":
        out["eager_because"] = why_not
    return out
