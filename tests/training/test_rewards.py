import math

import pytest

from training import rewards as R
from training.rewards import RewardContext


def result(status="passed", passed=2, total=2, syntax_ok=True, format_ok=True, wall=0.01):
    return {"status": status, "tests_passed": passed, "tests_total": total, "syntax_ok": syntax_ok,
            "format_ok": format_ok, "wall_time_s": wall, "cpu_time_s": wall}


CODE = "def add(a, b):\n    return a + b\n"


def ctx(**kw):
    base = dict(code=CODE, result=result(), entry_point="add", time_limit_s=2.0)
    base.update(kw)
    return RewardContext(**base)


def test_pass_rate_is_the_fraction_of_tests_passed():
    assert R.pass_rate(ctx(result=result("failed", 1, 4))) == 0.25
    assert R.pass_rate(ctx(result=result("error", 0, 0))) == 0.0


def test_syntax_follows_the_sandbox_verdict():
    assert R.syntax(ctx()) == 1.0
    assert R.syntax(ctx(result=result("syntax_error", 0, 3, syntax_ok=False))) == 0.0


def test_efficiency_is_zero_unless_every_test_passed():
    assert R.efficiency(ctx(result=result("failed", 1, 2, wall=0.001))) == 0.0
    assert R.efficiency(ctx(result=result("timeout", 0, 2, wall=2.0))) == 0.0


def test_efficiency_falls_linearly_from_a_quarter_of_the_limit_to_the_limit():
    assert R.efficiency(ctx(result=result(wall=0.5))) == 1.0
    # share 0.625 -> (1 - 0.625) / 0.75 = 0.5
    assert R.efficiency(ctx(result=result(wall=1.25))) == pytest.approx(0.5)
    assert R.efficiency(ctx(result=result(wall=3.0))) == 0.0


def test_conciseness_is_smooth_in_the_length_relative_to_the_reference():
    n = R.code_length(CODE)
    assert R.conciseness(ctx(reference_length=n)) == 1.0
    assert R.conciseness(ctx(reference_length=n / 2)) == pytest.approx(math.exp(-0.75))
    assert R.conciseness(ctx(code="   \n", reference_length=n)) == 0.0
    longer = [R.conciseness(ctx(reference_length=n / f)) for f in (1.0, 1.5, 2.0, 3.0, 5.0)]
    assert longer == sorted(longer, reverse=True)


def test_format_checks_entry_point_and_chat_fence():
    assert R.format_reward(ctx()) == 1.0
    assert R.format_reward(ctx(entry_point="sub")) == 0.5
    reply = "Here:\n```python\n" + CODE + "```\n"
    assert R.format_reward(ctx(prompt_style="chat", text=reply)) == 1.0
    assert R.format_reward(ctx(prompt_style="chat", text=CODE)) == pytest.approx(2 / 3)
    assert R.format_reward(ctx(result=result(format_ok=False))) == 0.5


def test_format_of_a_stdio_program_requires_reading_input():
    assert R.format_reward(ctx(kind="stdio", code="print(sum(map(int, input().split())))")) == 1.0
    assert R.format_reward(ctx(kind="stdio", code="print(6)")) == 0.5


def test_every_dimension_stays_in_the_unit_interval():
    cases = [ctx(), ctx(result=result("failed", 0, 3, syntax_ok=False, format_ok=False, wall=9.0)),
             ctx(code="", reference_length=None), ctx(code="x" * 10_000, reference_length=1)]
    for c in cases:
        for name, fn in R.REWARDS.items():
            assert 0.0 <= fn(c) <= 1.0, name


def test_combine_is_the_weighted_mean_over_the_weight_sum():
    rewards = {"pass_rate": 0.5, "syntax": 1.0, "efficiency": 0.0, "conciseness": 1.0, "format": 1.0}
    weights = R.weights_dict(None)
    expected = (0.6 * 0.5 + 0.15 + 0.05 + 0.1) / 1.0
    assert R.combine(rewards, weights) == pytest.approx(expected)
    assert R.combine(rewards, {"pass_rate": 2.0, "syntax": 2.0}) == pytest.approx(0.75)


def test_the_dimensions_and_default_weights_are_the_config_s_reward_weights():
    from training.config import RewardWeights

    assert R.weights_dict(None) == RewardWeights().as_dict()
    assert R.DIMENSIONS == tuple(RewardWeights().as_dict())
    assert set(R.DIMENSIONS) == set(R.REWARDS)  # every dimension with a weight has a function


def test_combine_rejects_all_zero_weights():
    with pytest.raises(ValueError, match="positive sum"):
        R.combine({"pass_rate": 1.0}, {"pass_rate": 0.0})


def test_repeated_executions_are_averaged():
    runs = [ctx(result=result("failed", 1, 2)), ctx(result=result("passed", 2, 2))]
    score = R.score_candidate(runs, {"pass_rate": 1.0, "efficiency": 1.0})
    assert score.rewards == {"pass_rate": 0.75, "efficiency": 0.5}
    assert score.total == pytest.approx(0.625)


def test_an_unknown_reward_name_lists_the_valid_ones():
    with pytest.raises(ValueError, match="valid rewards: conciseness, efficiency, format, pass_rate, syntax"):
        R.get_reward("speed")
    with pytest.raises(ValueError, match="unknown reward 'speed'"):
        R.weights_dict({"speed": 1.0})


def test_a_reward_outside_the_unit_interval_is_rejected():
    R.register_reward("broken", lambda c: 1.5)
    try:
        with pytest.raises(ValueError, match="must return a value in \\[0, 1\\]"):
            R.score_candidate([ctx()], {"broken": 1.0})
    finally:
        del R.REWARDS["broken"]


def test_without_normalisation_the_total_is_the_plain_weighted_sum():
    rewards = {"pass_rate": 0.5, "syntax": 1.0}
    assert R.combine(rewards, {"pass_rate": 2.0, "syntax": 2.0}, normalize=False) == pytest.approx(3.0)


def test_group_median_length_ignores_empty_programs():
    assert R.group_median_length(["ab", "", "abcd", "abcdef"]) == 4.0
    assert R.group_median_length(["", " "]) is None


def test_format_survives_a_degenerate_program_nested_past_the_parser_limit():
    deep = "def add(a, b):\n    return a + b\nx = " + "-" * 20000 + "1\n"
    assert R.format_reward(ctx(code=deep, result=result("syntax_error", 0, 2, syntax_ok=False))) == 0.5


def test_the_soft_overlong_penalty_is_dapo_s_linear_ramp():
    from training.rewards import overlong_penalty

    assert overlong_penalty(100, max_new_tokens=512, buffer_tokens=128) == 0.0
    assert overlong_penalty(384, max_new_tokens=512, buffer_tokens=128) == 0.0
    assert overlong_penalty(448, max_new_tokens=512, buffer_tokens=128) == pytest.approx(-0.5)
    assert overlong_penalty(512, max_new_tokens=512, buffer_tokens=128) == -1.0
    assert overlong_penalty(16, max_new_tokens=16, buffer_tokens=256) == -1.0  # buffer capped at the limit
