"""pass@k evaluation: sample completions for held-out problems, execute them, estimate pass@k.

pass@k is the unbiased estimator of Chen et al. (2021), "Evaluating Large Language Models Trained on
Code", eq. 1: with ``n`` samples of which ``c`` pass, ``pass@k = 1 - C(n - c, k) / C(n, k)``, the
probability that at least one of ``k`` samples drawn without replacement passes. A sample passes when
every test passes (execution status ``passed``).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Callable, Sequence

from training.config import RewardConfig, SamplingConfig

if TYPE_CHECKING:
    from sandbox import BatchRunner


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
             ks: Sequence[int] | None = None, runner: BatchRunner, generator_seed: int | None = 0,
             prompts_per_batch: int = 16, on_candidate: Callable[[Any, str, dict], None] | None = None,
             record: bool = False, reward: Any = None, timeout_s: float | None = None, feedback: Any = None,
             on_problem: Callable[[str, dict], None] | None = None) -> dict:
    """Sample ``samples`` completions per problem with ``sampling``, execute them, and estimate pass@k.

    Returns ``{"pass@1": float, "pass@k": {"4": float, ...}, "per_problem": {problem_id: {"n", "c",
    "pass@1"}}, "samples": samples, "problems": N, "mean_test_pass_rate": float}`` where the
    aggregate pass@k is the mean over problems (the ``eval`` event's fields). ``runner`` executes the
    samples (``sandbox.BatchRunner``). ``model`` is a model (sampled by the ``hf`` engine) or a generation
    engine (training/engines/). ``generator_seed`` makes the evaluation repeatable and leaves the training
    RNG untouched (None: draw from it). The model is put in eval mode and restored.
    ``on_candidate(problem, text, result)`` sees every sample (``result``: its execution result's dict).

    The samples of ``prompts_per_batch`` problems at a time are a training step's rollout
    (``rollout.start_rollout`` with ``samples`` candidates per problem): prompted, sent to the sandbox as
    they are generated, and scored as a step's candidates are, with ``reward`` (the run's
    ``RewardConfig``; None: the defaults) and ``timeout_s`` (the run's ``sandbox.timeout_s``, for the
    efficiency reward). ``record``: each ``per_problem`` entry also lists its samples as ``candidates``,
    in sampling order, serialised as a step's candidates are (``CandidateRecord.event_dict``).

    With ``sampling.turns > 1`` each sample is a repair trajectory (training/turns.py, ``feedback`` the
    run's ``FeedbackConfig``): ``pass@1``/``pass@k`` count a sample that passes by its last turn, and
    ``pass@1/turn1`` (also per problem) one that passes at its first.

    ``on_problem(problem_id, entry)`` sees each problem as soon as all its samples are scored (in the
    problems' order, a batch of ``prompts_per_batch`` at a time): ``entry`` is its ``per_problem`` entry
    plus ``pass@k`` (``{"k": float}`` for each k other than 1) and, with ``record``, ``candidates``.
    """
    from training.engines import as_engine
    from training.rollout import start_rollout

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
    reward = reward if reward is not None else RewardConfig()
    by_id = {p.id: p for p in problems}
    counts: dict[str, list[int]] = {p.id: [0, 0] for p in problems}  # id -> [n, c]
    first_counts: dict[str, int] = {p.id: 0 for p in problems}  # id -> samples passing at turn 1
    recorded: dict[str, list[dict]] = {p.id: [] for p in problems}
    test_rates: list[float] = []
    multi_turn = getattr(sampling, "turns", 1) > 1
    engine = as_engine(model, tokenizer)
    model = getattr(engine, "model", None)  # the hf engine samples this process's model: eval mode
    was_training = getattr(model, "training", False)
    if model is not None:
        model.eval()
    try:
        for start in range(0, len(problems), prompts_per_batch):
            chunk = problems[start:start + prompts_per_batch]
            seed = None if generator_seed is None else generator_seed + start
            pending = start_rollout(engine, tokenizer, chunk, sampling, runner, generator_seed=seed, candidates=samples,
                                    weights=reward.weights.as_dict(), normalize=reward.weighted_mean,
                                    timeout_s=timeout_s,
                                    overlong=reward.overlong, penalize_flags=reward.penalize_flags, feedback=feedback)
            for rec in pending.finish().candidates:
                counts[rec.problem_id][0] += 1
                counts[rec.problem_id][1] += int(rec.passed)
                first_counts[rec.problem_id] += int(rec.passed_first_turn)
                total = rec.result.get("tests_total") or 0
                test_rates.append((rec.result.get("tests_passed") or 0) / total if total else 0.0)
                if on_candidate:
                    on_candidate(by_id[rec.problem_id], rec.text, rec.result)
                if record:
                    recorded[rec.problem_id].append(rec.event_dict())
            if on_problem is not None:
                for p in chunk:
                    n, c = counts[p.id]
                    entry = {"n": n, "c": c, "pass@1": pass_at_k(n, c, 1),
                             "pass@k": {str(k): pass_at_k(n, c, k) for k in ks if k != 1}}
                    if multi_turn:
                        entry["pass@1/turn1"] = pass_at_k(n, first_counts[p.id], 1)
                    if record:
                        entry["candidates"] = recorded[p.id]
                    on_problem(p.id, entry)
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
