"""pass@k evaluation: sample completions for held-out problems, execute them, estimate pass@k.

pass@k is the unbiased estimator of Chen et al. (2021), "Evaluating Large Language Models Trained on
Code", eq. 1: with ``n`` samples of which ``c`` pass, ``pass@k = 1 - C(n - c, k) / C(n, k)``, the
probability that at least one of ``k`` samples drawn without replacement passes. A sample passes when
every test passes (execution status ``passed``).
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

from training.config import SamplingConfig


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from ``n`` samples with ``c`` correct (Chen et al. 2021, numerically stable form).

    ``1 - prod_{i = n - c + 1}^{n} (1 - k / i)``, which equals ``1 - C(n-c, k) / C(n, k)``.
    """
    if not 0 <= c <= n:
        raise ValueError(f"need 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= n, got k={k}, n={n}")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def default_ks(samples: int) -> list[int]:
    """1, 2, 4, ... up to ``samples``, plus ``samples`` itself."""
    ks, k = [], 1
    while k <= samples:
        ks.append(k)
        k *= 2
    if ks[-1] != samples:
        ks.append(samples)
    return ks


def evaluate(model: Any, tokenizer: Any, problems: Sequence[Any], sampling: SamplingConfig, *, samples: int,
             ks: Sequence[int] | None = None, runner: Any, generator_seed: int | None = 0,
             prompts_per_batch: int = 16, on_candidate: Callable[[Any, str, Any], None] | None = None,
             record: bool = False, reward: Any = None, timeout_s: float | None = None, feedback: Any = None) -> dict:
    """Sample ``samples`` completions per problem with ``sampling``, execute them, and estimate pass@k.

    Returns ``{"pass@1": float, "pass@k": {"4": float, ...}, "per_problem": {problem_id: {"n", "c",
    "pass@1"}}, "samples": samples, "problems": N, "mean_test_pass_rate": float}`` where the
    aggregate pass@k is the mean over problems (the ``eval`` event's fields). ``runner`` is a
    ``sandbox.Runner`` (anything with ``run_batch(problems, candidates)``). ``model`` is a model (sampled
    by the ``hf`` engine) or a generation engine (training/engines/). ``generator_seed`` makes
    the evaluation repeatable and leaves the training RNG untouched (None: draw from it). The model
    is put in eval mode and restored. ``on_candidate(problem, text, result)`` sees every sample.

    ``record``: each ``per_problem`` entry also lists its samples as ``candidates``, in sampling
    order, scored and serialised as a training step's candidates are (``rollout.score_samples``:
    code, reward, rewards, result, truncated, ...) with ``reward`` (the run's ``RewardConfig``; None:
    the defaults) and ``timeout_s`` (the run's ``sandbox.timeout_s``, for the efficiency reward).

    With ``sampling.turns > 1`` each sample is a repair trajectory (training/turns.py, ``feedback`` the
    run's ``FeedbackConfig``): ``pass@1``/``pass@k`` count a sample that passes by its last turn, and
    ``pass@1/turn1`` (also per problem) one that passes at its first.
    """
    from sandbox import Candidate
    from training.engines import as_engine, collect
    from training.generation import build_prompt
    from training.rollout import sandbox_reply, score_samples

    if samples < 1:
        raise ValueError(f"samples must be >= 1, got {samples}")
    ks = sorted(set(ks or default_ks(samples)))
    bad = [k for k in ks if not 1 <= k <= samples]
    if bad:
        raise ValueError(f"every k must be in 1..samples ({samples}); got {bad}")
    problems = list(problems)
    if not problems:
        return {"pass@1": 0.0, "pass@k": {}, "per_problem": {}, "samples": samples, "problems": 0,
                "mean_test_pass_rate": 0.0}
    by_id = {p.id: p for p in problems}
    counts: dict[str, list[int]] = {p.id: [0, 0] for p in problems}  # id -> [n, c]
    recorded: dict[str, list[dict]] = {p.id: [] for p in problems}
    test_rates: list[float] = []
    thinking = bool(getattr(sampling, "thinking", False))  # as training prompts and reads replies
    chat = sampling.prompt_style == "chat"
    engine = as_engine(model, tokenizer)
    model = getattr(engine, "model", None)  # the hf engine samples this process's model: eval mode
    was_training = getattr(model, "training", False)
    if model is not None:
        model.eval()
    multi_turn = getattr(sampling, "turns", 1) > 1
    first_counts: dict[str, int] = {p.id: 0 for p in problems}  # id -> samples passing at turn 1
    try:
        for start in range(0, len(problems), prompts_per_batch):
            chunk = problems[start:start + prompts_per_batch]
            seed = None if generator_seed is None else generator_seed + start
            if multi_turn:
                for rec in _trajectories(engine, tokenizer, chunk, sampling, runner, samples=samples, seed=seed,
                                         reward=reward, timeout_s=timeout_s, feedback=feedback):
                    counts[rec.problem_id][0] += 1
                    counts[rec.problem_id][1] += int(rec.passed)
                    first_counts[rec.problem_id] += int(rec.passed_first_turn)
                    total = rec.result.get("tests_total") or 0
                    test_rates.append((rec.result.get("tests_passed") or 0) / total if total else 0.0)
                    if on_candidate:
                        on_candidate(by_id[rec.problem_id], rec.text, rec.result)
                    if record:
                        recorded[rec.problem_id].append(rec.event_dict())
                continue
            prompts = [build_prompt(p, tokenizer, sampling.prompt_style, thinking) for p in chunk]
            batch = collect(engine, prompts, sampling, n=samples, seed=seed)
            key = "reply" if chat else "completion"
            answers = [sandbox_reply(text, thinking) if chat else text for text in batch.texts]
            candidates = [Candidate(chunk[i].id, **{key: answer})
                          for i, answer in zip(batch.prompt_index, answers)]
            results = runner.run_batch(by_id, candidates)
            for i, text, result in zip(batch.prompt_index, batch.texts, results):
                problem = chunk[i]
                counts[problem.id][0] += 1
                counts[problem.id][1] += int(result.status == "passed")
                test_rates.append(result.tests_passed / result.tests_total if result.tests_total else 0.0)
                if on_candidate:
                    on_candidate(problem, text, result)
            if record:
                for rec in score_samples(chunk, batch, results, group_size=samples, prompt_style=sampling.prompt_style,
                                         reward=reward, timeout_s=timeout_s, max_new_tokens=sampling.max_new_tokens,
                                         answers=answers):
                    recorded[rec.problem_id].append(rec.event_dict())
    finally:
        if was_training:
            model.train()
    per_problem = {pid: {"n": n, "c": c, "pass@1": pass_at_k(n, c, 1)} for pid, (n, c) in counts.items()}
    if multi_turn:
        for pid, entry in per_problem.items():
            entry["pass@1/turn1"] = pass_at_k(entry["n"], first_counts[pid], 1)
    if record:
        for pid, entry in per_problem.items():
            entry["candidates"] = recorded[pid]
    by_k = {k: sum(pass_at_k(n, c, k) for n, c in counts.values()) / len(counts) for k in ks}
    report = {"pass@1": by_k.get(1, sum(v["pass@1"] for v in per_problem.values()) / len(per_problem)),
              "pass@k": {str(k): v for k, v in by_k.items() if k != 1},
              "per_problem": per_problem, "samples": samples, "problems": len(problems),
              "mean_test_pass_rate": sum(test_rates) / len(test_rates)}
    if multi_turn:
        report["pass@1/turn1"] = sum(v["pass@1/turn1"] for v in per_problem.values()) / len(per_problem)
    return report


def _trajectories(engine: Any, tokenizer: Any, problems: Sequence[Any], sampling: SamplingConfig, runner: Any, *,
                  samples: int, seed: int | None, reward: Any, timeout_s: float | None, feedback: Any) -> list:
    """The held-out samples of ``problems`` as repair trajectories, scored (``CandidateRecord`` each)."""
    from concurrent.futures import Future

    from training.config import RewardConfig
    from training.turns import start_trajectories

    class Submitter:  # the evaluation's runner may only offer run_batch: run each batch at once
        def submit_batch(self, problem_map: Any, candidates: list) -> Future:
            if hasattr(runner, "submit_batch"):
                return runner.submit_batch(problem_map, candidates)
            fut: Future = Future()
            fut.set_result(runner.run_batch(problem_map, candidates))
            return fut

    reward = reward if reward is not None else RewardConfig()
    pending = start_trajectories(engine, tokenizer, problems, sampling, Submitter(), k=samples, generator_seed=seed,
                                 feedback=feedback,
                                 score_args={"weights": reward.weights.as_dict(), "normalize": reward.weighted_mean,
                                             "timeout_s": timeout_s, "overlong": reward.overlong,
                                             "penalize_flags": reward.penalize_flags})
    return pending.finish().candidates
