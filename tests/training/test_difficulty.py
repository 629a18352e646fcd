"""The difficulty filter: probe output parsing, the drop rules, the config section, the trainer's drop."""

import json

import pytest

from tests.training.conftest import PROBLEMS, tiny_run_config
from training import cli
from training.config import ConfigError, config_from_dict, json_schema
from training.difficulty import (DifficultyError, ProbeFileError, drop_by_difficulty, filter_train_problems,
                                 parse_probe, read_probe, summarize, ProblemDifficulty)
from training.events import read_events


class P:
    def __init__(self, id):
        self.id = id


def probe_lines(*rows, summary=True):
    results = [ProblemDifficulty(pid, n, c) for pid, n, c in rows]
    lines = [json.dumps(r.to_dict()) for r in results]
    if summary:
        lines.append(json.dumps({"summary": summarize(results, samples=rows[0][1] if rows else 0)}))
    return lines


def write_probe(path, *rows):
    path.write_text("\n".join(probe_lines(*rows)) + "\n")
    return path


# ---- parsing ---------------------------------------------------------------------------------------


def test_a_probe_output_parses_into_results_and_summary():
    report = parse_probe(probe_lines(("a", 4, 0), ("b", 4, 4), ("c", 4, 1)))
    assert [(r.problem_id, r.solve_rate) for r in report.results] == [("a", 0.0), ("b", 1.0), ("c", 0.25)]
    mean = pytest.approx(1.25 / 3)
    assert report.summary == {"problems": 3, "unsolved": 1, "solved": 1, "mean_solve_rate": mean,
                              "mean_pass_rate": mean, "samples": 4}  # the old name, still written beside it


def test_a_probe_file_from_before_the_rename_reads_with_the_new_names():
    old = ['{"problem_id": "a", "samples": 4, "passed": 1, "pass_rate": 0.25}',
           '{"summary": {"problems": 1, "unsolved": 0, "solved": 0, "mean_pass_rate": 0.25}}']
    report = parse_probe(old)
    assert report.results[0].solve_rate == 0.25 and report.summary["mean_solve_rate"] == 0.25
    with pytest.raises(ProbeFileError, match=r"line 1: field pass_rate must be passed / samples \(0.25\)"):
        parse_probe(['{"problem_id": "a", "samples": 4, "passed": 1, "solve_rate": 0.25, "pass_rate": 0.5}', old[1]])


def test_a_file_without_its_summary_line_is_an_interrupted_probe(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text("\n".join(probe_lines(("a", 4, 1), summary=False)) + "\n")
    with pytest.raises(ProbeFileError, match="no summary line.*interrupted"):
        read_probe(path)


@pytest.mark.parametrize("line, message", [
    ("not json", "line 2: not JSON"),
    ('["a"]', "line 2: expected a JSON object"),
    ('{"problem_id": "b", "samples": 4, "passed": 1}', "line 2: missing field solve_rate"),
    ('{"problem_id": "b", "samples": 0, "passed": 0, "pass_rate": 0}', "line 2: field samples must be an integer >= 1"),
    ('{"problem_id": "b", "samples": 4, "passed": 5, "pass_rate": 1.25}', "line 2: field passed must be"),
    ('{"problem_id": "b", "samples": 4, "passed": 1, "pass_rate": 0.5}', r"line 2: field pass_rate must be passed / samples \(0.25\)"),
    ('{"problem_id": "b", "samples": 4, "passed": 1, "solve_rate": 1}', r"line 2: field solve_rate must be passed / samples"),
    ('{"problem_id": "a", "samples": 4, "passed": 1, "pass_rate": 0.25}', "line 2: problem_id 'a' again \\(first on line 1\\)"),
    ('{"problem_id": 7, "samples": 4, "passed": 1, "pass_rate": 0.25}', "line 2: field problem_id must be"),
])
def test_a_bad_line_is_named_with_its_number_and_field(line, message):
    first, summary = probe_lines(("a", 4, 1))
    with pytest.raises(ProbeFileError, match=message):
        parse_probe([first, line, summary], "p.jsonl")


def test_a_summary_that_disagrees_with_the_lines_or_is_not_last_is_refused():
    lines = probe_lines(("a", 4, 1), ("b", 4, 2))
    with pytest.raises(ProbeFileError, match="summary counts 2 problems but the file has 1"):
        parse_probe([lines[0], lines[2]])
    with pytest.raises(ProbeFileError, match="line 4: a line after the summary"):
        parse_probe([*lines, lines[0]])
    with pytest.raises(ProbeFileError, match="summary has no field solved"):
        parse_probe([lines[0], json.dumps({"summary": {"problems": 1, "unsolved": 0, "mean_pass_rate": 0.25}})])


def test_a_missing_file_or_a_directory_is_named(tmp_path):
    with pytest.raises(ProbeFileError, match=f"probe file not found: {tmp_path / 'nope.jsonl'}"):
        read_probe(tmp_path / "nope.jsonl")
    with pytest.raises(ProbeFileError, match="is a directory"):
        read_probe(tmp_path)


# ---- the rules -------------------------------------------------------------------------------------

REPORT = parse_probe(probe_lines(("never", 4, 0), ("always", 4, 4), ("some", 4, 2), ("heldout", 4, 0)))
TRAIN = [P("never"), P("always"), P("some"), P("unprobed")]


@pytest.mark.parametrize("unsolved, solved, kept, dropped", [
    (False, False, ["never", "always", "some", "unprobed"], {"unsolved": 0, "solved": 0}),
    (True, False, ["always", "some", "unprobed"], {"unsolved": 1, "solved": 0}),
    (False, True, ["never", "some", "unprobed"], {"unsolved": 0, "solved": 1}),
    (True, True, ["some", "unprobed"], {"unsolved": 1, "solved": 1}),
])
def test_each_rule_drops_only_its_own_problems_and_keeps_unprobed_ones_in_order(unsolved, solved, kept, dropped):
    got, counts = drop_by_difficulty(TRAIN, REPORT, drop_unsolved=unsolved, drop_solved=solved)
    assert [p.id for p in got] == kept
    assert counts == dropped


def difficulty(probe=None, drop_unsolved=False, drop_solved=False):
    return config_from_dict({"difficulty": {"probe": probe and str(probe), "drop_unsolved": drop_unsolved,
                                            "drop_solved": drop_solved}}).difficulty


def test_without_a_rule_nothing_is_read_or_reported(tmp_path):
    kept, dropped = filter_train_problems(TRAIN, difficulty(tmp_path / "absent.jsonl"))
    assert kept == TRAIN and dropped is None


def test_the_filter_names_a_bad_probe_file_under_difficulty_probe(tmp_path):
    bad = tmp_path / "p.jsonl"
    bad.write_text("{}\n")
    with pytest.raises(DifficultyError, match=r"^difficulty.probe: .*line 1: missing field problem_id"):
        filter_train_problems(TRAIN, difficulty(bad, drop_unsolved=True))


def test_a_probe_of_another_problem_file_is_refused(tmp_path):
    other = write_probe(tmp_path / "p.jsonl", ("x", 4, 0), ("y", 4, 4))
    with pytest.raises(DifficultyError, match="measured none of the 4 train problems of f.jsonl"):
        filter_train_problems(TRAIN, difficulty(other, drop_unsolved=True), "f.jsonl")


def test_rules_that_leave_no_train_problem_fail_clearly(tmp_path):
    path = write_probe(tmp_path / "p.jsonl", ("never", 4, 0), ("always", 4, 4))
    with pytest.raises(DifficultyError, match="dropping 1 unsolved and 1 solved train problems leaves none"):
        filter_train_problems([P("never"), P("always")], difficulty(path, drop_unsolved=True, drop_solved=True))


# ---- the config section ----------------------------------------------------------------------------


def test_a_drop_rule_without_a_probe_names_difficulty_probe():
    with pytest.raises(ConfigError, match="^difficulty.probe: is needed by drop_solved"):
        config_from_dict({"difficulty": {"drop_solved": True}})
    with pytest.raises(ConfigError, match="^difficulty.probe: must not be empty"):
        config_from_dict({"difficulty": {"probe": " "}})
    with pytest.raises(ConfigError, match="^difficulty.drop_unsolved: must be true or false"):
        config_from_dict({"difficulty": {"probe": "p.jsonl", "drop_unsolved": "yes"}})


def test_the_difficulty_section_is_in_the_schema_with_its_defaults():
    props = json_schema()["properties"]["difficulty"]["properties"]
    assert {k: v["default"] for k, v in props.items()} == {"probe": None, "drop_unsolved": False,
                                                          "drop_solved": False}


# ---- the CLI and the trainer ------------------------------------------------------------------------


def test_run_refuses_a_bad_probe_before_loading_the_model(tmp_path, problems_file, capsys):
    config = tmp_path / "run.yaml"
    config.write_text(json.dumps({"model": {"name_or_path": str(tmp_path / "no-model-needed")},
                                  "problems": str(problems_file),
                                  "difficulty": {"probe": str(tmp_path / "missing.jsonl"), "drop_unsolved": True}}))
    (tmp_path / "no-model-needed").mkdir()
    assert cli.main(["run", "--config", str(config), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: difficulty.probe: probe file not found: {tmp_path / 'missing.jsonl'}"]
    assert not (tmp_path / "run").exists()


def test_the_trainer_drops_train_problems_by_the_rules_and_says_so_in_start(tmp_path, tiny_model_dir,
                                                                           problems_file, runner):
    from training.trainer import train

    train_ids = [p["id"] for p in PROBLEMS if p["split"] == "train"]  # add, sub, neg
    assert train_ids == ["add", "sub", "neg"]
    probe = write_probe(tmp_path / "probe.jsonl", ("add", 4, 0), ("sub", 4, 4), ("neg", 4, 2), ("mul", 4, 0))
    cfg = tiny_run_config(tiny_model_dir, problems_file, train={"steps": 2},
                          difficulty={"probe": str(probe), "drop_unsolved": True, "drop_solved": True})
    assert train(cfg, tmp_path / "run", runner=runner, progress=False) == "succeeded"
    events = read_events(tmp_path / "run" / "events.jsonl")
    start = events[0]
    assert start["event"] == "start" and start["dropped"] == {"unsolved": 1, "solved": 1}
    assert start["config"]["difficulty"]["drop_unsolved"] is True
    trained = {e["problem_id"] for e in events if e["event"] == "problem"}
    assert trained == {"neg"}
    # held-out problems are never filtered: mul (unsolved in the probe) is still evaluated
    evals = [e for e in events if e["event"] == "eval"]
    assert evals and all(set(e.get("per_problem", {"mul": 0})) == {"mul"} for e in evals)


def test_a_run_without_rules_has_no_dropped_field(tmp_path, qwen3_model_dir, train_problems_file, runner):
    from training.trainer import train

    cfg = tiny_run_config(qwen3_model_dir, train_problems_file, train={"steps": 1})
    assert train(cfg, tmp_path / "run", runner=runner, progress=False) == "succeeded"
    assert "dropped" not in read_events(tmp_path / "run" / "events.jsonl")[0]
