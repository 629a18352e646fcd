"""Reward normalization (issue #29 item 3): does ``reward.normalize: per_component`` (GDPO-style) buy more
held-out pass@1 than ``sum`` at an equal number of steps?

    python benchmarks/normalize_bench.py [--model DIR] [--steps 40] [--seeds 0,1] [--sets demo,stdio]
        [--eval-samples 8] [--threads 1] [--no-write]

On the warm-started tiny Qwen3 model (built as ``benchmarks/learning_demo.py`` builds it, unless
``--model`` names one) and the CPU demo config (``learning_demo.DEMO_CONFIG``), each run in its own
process, the same ``--steps`` for every run, once per ``--seeds`` value (``train.seed``), on two problem
sets of different shape:

- ``demo``: data/demo/problems.jsonl, function problems (each test an assertion on a call);
- ``stdio``: the same functions as stdio programs (``stdio_problems``): each assertion becomes a test case
  whose input is the call's arguments and whose expected output is the value's ``repr``, run as its own
  process and compared by tokens. The prompt starts with a harness (``HARNESS``) that, once the program's
  module code has run, reads the arguments from stdin and prints the function's result, so a completion is
  still a function body; but the pass rate, efficiency (a process per case) and format (stdin use)
  dimensions are the stdio harness's. Its model is warm-started the same way on the same train bodies, each
  behind the harness line (``stdio_model``, or ``--stdio-model``).

Reported per set and setting: held-out pass@1 at step 0 and after the last step (the run's own ``eval``
events: ``train.eval_samples`` samples per held-out problem, unbiased estimator) and the gain, per seed and
averaged. Writes the ``reward-normalize`` section of RESULTS.md.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import platform
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.learning_demo import DEMO_PROBLEMS, _child, demo_config, tiny_model, warm_start  # noqa: E402

MODES = ("sum", "per_component")
SETS = ("demo", "stdio")
HARNESS = ("import sys, ast; sys.setprofile(lambda f, e, a: e == 'return' and f.f_code.co_name == '<module>' "
           "and (sys.setprofile(None), print(repr({name}(*ast.literal_eval(sys.stdin.read()))))))\n")
"""A stdio problem's prompt begins with this line: when the program's module code returns (after the function
the model completes is defined), call it on stdin's argument tuple and print its ``repr``. (``atexit`` would not
do: the sandbox's harness ends a program with ``os._exit``. One line: a longer preamble derails the tiny model,
which was warm-started on prompts that begin at the ``def``.)"""


def stdio_problems(src: Path, dst: Path) -> int:
    """Write ``src``'s function problems (tests ``assert f(literals) == literal``) as stdio problems to ``dst``;
    returns how many were written (a problem with any other kind of test is left out)."""
    out = []
    for line in src.read_text().splitlines():
        p = json.loads(line)
        cases = []
        for test in p.get("tests", []):
            node = ast.parse(test).body[0]
            try:
                call, expected = node.test.left, node.test.comparators[0]
                args = tuple(ast.literal_eval(a) for a in call.args)
                cases.append({"input": repr(args) + "\n", "output": repr(ast.literal_eval(expected)) + "\n"})
            except (AttributeError, IndexError, ValueError, SyntaxError):
                cases = []
                break
        if p.get("kind") != "function" or not cases:
            continue
        harness = HARNESS.format(name=p["entry_point"])
        reference = p.get("reference_solution")
        out.append({"id": p["id"], "kind": "stdio", "prompt": harness + p["prompt"], "test_cases": cases,
                    "checker": "tokens", "split": p.get("split", "train"), "tags": p.get("tags", []),
                    **({"reference_solution": harness + reference} if reference else {})})
    dst.write_text("".join(json.dumps(p) + "\n" for p in out))
    return len(out)


def stdio_model(out: Path, threads: int) -> str:
    """The tiny Qwen3 model warm-started as ``learning_demo`` warm-starts it, on the demo set's train bodies,
    but with each prompt behind the stdio ``HARNESS`` line, as the stdio set's prompts are (a model warmed on
    bare ``def`` prompts mostly writes broken code after that line). The warm start's examples come from
    ``training.tiny_model.warmup_examples`` with the harness put in front, for this build only."""
    import torch

    from training import tiny_model as tm

    torch.set_num_threads(threads)
    original = tm.warmup_examples

    def behind_the_harness(problems, runner, **kwargs):
        examples, stats = original(problems, runner, **kwargs)
        names = {p.prompt: p.entry_point for p in problems}
        return [(HARNESS.format(name=names[prompt]) + prompt, body) for prompt, body in examples], stats

    tm.warmup_examples = behind_the_harness
    try:
        print("[normalize-bench] building the tiny model warm-started on stdio prompts ...", file=sys.stderr,
              flush=True)
        return str(tm.build_tiny_model(out, warmup_problems=DEMO_PROBLEMS, seed=0, arch="qwen3"))
    finally:
        tm.warmup_examples = original


def markdown(rows: list[dict], cfg: dict, build: dict, load: tuple[float, float], threads: int, command: str,
             sizes: dict[str, int], heldout: int) -> str:
    s, p = cfg["sampling"], cfg["ppo"]
    lines = [
        "## Reward normalization: sum vs per_component (held-out gain at equal steps)",
        "",
        f"`{command}` on {platform.machine()} ({os.cpu_count()} cores, torch threads {threads}, load "
        f"{load[0]:.1f} → {load[1]:.1f}); tiny Qwen3 model{warm_start(build)}. Each run: "
        f"{cfg['train']['steps']} steps of {s['problems_per_step']} problems × {s['candidates_per_problem']} "
        f"candidates, {s['max_new_tokens']} new tokens, lr {p['learning_rate']}, {p['advantage']}; held-out pass@1 "
        f"from {cfg['train']['eval_samples']} samples per held-out problem at step 0 and at the end. Sets: demo "
        f"({sizes['demo']} function problems) and stdio ({sizes['stdio']}: the same functions as stdio programs, "
        "its model warm-started behind the stdio harness line; see the script's docstring).",
        "",
        "| set | reward.normalize | seed | pass@1 before | after | gain (points) | train reward first → last |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['set']} | {r['normalize']} | {r['seed']} | {r['before']:.3f} | {r['after']:.3f} | "
                     f"{100 * (r['after'] - r['before']):+.1f} | {r['reward_first']:.3f} → {r['reward_last']:.3f} |")
    lines += ["", "| set | reward.normalize | mean gain (points) | seeds |", "|---|---|---|---|"]
    for name in dict.fromkeys(r["set"] for r in rows):
        for mode in MODES:
            gains = [100 * (r["after"] - r["before"]) for r in rows if r["set"] == name and r["normalize"] == mode]
            if gains:
                lines.append(f"| {name} | {mode} | {statistics.fmean(gains):+.1f} | {len(gains)} |")
    step = 100 / (cfg["train"]["eval_samples"] * heldout)
    lines += ["", f"Resolution: one held-out sample is {step:.2f} points ({heldout} held-out problems × "
                  f"{cfg['train']['eval_samples']} samples); a difference between the settings of a few samples "
                  "at this length of run is noise, not a ranking."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", type=Path, default=None, help="warm-started tiny model (default: build one)")
    ap.add_argument("--stdio-model", type=Path, default=None,
                    help="tiny model warm-started on stdio prompts (default: build one, see stdio_model)")
    ap.add_argument("--steps", type=int, default=40, help="train.steps of every run")
    ap.add_argument("--seeds", default="0,1", help="train.seed values, comma-separated")
    ap.add_argument("--sets", default=",".join(SETS), help=f"problem sets, comma-separated ({', '.join(SETS)})")
    ap.add_argument("--eval-samples", type=int, default=8, help="train.eval_samples (held-out samples per problem)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1 on a shared 2-core machine)")
    ap.add_argument("--no-write", action="store_true", help="do not update RESULTS.md")
    args = ap.parse_args(argv)
    args.arch, args.engines, args.problems = "qwen3", None, DEMO_PROBLEMS  # what tiny_model reads
    seeds = [int(x) for x in args.seeds.split(",") if x]
    sets = [x for x in args.sets.split(",") if x]
    unknown = set(sets) - set(SETS)
    if unknown:
        ap.error(f"unknown set(s) {sorted(unknown)}; choose from {', '.join(SETS)}")

    load0 = os.getloadavg()[0]
    rows = []
    with tempfile.TemporaryDirectory(prefix="normalize-bench-") as tmp:
        stdio_path = Path(tmp) / "stdio.jsonl"
        sizes = {"demo": len(DEMO_PROBLEMS.read_text().splitlines()),
                 "stdio": stdio_problems(DEMO_PROBLEMS, stdio_path)}
        paths = {"demo": DEMO_PROBLEMS, "stdio": stdio_path}
        model, build = tiny_model(args, Path(tmp), "normalize-bench")
        models = {"demo": model}
        if "stdio" in sets:
            models["stdio"] = str(args.stdio_model or stdio_model(Path(tmp) / "tiny-stdio", args.threads))
        base = [f"train.steps={args.steps}", f"train.eval_samples={args.eval_samples}"]
        for name in sets:
            for seed in seeds:
                for mode in MODES:
                    cfg = demo_config(models[name], str(paths[name]), base + [f"train.seed={seed}",
                                                                        f"reward.normalize={mode}"])
                    result = _child("train", cfg, args.threads, label=f"{name} {mode} seed {seed}")
                    rows.append({"set": name, "normalize": mode, "seed": seed, **result})
                    print(f"[normalize-bench] {name} {mode} seed {seed}: {result['before']:.3f} -> "
                          f"{result['after']:.3f} in {result['wall_s']:.0f} s", file=sys.stderr, flush=True)
    command = "python benchmarks/normalize_bench.py" + "".join(
        f" {a}" for a in (argv if argv is not None else sys.argv[1:]) if a != "--no-write")
    heldout = sum(json.loads(line).get("split") == "heldout" for line in DEMO_PROBLEMS.read_text().splitlines())
    text = markdown(rows, cfg, build, (load0, os.getloadavg()[0]), args.threads, command, sizes, heldout)
    print(text)
    if not args.no_write:
        from benchmarks.results import update_section

        update_section("reward-normalize", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
