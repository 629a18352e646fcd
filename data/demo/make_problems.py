"""Generate data/demo/problems.jsonl: small function problems built from combinable skills.

Each problem is a composition of a few parts (an aggregate, a map and a filter over a list; string
transforms; a two-argument operation and a post-operation). Held-out problems are compositions whose
parts all appear in training problems, but never in that combination, so a model can only solve them
by recombining what it learnt. Solutions are one line so that a ~1M-parameter model can learn them.

Expected outputs are computed by running the reference solution on fixed inputs, so every assertion
is right by construction. Run from the repository root:

    .venv/bin/python data/demo/make_problems.py            # writes data/demo/problems.jsonl
    .venv/bin/python -m sandbox check data/demo/problems.jsonl
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

OUT = Path(__file__).with_name("problems.jsonl")

# ---- list family: AGG(MAP(x) for x in nums if FILTER(x)) ------------------------------------------
FILTERS = {  # name: (condition clause, words)
    "all": ("", "numbers"),
    "even": (" if x % 2 == 0", "even numbers"),
    "odd": (" if x % 2 == 1", "odd numbers"),
    "positive": (" if x > 0", "positive numbers"),
    "negative": (" if x < 0", "negative numbers"),
}
MAPS = {  # name: (expression, words before the filter words)
    "id": ("x", ""),
    "squares": ("x * x", "squares of the "),
    "doubled": ("2 * x", "doubles of the "),
    "negated": ("-x", "negations of the "),
}
AGGS = {  # name: (body template, docstring template, maps allowed)
    "sum": ("sum({e} for x in nums{c})", "Return the sum of the {m}{f} in nums.", MAPS),
    "list": ("[{e} for x in nums{c}]", "Return a list of the {m}{f} in nums, in order.", MAPS),
    "count": ("len([x for x in nums{c}])", "Return how many {f} are in nums.", ("id",)),
    "max": ("max([{e} for x in nums{c}], default=0)",
            "Return the largest of the {m}{f} in nums, or 0 if there are none.", ("id", "squares")),
}
LIST_INPUTS = ([1, 2, 3, 4, 5, 6], [-3, -2, 0, 7, 8], [], [10, -1, 5, -4, 3])

# ---- string family: s followed by transforms ------------------------------------------------------
TRANSFORMS = {  # name: (suffix applied to the expression, words)
    "reversed": ("[::-1]", "reversed"),
    "upper": (".upper()", "converted to upper case"),
    "lower": (".lower()", "converted to lower case"),
    "stripped": (".strip()", "with surrounding spaces removed"),
    "swapped": (".swapcase()", "with the case of every letter swapped"),
}
STRING_PAIRS = [("reversed", "upper"), ("reversed", "lower"), ("stripped", "upper"), ("stripped", "reversed"),
                ("upper", "reversed"), ("lower", "stripped"), ("swapped", "reversed"), ("stripped", "swapped"),
                ("lower", "reversed"), ("stripped", "lower"), ("swapped", "stripped"), ("reversed", "swapped")]
CHAR_PREDICATES = {  # name: (condition on c, words)
    "vowels": ('c in "aeiou"', "vowels (a, e, i, o, u)"),
    "digits": ("c.isdigit()", "digits"),
    "uppers": ("c.isupper()", "upper-case letters"),
    "spaces": ('c == " "', "spaces"),
    "lowers": ("c.islower()", "lower-case letters"),
}
CHAR_OPS = {  # name: (body template, docstring template)
    "count": ("sum(1 for c in s if {p})", "Return how many {w} are in s."),
    "keep": ('"".join(c for c in s if {p})', "Return s with only its {w} kept, in order."),
    "drop": ('"".join(c for c in s if not {p})', "Return s with all its {w} removed."),
}
STRING_INPUTS = ("Hello World", "  abc DEF 123  ", "", "Python3 is Fun")

# ---- two-argument family: POST(OP(a, b)) ---------------------------------------------------------
OPS = {  # name: (expression, words)
    "add": ("a + b", "the sum of a and b"),
    "sub": ("a - b", "a minus b"),
    "mul": ("a * b", "the product of a and b"),
    "max": ("max(a, b)", "the larger of a and b"),
    "min": ("min(a, b)", "the smaller of a and b"),
    "absdiff": ("abs(a - b)", "the absolute difference of a and b"),
}
POSTS = {  # name: (template, words)
    "": ("{x}", "{w}"),
    "squared": ("({x}) ** 2", "the square of {w}"),
    "doubled": ("2 * ({x})", "twice {w}"),
}
PAIR_INPUTS = ((3, 5), (7, -2), (0, 4), (-6, -1))

# Held out: every part appears in training, the combination does not.
HELDOUT = {
    "sum_squares_odd", "sum_negated_positive", "sum_doubled_negative", "list_squares_even",
    "list_doubled_odd", "list_negated_negative", "list_squares_positive", "count_negative",
    "max_squares_odd", "sum_doubled_even", "list_negated_all",
    "upper_reversed_str", "swapped_stripped_str", "lower_reversed_str",
    "keep_uppers", "count_spaces", "drop_vowels", "keep_lowers",
    "sub_squared", "max_doubled", "absdiff_squared", "min_squared", "add_doubled",
}


def _problem(pid: str, signature: str, doc: str, body: str, entry: str, calls: list[str], tags: list[str]) -> dict:
    prompt = f'def {signature}:\n    """{doc}"""\n'
    reference = f"{prompt}    return {body}\n"
    namespace: dict = {}
    exec(reference, namespace)  # trusted: our own reference, to compute the expected outputs
    tests = [f"assert {entry}({c}) == {namespace[entry](*eval(f'({c},)'))!r}" for c in calls]
    return {"id": pid, "kind": "function", "prompt": prompt, "entry_point": entry, "tests": tests,
            "reference_solution": reference, "split": "heldout" if entry in HELDOUT else "train",
            "tags": tags}


def build() -> list[dict]:
    problems = []
    for agg, (tmpl, doc, maps) in AGGS.items():
        for m in maps:
            for f, (cond, fwords) in FILTERS.items():
                expr, mwords = MAPS[m]
                name = f"{agg}_{f}" if m == "id" else f"{agg}_{m}_{f}"
                problems.append(_problem(
                    name.replace("_", "-"), f"{name}(nums)", doc.format(m=mwords, f=fwords),
                    tmpl.format(e=expr, c=cond), name, [repr(x) for x in LIST_INPUTS], ["lists", agg, m, f]))
    for parts in [(t,) for t in TRANSFORMS] + STRING_PAIRS:
        name = "_".join(reversed(parts)) + "_str" if len(parts) == 2 else f"{parts[0]}_str"
        body = "s" + "".join(TRANSFORMS[t][0] for t in parts)
        words = ", then ".join(TRANSFORMS[t][1] for t in parts)
        problems.append(_problem(name.replace("_", "-"), f"{name}(s)", f"Return s {words}.", body, name,
                                 [repr(x) for x in STRING_INPUTS], ["strings", *parts]))
    for op, (tmpl, doc) in CHAR_OPS.items():
        for p, (cond, words) in CHAR_PREDICATES.items():
            name = f"{op}_{p}"
            problems.append(_problem(name.replace("_", "-"), f"{name}(s)", doc.format(w=words),
                                     tmpl.format(p=cond), name, [repr(x) for x in STRING_INPUTS],
                                     ["strings", op, p]))
    for op, (expr, words) in OPS.items():
        for post, (tmpl, pwords) in POSTS.items():
            name = f"{op}_{post}" if post else f"{op}_of"
            problems.append(_problem(name.replace("_", "-"), f"{name}(a, b)",
                                     "Return " + pwords.format(w=words) + ".", tmpl.format(x=expr), name,
                                     [f"{a}, {b}" for a, b in PAIR_INPUTS], ["arithmetic", op, post or "plain"]))
    return problems


def check_heldout_parts(problems: list[dict]) -> None:
    """Every tag (skill) of a held-out problem must appear in some training problem."""
    train_tags = {t for p in problems if p["split"] == "train" for t in p["tags"]}
    for p in problems:
        missing = set(p["tags"]) - train_tags
        if p["split"] == "heldout" and missing:
            raise SystemExit(f"held-out problem {p['id']} uses parts never trained: {sorted(missing)}")
    unknown = HELDOUT - {p["entry_point"] for p in problems}
    if unknown:
        raise SystemExit(f"HELDOUT names that are not problems: {sorted(unknown)}")


def main() -> None:
    problems = build()
    check_heldout_parts(problems)
    random.Random(0).shuffle(problems)
    with OUT.open("w") as f:
        for p in problems:
            f.write(json.dumps(p) + "\n")
    n_held = sum(p["split"] == "heldout" for p in problems)
    print(f"wrote {len(problems)} problems ({len(problems) - n_held} train, {n_held} heldout) to {OUT}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
