"""``python -m training probe``: per-problem pass rates through training's own rollout and sandbox."""

import json

import pytest

from training import cli
from training.difficulty import RESULT_KEYS, SUMMARY_KEYS, read_probe

# Whatever the model writes, `free` passes and `impossible` fails: the completion continues a comment
# and is cut at the first line break (sampling.stop), and the tests do not depend on it.
FREE = {"id": "free", "kind": "function", "prompt": "def f():\n    return 1\n# ", "entry_point": "f",
        "tests": ["assert f() == 1"], "split": "train"}
IMPOSSIBLE = {**FREE, "id": "impossible", "tests": ["assert f() == 2"]}
OPEN = {"id": "add", "kind": "function", "prompt": "def add(a, b):\n", "entry_point": "add",
        "tests": ["assert add(1, 2) == 3"], "split": "heldout"}
STOP = 'sampling.stop=["\\n", "\\r"]'


@pytest.fixture
def probe_problems(tmp_path):
    path = tmp_path / "problems.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in (FREE, IMPOSSIBLE, OPEN)))
    return path


def run_probe(capsys, *args):
    code = cli.main(["probe", *map(str, args)])
    captured = capsys.readouterr()
    return code, captured.out.splitlines(), captured.err


def test_probe_prints_one_line_per_problem_then_the_summary(tiny_model_dir, probe_problems, tmp_path, capsys):
    out = tmp_path / "out" / "probe.jsonl"
    code, lines, err = run_probe(capsys, "--model", tiny_model_dir, "--problems", probe_problems, "--split", "all",
                                 "--samples", 3, "--set", STOP, "--set", "sampling.max_new_tokens=8", "--out", out)
    assert code == 0, err
    rows = [json.loads(line) for line in lines]
    assert [tuple(r) for r in rows[:-1]] == [(*RESULT_KEYS, "pass_rate")] * 3  # the old name last, beside the new
    by_id = {r["problem_id"]: r for r in rows[:-1]}
    assert list(by_id) == ["free", "impossible", "add"]
    assert by_id["free"] == {"problem_id": "free", "samples": 3, "passed": 3, "solve_rate": 1.0, "pass_rate": 1.0}
    assert by_id["impossible"] == {"problem_id": "impossible", "samples": 3, "passed": 0, "solve_rate": 0.0,
                                   "pass_rate": 0.0}
    assert 0 <= by_id["add"]["passed"] <= 3 and by_id["add"]["solve_rate"] == by_id["add"]["passed"] / 3
    summary = rows[-1]["summary"]
    assert tuple(summary)[:4] == SUMMARY_KEYS
    assert summary["problems"] == 3
    assert summary["unsolved"] == 1 + (by_id["add"]["passed"] == 0)
    assert summary["solved"] == 1 + (by_id["add"]["passed"] == 3)
    assert summary["mean_solve_rate"] == pytest.approx((1 + by_id["add"]["solve_rate"]) / 3)
    assert summary["samples"] == 3 and summary["split"] == "all" and summary["model"] == str(tiny_model_dir)
    # the file holds the same lines, and reads back as a probe output
    assert out.read_text().splitlines() == lines
    assert read_probe(out).summary == summary
    assert "probe 3/3 problems" in err  # progress on stderr, never on stdout


def test_probe_takes_the_train_split_by_default_and_one_sample_works(qwen3_model_dir, probe_problems, capsys):
    code, lines, err = run_probe(capsys, "--model", qwen3_model_dir, "--problems", probe_problems, "--samples", 1,
                                 "--set", STOP, "--no-progress")
    assert code == 0, err
    rows = [json.loads(line) for line in lines]
    assert [r["problem_id"] for r in rows[:-1]] == ["free", "impossible"]
    assert [r["passed"] for r in rows[:-1]] == [1, 0]
    assert rows[-1]["summary"]["solved"] == rows[-1]["summary"]["unsolved"] == 1
    assert "probe " not in err  # --no-progress


def test_the_probe_function_chunks_in_order_and_reports_progress(qwen3_model_dir, probe_problems, runner,
                                                                 monkeypatch):
    from sandbox.formats import load_problems
    from training import probe as probe_module
    from training.config import config_from_dict
    from training.policy import load_policy

    # Three problems: one per chunk (PROGRESS_CHUNKS), so progress counts each as it finishes.
    cfg = config_from_dict({"model": {"name_or_path": str(qwen3_model_dir), "lora": None},
                            "sampling": {"stop": ["\n", "\r"], "max_new_tokens": 8}})
    policy = load_policy(cfg.model, kl_coef=0.0)
    problems = load_problems(probe_problems).problems
    seen = []
    results = list(probe_module.probe(policy.model, policy.tokenizer, problems, cfg.sampling, runner, samples=2,
                                      progress=lambda done, total: seen.append((done, total))))
    assert [(r.problem_id, r.samples) for r in results] == [("free", 2), ("impossible", 2), ("add", 2)]
    assert results[0].passed == 2 and results[1].passed == 0
    assert seen == [(1, 3), (2, 3), (3, 3)]


def test_a_set_that_fits_one_generate_is_still_probed_in_chunks_so_progress_moves():
    from training.probe import CANDIDATES_PER_GENERATE, PROGRESS_CHUNKS, chunk_size

    assert chunk_size(194, 2) == 25  # the demo set: 8 chunks, not 2 of 128
    assert chunk_size(3, 2) == 1 and chunk_size(1, 1) == 1
    assert chunk_size(100_000, 8) == CANDIDATES_PER_GENERATE // 8  # a big set: generate batches stay full
    assert chunk_size(10_000, 512) == 1
    for problems in (1, 7, 8, 9, 194, 5000):
        for samples in (1, 2, 8, 64):
            size = chunk_size(problems, samples)
            assert size * samples <= max(CANDIDATES_PER_GENERATE, samples)  # one generate's worth at most
            assert size <= -(-problems // PROGRESS_CHUNKS)  # no chunk bigger than an eighth of the set


def error_line(err):
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


def test_bad_input_is_one_line_naming_what_and_exit_2(qwen3_model_dir, probe_problems, tmp_path, capsys):
    model = ("--model", qwen3_model_dir)
    code, _, err = run_probe(capsys, *model, "--problems", probe_problems, "--samples", 0)
    assert code == 2 and "--samples must be >= 1, got 0" in error_line(err)
    code, _, err = run_probe(capsys, *model, "--problems", tmp_path / "nope.jsonl", "--samples", 2)
    assert code == 2 and f"problem file not found: {tmp_path / 'nope.jsonl'}" in error_line(err)
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(FREE) + "\n" + json.dumps({"id": "x", "kind": "function", "tests": []}) + "\n")
    code, _, err = run_probe(capsys, *model, "--problems", bad, "--samples", 2)
    line = error_line(err)
    assert code == 2 and "line 2" in line and "entry_point" in line
    only_train = tmp_path / "train.jsonl"
    only_train.write_text(json.dumps(FREE) + "\n")
    code, _, err = run_probe(capsys, *model, "--problems", only_train, "--split", "heldout", "--samples", 2)
    assert code == 2 and "--split heldout" in error_line(err) and "no problems in that split" in err
    code, _, err = run_probe(capsys, "--model", tmp_path / "missing-model", "--problems", probe_problems,
                             "--samples", 2)
    assert code == 2 and "model path not found" in error_line(err)
    code, _, err = run_probe(capsys, *model, "--adapter", tmp_path, "--problems", probe_problems, "--samples", 2)
    assert code == 2 and f"--adapter {tmp_path}: no adapter_config.json" in error_line(err)
    code, _, err = run_probe(capsys, *model, "--problems", probe_problems, "--samples", 2, "--out", tmp_path)
    assert code == 2 and "is a directory" in error_line(err)
    code, _, err = run_probe(capsys, *model, "--problems", probe_problems, "--samples", 2,
                             "--set", "sampling.temperature=-1")
    assert code == 2 and error_line(err).startswith("error: sampling.temperature: must be")


def test_an_unknown_split_is_a_usage_error(qwen3_model_dir, probe_problems, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["probe", "--model", str(qwen3_model_dir), "--problems", str(probe_problems), "--samples", "2",
                  "--split", "test"])
    assert exc.value.code == 2
    assert "invalid choice: 'test'" in capsys.readouterr().err


@pytest.mark.e2e
def test_the_probe_runs_on_the_replicas_of_sandbox_endpoints(qwen3_model_dir, probe_problems, capsys, monkeypatch):
    from tests.sandbox.replicas import TOKEN, replicas

    monkeypatch.setenv("CRUCIBLE_SANDBOX_TOKEN", TOKEN)
    with replicas(1) as (replica,):
        endpoints = f'sandbox.endpoints=["{replica.url}"]'
        code, lines, err = run_probe(capsys, "--model", qwen3_model_dir, "--problems", probe_problems, "--samples", 2,
                                     "--set", STOP, "--set", endpoints, "--no-progress")
        assert code == 0, err
        assert [(r["problem_id"], r["passed"]) for r in map(json.loads, lines[:-1])] == [("free", 2), ("impossible", 0)]
        replica.kill()  # the same probe now has nowhere to run: it fails naming the endpoint, no local fallback
        code, lines, err = run_probe(capsys, "--model", qwen3_model_dir, "--problems", probe_problems, "--samples", 2,
                                     "--set", STOP, "--set", endpoints, "--no-progress")
    assert code != 0 and lines == []
    assert replica.url in err and "no sandbox endpoint is left" in err, err
