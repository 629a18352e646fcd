"""A ~1M-parameter Qwen code model built offline in seconds: the CPU demo and test model.

``build_tiny_model(out_dir, warmup_problems=..., arch="qwen3"|"qwen3_5")``:

1. trains a byte-level BPE tokenizer with the Qwen pre-tokenizer on code text (built-in Python
   snippets + the warm-up problems' prompts and solutions) and saves it as a ``Qwen2Tokenizer`` with
   the Qwen special tokens and Qwen's ChatML chat template (``enable_thinking``: ``<think>`` /
   ``</think>``, as Qwen3 and Qwen3.5 use them);
2. builds a randomly initialised model, hidden 128, 4 layers, tied embeddings: ``qwen3`` a dense
   ``Qwen3ForCausalLM``; ``qwen3_5`` a ``Qwen3_5ForCausalLM``, the text stack of Qwen3.5-9B at tiny
   size (three Gated DeltaNet linear-attention layers to one gated full-attention layer, partial
   rotary embedding, the same classes and cache types);
3. optionally warm-starts it with a short supervised pass on the *train* split: prompt -> body + EOS,
   where the body is the reference solution's body (once) or, deliberately, one of three plausible
   wrong variants of it (flipped comparison, wrong operator, swapped arguments, dropped filter,
   off-by-one) that fail the tests. The right body is then the most likely single answer but not the
   majority one: sampling at temperature 1 passes some of the time (about 40% on train, a little less
   on held-out compositions of the demo set), so RL has a signal from its first step and room to
   sharpen; a randomly initialised model gets all-zero rewards and learns nothing.

Nothing is downloaded.
"""

from __future__ import annotations

import json
import math
import random
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:
    from sandbox import BatchRunner

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>")
# Qwen3's conventions: the assistant turn opens plainly and a thinking model writes <think>...</think>
# first; ``enable_thinking=False`` pre-fills an empty thinking block so the model answers directly.
CHATML_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}"
    "{%- endif %}{%- endif %}"
)
ARCHITECTURES = ("qwen3", "qwen3_5")
# Same pattern as Qwen2's tokenizer (transformers.models.qwen2.tokenization_qwen2.PRETOKENIZE_REGEX).
QWEN_PRETOKENIZE_REGEX = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"""
                          r""" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")

MODEL_SHAPE = dict(hidden_size=128, intermediate_size=384, num_hidden_layers=4, num_attention_heads=4,
                   num_key_value_heads=2, head_dim=32, max_position_embeddings=1024)
# Qwen3.5's linear-attention heads and rotary layout at tiny size: Qwen3.5-9B has 16 key / 32 value
# heads of 128, a conv kernel of 4, rotary on a quarter of each head (mrope sections summing to half
# the rotary width), three linear-attention layers to each full-attention one.
QWEN3_5_SHAPE = dict(linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=32,
                     linear_value_head_dim=32, linear_conv_kernel_dim=4,
                     layer_types=["linear_attention", "linear_attention", "linear_attention", "full_attention"])
QWEN3_5_WIDE_HEADS = dict(linear_num_key_heads=1, linear_num_value_heads=2, linear_key_head_dim=128,
                          linear_value_head_dim=128)
"""``linear_head_dim=128``: the 9B's own linear-attention head width (vLLM's CPU gated-delta-rule kernel
takes no other), at one key and two value heads."""
QWEN3_5_ROPE = {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25,
                "mrope_section": [2, 1, 1], "mrope_interleaved": True}

# The warm start (chosen with benchmarks/learning_demo.py on the demo set): 400 AdamW steps of 32
# examples (about a minute on one core), one right body per train problem for three failing variants.
WARMUP_STEPS = 400
CORRECT_COPIES = 1
WRONG_PER_PROBLEM = 3

# Generic Python so the tokenizer (and a no-warm-up model's vocabulary) covers everyday code.
PYTHON_SNIPPETS = '''
def add(a, b):
    """Return the sum of a and b."""
    return a + b


def is_even(n):
    return n % 2 == 0


def fizzbuzz(n):
    out = []
    for i in range(1, n + 1):
        if i % 15 == 0:
            out.append("FizzBuzz")
        elif i % 3 == 0:
            out.append("Fizz")
        elif i % 5 == 0:
            out.append("Buzz")
        else:
            out.append(str(i))
    return out


class Stack:
    def __init__(self):
        self.items = []

    def push(self, item):
        self.items.append(item)

    def pop(self):
        return self.items.pop()


def count_words(text):
    counts = {}
    for word in text.lower().split():
        counts[word] = counts.get(word, 0) + 1
    return counts


def main():
    n = int(input())
    values = list(map(int, input().split()))
    print(sum(values) / max(len(values), 1))


if __name__ == "__main__":
    main()
# a comment: sorted(nums, reverse=True), min(nums), max(nums), len(s), s.strip().split(",")
while True:
    break
try:
    x = int("3")
except ValueError as e:
    raise RuntimeError(str(e)) from None
result = [x * x for x in range(10) if x > 2 and x != 5 or not x]
return None, True, False, 0.5, 1e-3, [], {}, (), "", '\\n', "\\t"
'''

# Plausible mistakes: (pattern, replacement). Each is applied at one match to make one wrong variant.
CORRUPTIONS = [
    (r"== 0", "== 1"), (r"== 1", "== 0"), (r" > ", " < "), (r" < ", " > "), (r" > ", " >= "),
    (r" < ", " <= "), (r" \+ ", " - "), (r" - ", " + "), (r" \* ", " + "), (r"\bsum\(", "max("),
    (r"\bmax\(", "min("), (r"\bmin\(", "max("), (r"\bupper\(", "lower("), (r"\blower\(", "upper("),
    (r"\bisupper\(", "islower("), (r"\bislower\(", "isupper("), (r"\bisdigit\(", "isalpha("),
    (r"\[::-1\]", ""), (r"\.strip\(\)", ".lstrip()"), (r" if not ", " if "), (r"(?<=[ (\[])-x\b", "x"),
    (r"\b2 \* ", "3 * "), (r"\*\* 2", "** 3"), (r"\bx \* x\b", "x + x"), (r"\blen\(", "sum("),
    (r" if [^)\]\n]+(?=[)\]])", ""), (r"\bdefault=0\b", "default=1"), (r"\bswapcase\(", "upper("),
    (r"\b(\d+)\b", lambda m: str(int(m.group(1)) + 1)),
]


def corruptions(body: str) -> list[str]:
    """Every distinct single-edit variant of ``body`` from CORRUPTIONS (plus swapped arguments)."""
    out: list[str] = []
    for pattern, repl in CORRUPTIONS:
        for m in re.finditer(pattern, body):
            r = repl(m) if callable(repl) else m.expand(repl)
            variant = body[:m.start()] + r + body[m.end():]
            if variant != body and variant not in out:
                out.append(variant)
    swapped = re.sub(r"\b([ab])\b", lambda m: "b" if m.group(1) == "a" else "a", body)
    if swapped != body and "a" in body and "b" in body and swapped not in out:
        out.append(swapped)
    return out


def train_tokenizer(texts: Sequence[str], vocab_size: int = 1024) -> Any:
    """Byte-level BPE with the Qwen pre-tokenizer, wrapped as a ``Qwen2Tokenizer``."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import Qwen2Tokenizer

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_PRETOKENIZE_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    model = json.loads(tok.to_str())["model"]
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ", 1)) for m in model["merges"]]
    qwen = Qwen2Tokenizer(vocab=model["vocab"], merges=merges, eos_token="<|endoftext|>",
                          pad_token="<|endoftext|>", unk_token=None,
                          additional_special_tokens=list(SPECIAL_TOKENS[1:]))
    qwen.chat_template = CHATML_TEMPLATE
    return qwen


def qwen3_5_shape(linear_head_dim: int = 32) -> dict:
    if linear_head_dim == 32:
        return dict(QWEN3_5_SHAPE)
    if linear_head_dim == 128:
        return {**QWEN3_5_SHAPE, **QWEN3_5_WIDE_HEADS}
    raise ValueError(f"linear_head_dim must be 32 (the default) or 128 (Qwen3.5-9B's); got {linear_head_dim}")


def build_model(tokenizer: Any, seed: int = 0, arch: str = "qwen3", linear_head_dim: int = 32) -> Any:
    import torch
    from transformers import GenerationConfig

    eos = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    common = dict(vocab_size=len(tokenizer), tie_word_embeddings=True, bos_token_id=None, eos_token_id=eos,
                  pad_token_id=eos, use_cache=True, **MODEL_SHAPE)
    if arch == "qwen3":
        from transformers import Qwen3Config, Qwen3ForCausalLM

        config, model_class = Qwen3Config(rope_theta=10000.0, **common), Qwen3ForCausalLM
    elif arch == "qwen3_5":
        from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

        config = Qwen3_5TextConfig(rope_parameters=dict(QWEN3_5_ROPE), **common, **qwen3_5_shape(linear_head_dim))
        model_class = Qwen3_5ForCausalLM
    else:
        raise ValueError(f"unknown tiny-model architecture {arch!r}; valid: {', '.join(ARCHITECTURES)}")
    torch.manual_seed(seed)
    model = model_class(config)
    model.generation_config = GenerationConfig(eos_token_id=[eos, im_end], pad_token_id=eos, do_sample=True,
                                               temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=128)
    return model


def completion_of(problem: Any) -> str | None:
    """The reference body after the prompt (HumanEval style), or None when the reference does not
    start with the prompt."""
    ref = problem.reference_solution or ""
    if problem.prompt and ref.startswith(problem.prompt) and len(ref) > len(problem.prompt):
        return ref[len(problem.prompt):]
    return None


def warmup_examples(problems: Sequence[Any], runner: BatchRunner, *, seed: int = 0,
                    correct_copies: int = CORRECT_COPIES,
                    wrong_per_problem: int = WRONG_PER_PROBLEM) -> tuple[list[tuple[str, str]], dict]:
    """(prompt, completion) pairs: each included train problem's body ``correct_copies`` times plus up to
    ``wrong_per_problem`` distinct variants that the runner confirms fail the tests."""
    from sandbox import Candidate

    rng = random.Random(seed)
    usable = [(p, body) for p in problems if p.split == "train" and p.kind == "function" and not p.excluded
              for body in [completion_of(p)] if body is not None]
    variants = [(p, v) for p, body in usable for v in corruptions(body)]
    results = runner.run_batch({p.id: p for p, _ in usable},
                               [Candidate(p.id, completion=v) for p, v in variants]) if variants else []
    failing: dict[str, list[str]] = {}
    for (p, v), r in zip(variants, results):
        if r.status != "passed":
            failing.setdefault(p.id, []).append(v)
    examples: list[tuple[str, str]] = []
    for p, body in usable:
        examples += [(p.prompt, body)] * correct_copies
        wrong = failing.get(p.id, [])
        examples += [(p.prompt, v) for v in rng.sample(wrong, min(wrong_per_problem, len(wrong)))]
    rng.shuffle(examples)
    stats = {"problems": len(usable), "examples": len(examples), "variants_tried": len(variants),
             "variants_failing": sum(len(v) for v in failing.values())}
    return examples, stats


def supervised_warmup(model: Any, tokenizer: Any, examples: Sequence[tuple[str, str]], *, steps: int = 200,
                      batch_size: int = 32, learning_rate: float = 3e-3, seed: int = 0) -> list[float]:
    """Next-token loss on completion + EOS only (prompt tokens are context). Returns the loss curve.

    Prompt and completion are tokenized separately, exactly as sampling sees them (the prompt alone,
    then generated tokens), so the warm start teaches the token boundaries generation will meet.
    """
    import torch

    eos = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    encoded = []
    for prompt, completion in examples:
        p = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        c = tokenizer(completion, add_special_tokens=False)["input_ids"] + [eos]
        encoded.append((p, c))
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=0.01, betas=(0.9, 0.95))
    warm = max(1, steps // 10)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warm) * 0.5 * (
        1 + math.cos(math.pi * min(1.0, s / steps))))
    model.train()
    losses = []
    for _ in range(steps):
        idx = torch.randint(len(encoded), (min(batch_size, len(encoded)),), generator=gen).tolist()
        rows = [encoded[i] for i in idx]
        t = max(len(p) + len(c) for p, c in rows)
        input_ids = torch.full((len(rows), t), eos, dtype=torch.long)  # (B, T) right-padded
        labels = torch.full((len(rows), t), -100, dtype=torch.long)  # (B, T) -100 = no loss
        attention_mask = torch.zeros((len(rows), t), dtype=torch.long)  # (B, T)
        for i, (p, c) in enumerate(rows):
            ids = p + c
            input_ids[i, :len(ids)] = torch.tensor(ids)
            labels[i, len(p):len(ids)] = torch.tensor(c)
            attention_mask[i, :len(ids)] = 1
        loss = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(float(loss.detach()))
    model.eval()
    return losses


def build_tiny_model(out_dir: str | Path, *, warmup_problems: str | Path | None = None, seed: int = 0,
                     arch: str = "qwen3", linear_head_dim: int = 32,
                     warmup_steps: int = WARMUP_STEPS, runner: BatchRunner | None = None, log: Any = None,
                     correct_copies: int = CORRECT_COPIES, wrong_per_problem: int = WRONG_PER_PROBLEM,
                     warmup_lr: float = 3e-3, batch_size: int = 32) -> Path:
    """Build the tiny ``arch`` model (+ tokenizer) into ``out_dir``; with ``warmup_problems``, warm-start it
    ``linear_head_dim`` (qwen3_5): 32, or 128 as in Qwen3.5-9B (what vLLM's CPU kernel needs).
    (``warmup_steps`` AdamW steps of ``batch_size`` at ``warmup_lr`` on ``correct_copies`` right
    bodies and up to ``wrong_per_problem`` failing variants per train problem).

    ``runner`` executes the wrong variants to keep only those that really fail (default:
    a ``sandbox.Runner`` with 2 workers). Writes ``crucible_tiny.json`` with the build facts next to the weights.
    """
    import torch

    from sandbox import Runner
    from training.runtime import cpu_float_mode

    cpu_float_mode()  # the warm start trains Qwen3.5's delta rule too (see cpu_float_mode)
    started = time.time()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    problems: list[Any] = []
    if warmup_problems is not None:
        problems = load_problem_file(warmup_problems)
    texts = [PYTHON_SNIPPETS]
    for p in problems:
        texts += [p.prompt, p.reference_solution or ""]
    tokenizer = train_tokenizer(texts)
    model = build_model(tokenizer, seed=seed, arch=arch, linear_head_dim=linear_head_dim)
    shape = MODEL_SHAPE if arch == "qwen3" else {**MODEL_SHAPE, **qwen3_5_shape(linear_head_dim)}
    info: dict[str, Any] = {"architecture": type(model).__name__, "arch": arch,
                            "parameters": sum(p.numel() for p in model.parameters()),
                            "vocab_size": len(tokenizer), "seed": seed, "shape": shape}
    if problems:
        own_runner = runner is None
        runner = runner or Runner(workers=2)
        try:
            examples, stats = warmup_examples(problems, runner, seed=seed, correct_copies=correct_copies,
                                              wrong_per_problem=wrong_per_problem)
        finally:
            if own_runner:
                runner.close()
        if not examples:
            raise ValueError(f"{warmup_problems}: no train-split function problem has a reference solution that "
                             "starts with its prompt, so there is nothing to warm up on")
        with torch.random.fork_rng():
            losses = supervised_warmup(model, tokenizer, examples, steps=warmup_steps, seed=seed,
                                        learning_rate=warmup_lr, batch_size=batch_size)
        info["warmup"] = {**stats, "steps": warmup_steps, "correct_copies": correct_copies,
                          "wrong_per_problem": wrong_per_problem, "learning_rate": warmup_lr,
                          "batch_size": batch_size, "loss_first": losses[0], "loss_last": losses[-1],
                          "problems_file": str(warmup_problems)}
    info["build_seconds"] = round(time.time() - started, 1)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    (out / "crucible_tiny.json").write_text(json.dumps(info, indent=2) + "\n")
    if log:
        log(f"tiny model: {info['parameters']:,} parameters, vocab {info['vocab_size']}, "
            f"{info['build_seconds']} s -> {out}")
    return out


def load_problem_file(path: str | Path) -> list[Any]:
    """Load problems with the sandbox's importers; any bad line is an error naming line and field."""
    from sandbox.formats import load_problems

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"problem file not found: {path}")
    result = load_problems(path)
    if result.errors:
        e = result.errors[0]
        more = f" (and {len(result.errors) - 1} more)" if len(result.errors) > 1 else ""
        field = f", field {e.field}" if e.field else ""
        raise ValueError(f"{path}: line {e.line}{field}: {e.message}{more}")
    return list(result.problems)
