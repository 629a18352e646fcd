"""The demo problem set's held-out split: compositions of parts that training teaches, never copies."""

import json
from collections import Counter
from pathlib import Path

from sandbox import Runner
from training.tiny_model import completion_of, load_problem_file, warmup_examples

DEMO = Path(__file__).resolve().parents[2] / "data" / "demo" / "problems.jsonl"


def rows():
    return [json.loads(line) for line in DEMO.read_text().splitlines()]


def test_every_part_of_a_heldout_problem_is_trained_in_at_least_three_other_combinations():
    data = rows()
    uses = Counter((r["tags"][0], t) for r in data if r["split"] == "train" for t in r["tags"][1:])
    heldout = [r for r in data if r["split"] == "heldout"]
    assert len(heldout) >= 30
    for r in heldout:
        family, parts = r["tags"][0], r["tags"][1:]
        assert len(parts) >= 2, r["id"]  # a combination, not a single skill
        assert all(uses[(family, t)] >= 3 for t in parts), (r["id"], {t: uses[(family, t)] for t in parts})


def test_no_heldout_problem_shares_a_prompt_body_or_entry_point_with_a_training_problem():
    data = rows()
    train = [r for r in data if r["split"] == "train"]
    for key in ("prompt", "entry_point", "reference_solution"):
        seen = {r[key] for r in train}
        assert not [r["id"] for r in data if r["split"] == "heldout" and r[key] in seen], key
    train_tag_sets = {frozenset(r["tags"]) for r in train}
    assert not [r["id"] for r in data if r["split"] == "heldout" and frozenset(r["tags"]) in train_tag_sets]


def test_every_family_has_heldout_problems():
    data = rows()
    families = Counter(r["tags"][0] for r in data if r["split"] == "heldout")
    assert set(families) == {r["tags"][0] for r in data}


def test_the_warm_start_never_sees_a_heldout_prompt_and_mixes_one_right_body_with_failing_ones():
    problems = load_problem_file(DEMO)
    train = [p for p in problems if p.split == "train"][:12]
    heldout = [p for p in problems if p.split == "heldout"][:3]
    with Runner(workers=2) as runner:
        examples, stats = warmup_examples(train + heldout, runner, correct_copies=1, wrong_per_problem=3)
    assert not {p.prompt for p in heldout} & {prompt for prompt, _ in examples}
    assert stats["problems"] == 12
    for p in train:
        bodies = [body for prompt, body in examples if prompt == p.prompt]
        assert bodies.count(completion_of(p)) == 1
        assert 1 <= len(bodies) - 1 <= 3 and len(set(bodies)) == len(bodies)


def test_no_training_solution_passes_a_heldout_problems_tests():
    data = rows()
    train_bodies = {r["reference_solution"][len(r["prompt"]):] for r in data if r["split"] == "train"}
    for r in data:
        if r["split"] != "heldout":
            continue
        for body in train_bodies:
            ns: dict = {}
            try:
                exec(r["prompt"] + body, ns)  # trusted: the repo's own reference solutions
                for t in r["tests"]:
                    exec(t, ns)
            except Exception:
                continue
            raise AssertionError(f"{r['id']}: the training body {body.strip()!r} passes its tests")
