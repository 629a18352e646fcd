"""python -m training: one-line errors (exit 2), run wiring, eval output, schema."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from training import cli

GOOD_PROBLEM = {"id": "sub", "kind": "function", "entry_point": "sub", "prompt": "def sub(a, b):\n",
                "tests": ["assert sub(3, 5) == -2", "assert sub(0, 4) == -4"],
                "reference_solution": "def sub(a, b):\n    return a - b\n", "split": "heldout"}


@pytest.fixture
def problems(tmp_path):
    path = tmp_path / "problems.jsonl"
    path.write_text(json.dumps(GOOD_PROBLEM) + "\n" + json.dumps({**GOOD_PROBLEM, "id": "sub2", "split": "train"})
                    + "\n")
    return path


@pytest.fixture
def run_yaml(tmp_path, tiny_model_dir, problems):
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({"model": {"name_or_path": str(tiny_model_dir)}, "problems": str(problems),
                                    "train": {"steps": 2}}))
    return path


def error_line(capsys):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    return err[0]


def test_a_missing_config_file_is_one_line_and_exit_2(tmp_path, capsys):
    assert cli.main(["run", "--config", str(tmp_path / "nope.yaml"), "--out", str(tmp_path / "r")]) == 2
    assert "file not found" in error_line(capsys)


def test_a_bad_config_value_names_the_field(run_yaml, tmp_path, capsys):
    assert cli.main(["run", "--config", str(run_yaml), "--out", str(tmp_path / "r"), "--set", "ppo.clip_range=3"]) == 2
    assert error_line(capsys).startswith("error: ppo.clip_range: must be")


def test_a_missing_model_path_is_named(run_yaml, tmp_path, capsys):
    code = cli.main(["run", "--config", str(run_yaml), "--out", str(tmp_path / "r"),
                     "--set", "model.name_or_path=var/models/missing-tiny"])
    assert code == 2
    assert "model path not found: var/models/missing-tiny" in error_line(capsys)


def test_a_problem_file_with_errors_names_line_and_field(run_yaml, tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(GOOD_PROBLEM) + "\n" + json.dumps({"id": "x", "kind": "function", "tests": []}) + "\n")
    assert cli.main(["run", "--config", str(run_yaml), "--out", str(tmp_path / "r"), "--set", f"problems={bad}"]) == 2
    line = error_line(capsys)
    assert "line 2" in line and "entry_point" in line


def test_run_passes_the_overridden_config_to_the_trainer(run_yaml, tmp_path, monkeypatch, capsys):
    import training.trainer

    calls = []
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)  # (it would pin torch's threads)
    monkeypatch.setattr(training.trainer, "train",
                        lambda cfg, out, resume, stop_file, progress, phase_threads:
                        calls.append((cfg, out, resume, phase_threads)) or "succeeded")
    out = tmp_path / "run"
    assert cli.main(["run", "--config", str(run_yaml), "--out", str(out), "--set", "ppo.learning_rate=1e-5",
                     "--no-progress"]) == 0
    cfg, got_out, resume, phases = calls[0]
    assert cfg.ppo.learning_rate == 1e-5 and cfg.train.steps == 2 and got_out == out and resume is False
    # no --threads: every core while the sandbox is idle, the cores its 2 workers leave while it runs
    cores = len(os.sched_getaffinity(0))
    assert (phases.idle_threads, phases.busy_threads) == (cores, max(1, cores - 2))
    assert json.loads(capsys.readouterr().out) == {"status": "succeeded", "out": str(out)}
    # the resolved config is saved, so --resume works without --config
    assert cli.main(["run", "--out", str(out), "--resume", "--no-progress", "--threads", "1"]) == 0
    assert calls[1][0] == cfg and calls[1][2] is True
    assert calls[1][3] is None  # --threads pins one count for the whole run


def test_a_directory_that_holds_no_model_is_one_line_and_a_failed_done_event(run_yaml, tmp_path, capsys):
    empty = tmp_path / "not-a-model"
    empty.mkdir()
    out = tmp_path / "r"
    code = cli.main(["run", "--config", str(run_yaml), "--out", str(out), "--no-progress",
                     "--set", f"model.name_or_path={empty}"])
    assert code == 2
    assert error_line(capsys).startswith("error: model.name_or_path: cannot load")
    done = json.loads((out / "events.jsonl").read_text().splitlines()[-1])
    assert done["event"] == "done" and done["status"] == "failed" and "model.name_or_path" in done["error"]


def test_a_problem_file_without_a_train_split_is_refused(run_yaml, tmp_path, capsys):
    only_heldout = tmp_path / "heldout.jsonl"
    only_heldout.write_text(json.dumps(GOOD_PROBLEM) + "\n")
    assert cli.main(["run", "--config", str(run_yaml), "--out", str(tmp_path / "r"),
                     "--set", f"problems={only_heldout}"]) == 2
    assert "no problem with split 'train'" in error_line(capsys)


def test_problems_marked_excluded_are_read_and_skipped(run_yaml, tmp_path, capsys):
    exported = tmp_path / "exported.jsonl"  # a web app export: the only train problem was excluded
    exported.write_text(json.dumps(GOOD_PROBLEM) + "\n"
                        + json.dumps({**GOOD_PROBLEM, "id": "sub2", "split": "train", "excluded": True}) + "\n")
    assert cli.main(["run", "--config", str(run_yaml), "--out", str(tmp_path / "r"),
                     "--set", f"problems={exported}"]) == 2
    assert "no problem with split 'train' to train on (problems marked excluded are skipped)" in error_line(capsys)
    import argparse  # probe and eval read through the same filter
    assert [p.id for p in cli._problems_of_split(argparse.Namespace(problems=str(exported), split="all"))] == ["sub"]


def test_resume_of_a_missing_run_directory_is_refused(run_yaml, tmp_path, capsys):
    assert cli.main(["run", "--config", str(run_yaml), "--out", str(tmp_path / "none"), "--resume"]) == 2
    assert "run directory not found" in error_line(capsys)


def test_eval_prints_pass_at_k(tiny_model_dir, problems, capsys):
    code = cli.main(["eval", "--model", str(tiny_model_dir), "--problems", str(problems), "--split", "heldout",
                     "--samples", "2", "--k", "1,2", "--set", "sampling.max_new_tokens=8", "--per-problem"])
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    assert set(report["pass@k"]) == {"2"} and 0.0 <= report["pass@1"] <= 1.0
    assert report["per_problem"]["sub"]["n"] == 2 and report["problems"] == 1 and report["split"] == "heldout"


def test_eval_rejects_k_above_samples(tiny_model_dir, problems, capsys):
    assert cli.main(["eval", "--model", str(tiny_model_dir), "--problems", str(problems), "--samples", "2",
                     "--k", "1,4"]) == 2
    assert "--k values must be between 1 and --samples" in error_line(capsys)


def test_tiny_model_command_builds_a_model(tmp_path, problems, capsys):
    out = tmp_path / "tiny"
    train_only = tmp_path / "train.jsonl"
    train_only.write_text(json.dumps({**GOOD_PROBLEM, "split": "train"}) + "\n")
    assert cli.main(["tiny-model", "--out", str(out), "--warmup-problems", str(train_only),
                     "--warmup-steps", "3"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["out"] == str(out) and info["warmup"]["steps"] == 3
    assert (out / "model.safetensors").exists() and (out / "tokenizer.json").exists()


def test_schema_prints_the_json_schema_without_importing_torch():
    code = ("import sys, runpy; sys.argv = ['training', 'schema']; "
            "from training.cli import main; rc = main(['schema']); "
            "assert 'torch' not in sys.modules, 'torch imported'; sys.exit(rc)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[2])
    assert proc.returncode == 0, proc.stderr
    schema = json.loads(proc.stdout)
    assert schema["$schema"].endswith("2020-12/schema") and "ppo" in schema["properties"]


def test_the_module_entry_point_reports_errors_without_a_traceback(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "training", "run", "--config", str(tmp_path / "x.yaml"),
                           "--out", str(tmp_path / "r")], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[2])
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("error: config: file not found") and "Traceback" not in proc.stderr


def test_export_refuses_a_directory_without_an_adapter(tmp_path, capsys):
    assert cli.main(["export", "--adapter", str(tmp_path), "--out", str(tmp_path / "m")]) == 2
    assert "no adapter_config.json" in error_line(capsys)


# get_peft_model (here, in the test) still asks transformers for the deprecated v4 name.
@pytest.mark.filterwarnings("ignore:.*is_gradient_checkpointing.*:FutureWarning")
def test_export_merges_an_adapter_into_a_loadable_model(tiny_model_dir, tmp_path, capsys):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir))
    model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"))
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.fill_(0.01)  # a non-trivial adapter, so merging changes the weights
    ids = torch.tensor([[1, 2, 3, 4]])
    expected = model(ids).logits
    model.save_pretrained(tmp_path / "adapter")
    assert cli.main(["export", "--adapter", str(tmp_path / "adapter"), "--out", str(tmp_path / "merged")]) == 0
    assert json.loads(capsys.readouterr().out)["kind"] == "merged"
    merged = AutoModelForCausalLM.from_pretrained(str(tmp_path / "merged"))
    AutoTokenizer.from_pretrained(str(tmp_path / "merged"))
    assert torch.allclose(merged(ids).logits, expected, atol=1e-4)


def test_a_sandbox_backend_this_machine_lacks_is_refused_before_the_model_loads(run_yaml, tmp_path, capsys,
                                                                                monkeypatch):
    import sandbox.backends

    sandbox.backends.backend_names()  # registers the backends
    monkeypatch.setattr(sandbox.backends.base.BACKENDS["docker"], "unavailable",
                        classmethod(lambda cls: "no Docker engine answers (scripted)"))
    code = cli.main(["run", "--config", str(run_yaml), "--out", str(tmp_path / "r"), "--set", "sandbox.backend=docker"])
    assert code == 2
    assert "sandbox.backend: docker is not available on this machine: no Docker engine answers" in error_line(capsys)
    assert not (tmp_path / "r" / "events.jsonl").exists()
