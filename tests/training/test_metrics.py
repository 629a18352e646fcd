"""The registry of step metrics (training/metrics.py): complete, consistent, and how processes combine."""

import pytest

from sandbox.flags import VOCABULARY
from training import metrics
from training.rewards import DIMENSIONS


def test_every_reward_dimension_and_flag_has_a_definition():
    assert all(metrics.find(f"reward/{d}") is not None and not metrics.find(f"reward/{d}").family for d in DIMENSIONS)
    assert all(metrics.find(f"flags/{f}").key == "flags/<flag>" for f in VOCABULARY)


def test_a_family_names_each_member_by_its_placeholder():
    assert metrics.find("reward/turn3").label_of("reward/turn3") == "reward of turn 3"
    assert metrics.find("flags/broad_except").label_of("flags/broad_except") == "flagged: broad_except"
    assert metrics.find("reward/turn") is None and metrics.find("made/up") is None


def test_every_metric_names_charts_that_exist_and_a_valid_combine():
    charts = {c.name for c in metrics.CHARTS}
    for m in metrics.METRICS:
        assert set(m.charts) <= charts and m.combine in metrics.COMBINES and m.label and m.doc, m
    assert all(c.total is None or metrics.find(c.total) is not None for c in metrics.CHARTS)


def test_processes_combine_as_each_metric_says():
    per_process = [{"candidates": 2, "reward/mean": 1.0, "time/step_s": 3.0, "flags/broad_except": 1,
                    "tokens_per_s": 100.0, "completion_len/max": 7},
                   {"candidates": 6, "reward/mean": 0.0, "time/step_s": 5.0, "flags/broad_except": 2,
                    "tokens_per_s": 50.0, "completion_len/max": 9}]
    assert metrics.combine(per_process) == {"candidates": 8, "reward/mean": 0.25, "time/step_s": 5.0,
                                            "flags/broad_except": 3, "tokens_per_s": 150.0,
                                            "completion_len/max": 9}


def test_combining_an_unregistered_key_raises_naming_it():
    with pytest.raises(ValueError, match="made/up"):
        metrics.combine([{"candidates": 1, "made/up": 1.0}])


def test_the_registry_travels_as_plain_data():
    data = metrics.registry_json()
    by_key = {m["key"]: m for m in data["metrics"]}
    assert by_key["reward/mean"]["legend"] == "total (weighted)" and by_key["kl"]["charts"] == ["kl"]
    assert by_key["flags/<flag>"]["prefix"] == "flags/" and "prefix" not in by_key["kl"]
    assert [c["name"] for c in data["charts"]][:2] == ["reward", "pass"]


def test_the_design_record_lists_every_metric_as_the_registry_defines_it():
    from pathlib import Path

    design = (Path(__file__).resolve().parents[2] / "docs" / "design.md").read_text()
    for m in metrics.METRICS:
        row = f"| `{m.key}` | {m.combine} | {m.unit} | {', '.join(m.charts) or '—'} | {m.doc} |"
        assert row in design, f"docs/design.md 'Step metrics' is missing or differs on: {row}"
