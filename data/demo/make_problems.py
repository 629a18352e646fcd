"""Generate data/demo/problems.jsonl: small function problems built from combinable skills.

Four families, each a grid of parts: a list family AGG(MAP(x) for x in nums if FILTER(x)), a string
family of chained transforms, a character family OP(PREDICATE(c) for c in s) and a two-argument family
POST(OP(a, b)). A held-out problem is a grid cell whose parts all appear in many training problems,
but never in that combination (a diagonal of the grid: the cells whose part indices sum to 0 mod 5;
both orders of a string pair share a cell, since many transforms commute), so a model can only
solve it by recombining what it learnt. Solutions are one line so that a
~1M-parameter model can learn them.

Expected outputs are computed by running the reference solution on fixed inputs, so every assertion
is right by construction. Run from the repository root:

    .venv/bin/python data/demo/make_problems.py            # writes data/demo/problems.jsonl
    .venv/bin/python -m sandbox check data/demo/problems.jsonl
"""

from __future__ import annotations

import json
import random
import sys
from collections import Counter
from pathlib import Path

OUT = Path(__file__).with_name("problems.jsonl")
HELDOUT_EVERY = 5  # one grid cell in five is held out
MIN_TRAIN_USES = 3  # every part of a held-out problem appears in at least this many training problems

# ---- list family: AGG(MAP(x) for x in nums if FILTER(x)) ------------------------------------------
FILTERS = {  # name: (condition clause, words)
    "all": ("", "numbers"),
    "even": (" if x % 2 == 0", "even numbers"),
    "odd": (" if x % 2 == 1", "odd numbers"),
    "positive": (" if x > 0", "positive numbers"),
    "negative": (" if x < 0", "negative numbers"),
    "nonzero": (" if x != 0", "non-zero numbers"),
    "threes": (" if x % 3 == 0", "multiples of three"),
}
MAPS = {  # name: (expression, words before the filter words)
    "id": ("x", ""),
    "squares": ("x * x", "squares of the "),
    "doubled": ("2 * x", "doubles of the "),
    "negated": ("-x", "negations of the "),
    "abs": ("abs(x)", "absolute values of the "),
    "cubes": ("x ** 3", "cubes of the "),
}
AGGS = {  # name: (body template, docstring template, maps allowed)
    "sum": ("sum({e} for x in nums{c})", "Return the sum of the {m}{f} in nums.", tuple(MAPS)),
    "list": ("[{e} for x in nums{c}]", "Return a list of the {m}{f} in nums, in order.", tuple(MAPS)),
    "count": ("len([x for x in nums{c}])", "Return how many {f} are in nums.", ("id",)),
    "max": ("max([{e} for x in nums{c}], default=0)",
            "Return the largest of the {m}{f} in nums, or 0 if there are none.", ("id", "squares", "negated", "abs")),
    "min": ("min([{e} for x in nums{c}], default=0)",
            "Return the smallest of the {m}{f} in nums, or 0 if there are none.", ("id", "doubled", "negated", "abs")),
}
LIST_INPUTS = ([1, 2, 3, 4, 5, 6], [-3, -2, 0, 7, 8], [], [10, -1, 5, -4, 3])

# ---- string family: s followed by transforms ------------------------------------------------------
TRANSFORMS = {  # name: (suffix applied to the expression, words, changes letter case)
    "reversed": ("[::-1]", "reversed", False),
    "upper": (".upper()", "converted to upper case", True),
    "lower": (".lower()", "converted to lower case", True),
    "stripped": (".strip()", "with surrounding spaces removed", False),
    "swapped": (".swapcase()", "with the case of every letter swapped", True),
    "head": ("[:3]", "cut to its first three characters", False),
    "tail": ("[1:]", "without its first character", False),
}
CHAR_PREDICATES = {  # name: (condition on c, words)
    "vowels": ('c in "aeiou"', "vowels (a, e, i, o, u)"),
    "digits": ("c.isdigit()", "digits"),
    "uppers": ("c.isupper()", "upper-case letters"),
    "spaces": ('c == " "', "spaces"),
    "lowers": ("c.islower()", "lower-case letters"),
    "letters": ("c.isalpha()", "letters"),
}
CHAR_OPS = {  # name: (body template, docstring template)
    "count": ("sum(1 for c in s if {p})", "Return how many {w} are in s."),
    "keep": ('"".join(c for c in s if {p})', "Return s with only its {w} kept, in order."),
    "drop": ('"".join(c for c in s if not {p})', "Return s with all its {w} removed."),
    "any": ("any({p} for c in s)", "Return True if s has any {w}, else False."),
    "all": ("all({p} for c in s)", "Return True if every character of s is one of the {w}, else False."),
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
    "negated": ("-({x})", "the negation of {w}"),
    "plus1": ("({x}) + 1", "one more than {w}"),
    "halved": ("({x}) // 2", "half of {w}, rounded down"),
}
PAIR_INPUTS = ((3, 5), (7, -2), (0, 4), (-6, -1))


# Extra inputs the tests may use so that no two problems of a family pass the same tests, and probes
# (many more inputs) that find problems which are the same function written two ways (abs(x) of the
# positive numbers is x; a sum over the non-zero numbers is the sum over all): only the first is kept.
INPUT_POOL = {
    "nums": [[-3, 0], [0, 3], [-7, 4, -9, 1], [-5, -3, -1], [6, 0, -6, 9, -2], [2, 4], [-8, 3, -1, 0, 5]],
    "s": ["xyz", "ABC", "a1 b2", "   ", "Do 2 IT", "oo ee", "qQ9 ", "aeiou", "42", "Hi"],
    "ab": [(5, 3), (-4, 9), (2, 2), (-3, -8), (9, 4), (1, -1)],
}
PROBES = {
    "nums": [[random.Random(i).randint(-9, 9) for _ in range(random.Random(-i).randint(0, 7))] for i in range(60)],
    "s": ["".join(random.Random(i).choice("aAeE iIxXyZ09 .") for _ in range(random.Random(-i).randint(0, 9)))
          for i in range(60)],
    "ab": [(random.Random(i).randint(-9, 9), random.Random(-i - 1).randint(-9, 9)) for i in range(60)],
}
DEFAULT_INPUTS = {"nums": list(LIST_INPUTS), "s": list(STRING_INPUTS), "ab": list(PAIR_INPUTS)}
MAX_TESTS = 5


def _function(spec: dict):
    namespace: dict = {}
    exec(spec["reference"], namespace)  # trusted: our own reference, to compute the expected outputs
    return namespace[spec["entry"]]


def _call(fn, kind: str, x):
    return fn(*x) if kind == "ab" else fn(x)


def _choose_inputs(fns: list, i: int, kind: str, entries: list[str]) -> list:
    """4 or 5 inputs (greedily, the most telling first; the default inputs win ties) on which problem
    ``i`` differs from every other problem of its family, so no other problem's solution passes."""
    outs = {repr(x): [repr(_call(f, kind, x)) for f in fns] for x in DEFAULT_INPUTS[kind] + INPUT_POOL[kind]}
    others = set(range(len(fns))) - {i}
    chosen: list = []
    pool = DEFAULT_INPUTS[kind] + INPUT_POOL[kind]
    while len(chosen) < MAX_TESTS and (others or len(chosen) < 4):
        def telling(x):
            return {j for j in others if outs[repr(x)][j] != outs[repr(x)][i]}
        best = max(pool, key=lambda x: (len(telling(x)), x in DEFAULT_INPUTS[kind]))
        chosen.append(best)
        pool.remove(best)
        others -= telling(best)
    if others:
        raise SystemExit(f"no {MAX_TESTS} inputs tell {entries[i]} from {entries[min(others)]}; extend INPUT_POOL")
    order = DEFAULT_INPUTS[kind] + INPUT_POOL[kind]
    return sorted(chosen, key=lambda x: next(k for k, y in enumerate(order) if y == x))


def _spec(name: str, args: str, doc: str, body: str, family: str, tags: list[str], cell: tuple[int, ...]) -> dict:
    prompt = f'def {name}({args}):\n    """{doc}"""\n'
    kind = {"nums": "nums", "s": "s", "a, b": "ab"}[args]
    heldout = len(cell) > 1 and sum(cell) % HELDOUT_EVERY == 0
    return {"entry": name, "prompt": prompt, "reference": f"{prompt}    return {body}\n", "kind": kind,
            "tags": [family, *tags], "split": "heldout" if heldout else "train"}


def _problems(specs: list[dict]) -> list[dict]:
    """Drop problems that compute the same function as an earlier one, then write the tests."""
    kept: dict[tuple, dict] = {}
    for sp in specs:
        fn = _function(sp)
        behaviour = (sp["tags"][0], tuple(repr(_call(fn, sp["kind"], x)) for x in PROBES[sp["kind"]]))
        kept.setdefault(behaviour, sp)
    out = []
    for family in dict.fromkeys(sp["tags"][0] for sp in specs):
        group = [sp for sp in kept.values() if sp["tags"][0] == family]
        fns = [_function(sp) for sp in group]
        for i, (sp, fn) in enumerate(zip(group, fns)):
            inputs = _choose_inputs(fns, i, sp["kind"], [g["entry"] for g in group])
            calls = [", ".join(map(repr, x)) if sp["kind"] == "ab" else repr(x) for x in inputs]
            tests = [f"assert {sp['entry']}({c}) == {_call(fn, sp['kind'], x)!r}" for c, x in zip(calls, inputs)]
            out.append({"id": sp["entry"].replace("_", "-"), "kind": "function", "prompt": sp["prompt"],
                        "entry_point": sp["entry"], "tests": tests, "reference_solution": sp["reference"],
                        "split": sp["split"], "tags": sp["tags"]})
    return out


def build() -> list[dict]:
    specs = []
    for ia, (agg, (tmpl, doc, maps)) in enumerate(AGGS.items()):
        for m in maps:
            for i_f, (f, (cond, fwords)) in enumerate(FILTERS.items()):
                expr, mwords = MAPS[m]
                name = f"{agg}_{f}" if m == "id" else f"{agg}_{m}_{f}"
                specs.append(_spec(name, "nums", doc.format(m=mwords, f=fwords), tmpl.format(e=expr, c=cond),
                                   "lists", [agg, m, f], (ia, list(MAPS).index(m), i_f)))
    names = list(TRANSFORMS)
    chains = [(t,) for t in names] + [(t1, t2) for t1 in names for t2 in names
                                       if t1 != t2 and not (TRANSFORMS[t1][2] and TRANSFORMS[t2][2])]
    for parts in chains:
        name = "_".join(reversed(parts)) + "_str" if len(parts) == 2 else f"{parts[0]}_str"
        body = "s" + "".join(TRANSFORMS[t][0] for t in parts)
        words = ", then ".join(TRANSFORMS[t][1] for t in parts)
        specs.append(_spec(name, "s", f"Return s {words}.", body, "strings", list(parts),
                           tuple(names.index(t) for t in parts)))
    for io, (op, (tmpl, doc)) in enumerate(CHAR_OPS.items()):
        for ip, (p, (cond, words)) in enumerate(CHAR_PREDICATES.items()):
            specs.append(_spec(f"{op}_{p}", "s", doc.format(w=words), tmpl.format(p=cond), "chars", [op, p],
                               (io, ip)))
    for io, (op, (expr, words)) in enumerate(OPS.items()):
        for ip, (post, (tmpl, pwords)) in enumerate(POSTS.items()):
            name = f"{op}_{post}" if post else f"{op}_of"
            specs.append(_spec(name, "a, b", "Return " + pwords.format(w=words) + ".", tmpl.format(x=expr),
                               "arithmetic", [op, post or "plain"], (io, ip)))
    return _problems(specs)


def check_heldout_parts(problems: list[dict]) -> None:
    """Every part of a held-out problem appears in at least MIN_TRAIN_USES training problems of its
    family, and no held-out reference body is a training one."""
    uses = Counter((p["tags"][0], t) for p in problems if p["split"] == "train" for t in p["tags"][1:])
    train_bodies = {p["reference_solution"][len(p["prompt"]):] for p in problems if p["split"] == "train"}
    for p in problems:
        if p["split"] != "heldout":
            continue
        rare = [t for t in p["tags"][1:] if uses[(p["tags"][0], t)] < MIN_TRAIN_USES]
        if rare:
            raise SystemExit(f"held-out problem {p['id']} uses parts trained fewer than {MIN_TRAIN_USES} times: {rare}")
        if p["reference_solution"][len(p["prompt"]):] in train_bodies:
            raise SystemExit(f"held-out problem {p['id']} has a training problem's body")


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
