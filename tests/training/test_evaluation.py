"""pass@k estimator, evaluate() aggregation, and the demo problem set."""

import itertools
import json
import runpy
import subprocess
import sys
from concurrent.futures import Future
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from training.config import SamplingConfig
from training.evaluation import default_ks, evaluate, pass_at_k

DEMO = Path(__file__).resolve().parents[2] / "data" / "demo" / "problems.jsonl"


def brute_force_pass_at_k(n, c, k):
    samples = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(samples[i] for i in s) for s in subsets) / len(subsets)


@pytest.mark.parametrize("n", [1, 2, 5, 8])
def test_pass_at_k_equals_the_brute_force_probability(n):
    for c in range(n + 1):
        for k in range(1, n + 1):
            assert pass_at_k(n, c, k) == pytest.approx(brute_force_pass_at_k(n, c, k), abs=1e-12)


def test_pass_at_1_is_the_fraction_correct():
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)


def test_pass_at_k_rejects_impossible_counts():
    with pytest.raises(ValueError):
        pass_at_k(4, 5, 1)
    with pytest.raises(ValueError):
        pass_at_k(4, 2, 5)


def test_default_ks_are_powers_of_two_and_n():
    assert default_ks(8) == [1, 2, 4, 8]
    assert default_ks(6) == [1, 2, 4, 6]
    assert default_ks(1) == [1]


def _problem(pid, prompt):
    from sandbox import Problem

    return Problem(id=pid, kind="function", prompt=prompt, entry_point="f", tests=("assert True", "assert True"),
                   split="heldout")


def _result(status, tests_passed, tests_total=2):
    from sandbox.result import ExecutionResult, TestResult

    return ExecutionResult(status=status, tests=[TestResult(name=f"test {i + 1}", passed=i < tests_passed)
                                                 for i in range(tests_total)], isolation="scripted")


class ScriptedRunner:
    """Passes every candidate of the problems in ``passing``; records what it was asked to run."""

    def __init__(self, passing):
        self.passing = passing
        self.seen = []

    def submit_batch(self, problems, candidates):
        done = Future()
        done.set_result(self.run_batch(problems, candidates))
        return done

    def run_batch(self, problems, candidates):
        self.seen += candidates
        return [_result("passed", 2) if c.problem_id in self.passing else _result("failed", 1) for c in candidates]


def test_evaluate_averages_pass_at_k_over_problems(tiny_model_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    model.train()
    problems = [_problem("a", "def f(x):\n"), _problem("b", "def g(y):\n"), _problem("c", "x = ")]
    runner = ScriptedRunner({"a"})
    report = evaluate(model, tok, problems, SamplingConfig(max_new_tokens=4), samples=3, ks=[1, 3], runner=runner,
                      prompts_per_batch=2)
    assert report["pass@1"] == pytest.approx(1 / 3)
    assert report["pass@k"] == {"3": pytest.approx(1 / 3)}
    assert report["per_problem"]["a"] == {"n": 3, "c": 3, "pass@1": 1.0}
    assert report["per_problem"]["b"]["c"] == 0
    assert report["mean_test_pass_rate"] == pytest.approx((3 * 1.0 + 6 * 0.5) / 9)
    assert len(runner.seen) == 9 and all(c.completion is not None for c in runner.seen)
    assert model.training  # mode restored


def test_evaluate_records_each_sample_as_a_step_records_its_candidates(tiny_model_dir, runner):
    from sandbox import Problem as SandboxProblem
    from tests.training.conftest import PROBLEMS
    from training.config import RewardConfig

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    problems = [SandboxProblem.from_dict(p) for p in PROBLEMS[:2]]
    reward = RewardConfig(penalize_flags=("broad_except",))
    report = evaluate(model, tok, problems, SamplingConfig(max_new_tokens=8), samples=3, ks=[1], runner=runner,
                      prompts_per_batch=1, record=True, reward=reward, timeout_s=1.0)
    for problem in problems:
        entry = report["per_problem"][problem.id]
        assert entry["n"] == 3 and len(entry["candidates"]) == 3
        assert sum(c["result"]["status"] == "passed" for c in entry["candidates"]) == entry["c"]
        for cand in entry["candidates"]:
            assert cand["code"].startswith(problem.prompt)  # the program the sandbox ran, in its own group
            result = cand["result"]
            assert result["tests_total"] == len(problem.tests) and len(result["tests"]) <= result["tests_total"]
            assert {"stdout", "stderr", "flags", "wall_time_s"} <= set(result)
            assert cand["rewards"]["pass_rate"] == pytest.approx(result["tests_passed"] / result["tests_total"])
            assert isinstance(cand["truncated"], bool) and isinstance(cand["reward"], float)
    plain = evaluate(model, tok, problems, SamplingConfig(max_new_tokens=8), samples=3, ks=[1], runner=runner,
                     prompts_per_batch=1)
    assert all("candidates" not in entry for entry in plain["per_problem"].values())  # the CLI's report
    assert {k: {f: v[f] for f in ("n", "c")} for k, v in plain["per_problem"].items()} == \
        {k: {f: v[f] for f in ("n", "c")} for k, v in report["per_problem"].items()}  # same seeded samples


def test_evaluate_rejects_k_above_samples(tiny_model_dir):
    with pytest.raises(ValueError, match="1..samples"):
        evaluate(None, None, [_problem("a", "x")], SamplingConfig(), samples=2, ks=[4], runner=None)


def test_the_demo_set_has_train_and_heldout_problems_of_the_documented_shape():
    rows = [json.loads(line) for line in DEMO.read_text().splitlines()]
    assert len(rows) >= 100
    splits = [r["split"] for r in rows]
    assert 0.15 <= splits.count("heldout") / len(rows) <= 0.25
    assert len({r["id"] for r in rows}) == len(rows)
    for r in rows:
        assert 3 <= len(r["tests"]) <= 5
        assert r["reference_solution"].startswith(r["prompt"]) and r["prompt"].endswith('"""\n')
        assert len(r["reference_solution"][len(r["prompt"]):].strip().splitlines()) <= 3


def test_heldout_problems_are_new_combinations_of_trained_parts():
    rows = [json.loads(line) for line in DEMO.read_text().splitlines()]
    train_tags = {t for r in rows if r["split"] == "train" for t in r["tags"]}
    train_bodies = {r["reference_solution"][len(r["prompt"]):] for r in rows if r["split"] == "train"}
    for r in rows:
        if r["split"] == "heldout":
            assert set(r["tags"]) <= train_tags, r["id"]
            assert r["reference_solution"][len(r["prompt"]):] not in train_bodies, r["id"]


def test_the_demo_file_is_what_the_generator_writes():
    generator = runpy.run_path(str(DEMO.with_name("make_problems.py")))  # defines build(), writes nothing
    generated = {p["id"]: p for p in generator["build"]()}
    stored = {json.loads(line)["id"]: json.loads(line) for line in DEMO.read_text().splitlines()}
    assert generated == stored


def test_every_demo_reference_passes_and_every_empty_body_fails_in_the_sandbox():
    proc = subprocess.run([sys.executable, "-m", "sandbox", "check", str(DEMO)], capture_output=True, text=True,
                          cwd=DEMO.parents[2], timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert len(rows) >= 100 and all(r["reference_passed"] and r["empty_failed"] for r in rows)


@pytest.mark.parametrize("thinking", [False, True], ids=["answer", "think"])
def test_evaluation_prompts_and_reads_replies_as_training_does(qwen3_model_dir, runner, monkeypatch, thinking):
    """With ``sampling.thinking`` the held-out prompts ask for thinking and the sandbox gets the last
    fenced block after ``</think>``: a draft written while thinking is not what is judged."""
    from sandbox import Problem as SandboxProblem
    from tests.training.conftest import PROBLEMS
    from training import generation
    from training.generation import GenerationBatch, build_prompt
    from training.rewards import DIMENSIONS

    tok = AutoTokenizer.from_pretrained(qwen3_model_dir)
    problem = SandboxProblem.from_dict(PROBLEMS[0])  # add(a, b)
    reply = ("<think>\n```python\ndef add(a, b):\n    return a - b\n```\nno, plus\n</think>\n"
             "```python\ndef add(a, b):\n    return a + b\n```\n")
    seen = []

    def scripted_generate(model, tokenizer, prompts, sampling, *, num_return_sequences, generator_seed=None):
        seen.extend(prompts)
        n = len(prompts) * num_return_sequences
        return GenerationBatch(prompt_ids=[[1]] * n, completion_ids=[[2]] * n, texts=[reply] * n,
                               prompt_index=[i // num_return_sequences for i in range(n)],
                               finish_reasons=["eos"] * n, generated_tokens=[1] * n, prompts=list(prompts))

    monkeypatch.setattr(generation, "generate", scripted_generate)
    sampling = SamplingConfig(prompt_style="chat", thinking=thinking, max_new_tokens=8)
    report = evaluate(torch.nn.Linear(1, 1), tok, [problem], sampling, samples=2, ks=[1], runner=runner, record=True)
    assert seen == [build_prompt(problem, tok, "chat", thinking)]
    # without thinking the sandbox takes the reply's first fenced block: the wrong draft
    assert report["pass@1"] == (1.0 if thinking else 0.0)
    cand = report["per_problem"][problem.id]["candidates"][0]
    assert ("a + b" in cand["code"]) is thinking and set(cand["rewards"]) == set(DIMENSIONS)
