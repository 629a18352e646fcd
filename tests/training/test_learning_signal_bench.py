"""benchmarks/learning_signal_bench.py's accounting and table, from canned run results (no training)."""

from benchmarks import learning_signal_bench as bench


def _step(step_s, *, candidates=128, zero_var=2, rollout_s=1.0, tokens=5000, kept=None, rounds=None):
    m = {"time/step_s": step_s, "time/rollout_s": rollout_s, "tokens_per_s": tokens / rollout_s,
         "candidates": candidates, "zero_variance_groups": zero_var}
    if kept is not None:
        m |= {"sampling/groups_kept": kept, "sampling/rounds": rounds, "sampling/groups_sampled": candidates // 16}
    return m


def _result(steps, evals, dropped=None):
    return {"step_metrics": steps, "evals": [{"step": s, "pass@1": v} for s, v in evals], "wall_s": 99.0,
            "before": evals[0][1], "after": evals[-1][1], "dropped": dropped}


def test_the_plain_loop_counts_groups_less_zero_variance_ones_and_its_own_seconds():
    result = _result([_step(2.0, zero_var=3), _step(3.0, zero_var=1)], [(0, 0.3), (1, 0.4), (2, 0.5)])
    x = bench.summarize_arm(result, candidates_per_problem=16, repeats=2, dynamic=False, probe=None)
    assert x["points"] == [(0.0, 0.3), (2.0, 0.4), (5.0, 0.5)]
    assert x["train_s"] == 5.0 and x["probe_s"] == 0.0
    assert (x["sampled_groups"], x["informative"], x["zero_variance"]) == (16, 12, 4)
    assert x["executions"] == 2 * 128 * 2 and x["tokens"] == 10000


def test_a_probed_dynamic_arm_is_charged_the_probe_and_counts_kept_groups():
    probe = {"wall_s": 10.0, "executions": 800}
    steps = [_step(4.0, candidates=192, zero_var=5, kept=7, rounds=2), _step(3.0, candidates=128, zero_var=0,
                                                                          kept=8, rounds=1)]
    result = _result(steps, [(0, 0.3), (2, 0.6)], dropped={"unsolved": 3, "solved": 2})
    x = bench.summarize_arm(result, candidates_per_problem=16, repeats=1, dynamic=True, probe=probe)
    assert x["points"] == [(10.0, 0.3), (17.0, 0.6)]
    assert (x["loop_s"], x["probe_s"], x["train_s"]) == (7.0, 10.0, 17.0)
    assert (x["sampled_groups"], x["informative"], x["rounds_mean"]) == (20, 15, 1.5)
    assert x["probe_executions"] == 800 and x["executions"] == 320


def test_the_budget_takes_the_last_evaluation_at_or_before_it():
    points = [(0.0, 0.3), (10.0, 0.4), (20.0, 0.5)]
    assert bench.pass_at_budget(points, 19.9) == (10.0, 0.4)
    assert bench.pass_at_budget(points, 20.0) == (20.0, 0.5)
    assert bench.pass_at_budget([(12.0, 0.3)], 10.0) is None
    assert bench.first_reaching(points, 0.45) == 20.0 and bench.first_reaching(points, 0.6) is None


def _canned_runs():
    probe = {"wall_s": 10.0, "sampling_s": 8.0, "samples": 8, "executions": 1256,
             "summary": {"problems": 157, "unsolved": 20, "solved": 30, "mean_pass_rate": 0.45}}
    a = bench.summarize_arm(_result([_step(2.0), _step(2.0)], [(0, 0.3), (2, 0.5)]),
                            candidates_per_problem=16, repeats=1, dynamic=False, probe=None)
    d = bench.summarize_arm(_result([_step(5.0, kept=8, rounds=2), _step(5.0, kept=8, rounds=2)],
                                    [(0, 0.3), (1, 0.35), (2, 0.45)], dropped={"unsolved": 20, "solved": 30}),
                            candidates_per_problem=16, repeats=1, dynamic=True, probe=probe)
    return probe, a, d


def _render(runs, probe):
    cfg = bench.demo_config("/m", "p.jsonl", ["train.steps=2", "train.eval_every=1"])
    return bench.markdown(runs, cfg=cfg, build={"architecture": "Qwen3ForCausalLM", "parameters": 1000},
                          probe=probe, threads=1, load=(0.5, 0.7), command="python benchmarks/learning_signal_bench.py",
                          machine="x86_64 with 2 CPUs", train_problems=157)


def test_the_tables_render_every_arm_with_its_budget_and_reach():
    probe, a, d = _canned_runs()
    text = _render([a | {"arm": "a", "seed": 0}, d | {"arm": "d", "seed": 0}], probe)
    assert "Budget T = (a)'s total training time on the same seed: 4 s (seed 0)" in text
    assert "| (a) today's loop | 0 | 2 | 4 | 0.300 → 0.500 | +20.0 | 0.500 (4 s) | 4 s |" in text
    # (d) starts after the 10 s probe, past T: no evaluation within the budget, and it never reaches 0.5.
    assert "| (d) probe filter + dynamic sampling | 0 | 2 | 20 (10 probe) | 0.300 → 0.450 | +15.0 | " \
           "— (no evaluation by T) | not reached |" in text
    assert "the filter left 107 of 157 train problems (dropped 20 unsolved, 30 solved)" in text
    assert "| (d) probe filter + dynamic sampling | 16 | 16 (100%) | 2.00 | 10,000 | 1,512 | 1.25 | 625 | 94 |" in text
    assert "Mean over" not in text  # one seed: nothing to average


def test_two_seeds_are_averaged_per_arm_each_against_its_own_seed_s_budget():
    probe, a, d = _canned_runs()
    a1 = bench.summarize_arm(_result([_step(10.0), _step(10.0)], [(0, 0.3), (1, 0.4), (2, 0.7)]),
                             candidates_per_problem=16, repeats=1, dynamic=False, probe=None)
    runs = [a | {"arm": "a", "seed": 0}, d | {"arm": "d", "seed": 0}, a1 | {"arm": "a", "seed": 1},
            d | {"arm": "d", "seed": 1}]
    text = _render(runs, probe)
    assert "4 s (seed 0), 20 s (seed 1)" in text
    # seed 1's budget of 20 s reaches (d)'s last evaluation; its target 0.7 is never reached.
    assert "| (d) probe filter + dynamic sampling | 1 | 2 | 20 (10 probe) | 0.300 → 0.450 | +15.0 | 0.450 (20 s) | " \
           "not reached |" in text
    assert "| (a) today's loop | 12 | 0.600 | 0.600 | +30.0 |" in text
    assert "| (d) probe filter + dynamic sampling | 20 | — | 0.450 | +15.0 |" in text  # no point by T on seed 0
    assert "largest drop between two consecutive evaluations of one run is 0.0 points" in text
    assert "| (a) today's loop | 32 | 24 (75%) | 1.00 | 20,000 | 512 |" in text
    assert "**Seen in 0 of 2 runs** ((d) seed 0: not reached vs (a)'s 4 s; (d) seed 1: not reached vs (a)'s 20 s)" \
        in text


def test_the_expectation_line_counts_dynamic_runs_that_beat_a_to_its_final():
    probe, a, d = _canned_runs()
    fast = bench.summarize_arm(_result([_step(1.0, kept=8, rounds=1), _step(1.0, kept=8, rounds=1)],
                                       [(0, 0.3), (1, 0.5), (2, 0.5)]),
                               candidates_per_problem=16, repeats=1, dynamic=True, probe=None)
    text = _render([a | {"arm": "a", "seed": 0}, fast | {"arm": "c", "seed": 0}, d | {"arm": "d", "seed": 0}], probe)
    assert "**Seen in 1 of 2 runs** ((c) seed 0: 1 s vs (a)'s 4 s; (d) seed 0: not reached vs (a)'s 4 s)" in text


def test_render_rewrites_the_section_from_a_saved_run_without_training(tmp_path, capsys):
    import json

    probe, a, d = _canned_runs()
    saved = {"runs": [a | {"arm": "a", "seed": 0}, d | {"arm": "d", "seed": 0}], "probe": probe,
             "cfg": bench.demo_config("/m", "p.jsonl", ["train.steps=2", "train.eval_every=1"]),
             "build": {"architecture": "Qwen3ForCausalLM", "parameters": 1000}, "threads": 1, "load": [0.5, 0.7],
             "command": "python benchmarks/learning_signal_bench.py --seeds 0", "machine": "x86_64 with 2 CPUs",
             "train_problems": 157, "date": "2026-12-01 19:39"}
    path = tmp_path / "run.json"
    path.write_text(json.dumps(saved))
    assert bench.main(["--render", str(path), "--no-write"]) == 0
    out = capsys.readouterr().out
    assert "`python benchmarks/learning_signal_bench.py --seeds 0` on x86_64 with 2 CPUs" in out
    assert "load average 0.5 before, 0.7 after), torch threads 1, 2026-12-01 19:39." in out
    assert "| (a) today's loop | 0 | 2 | 4 | 0.300 → 0.500 | +20.0 | 0.500 (4 s) | 4 s |" in out
