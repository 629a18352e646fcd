"""GPU check rows (issue 33, items 4 and 5): eager vs compiled decoding (``sampling.compile: off`` / ``on``) and
flash-linear-attention vs transformers' torch fallback, at 8x4x128, 16x8x256 and 32x8x512 (prompts x candidates x
new tokens), each row one ``benchmarks/gpu_check.py`` run in a process of its own with its own time limit, so a hang
costs one row and not the others; the whole check keeps to a budget (470 s: inside 8 minutes on one H200).

    python benchmarks/gpu_check.py --rows --jsonl-out $OUT/rows.jsonl --log-dir $OUT/rows   # the GPU machine
    python benchmarks/gpu_check.py --rows --tiny --no-write                                 # CPU smoke test

Each row's JSON is printed (one line) and appended to ``--jsonl-out`` as it finishes: ``status`` ok | timeout |
error | skipped (with ``reason``), the step's numbers (generation and update tokens/s, step, generate and update
seconds, peak memory), ``rollout/mismatch_kl`` and ``rollout/logprob_diff_max`` (sampler vs trainer on the same
weights), the runtime block's kernels (with any ``rerouted`` entry) and linear-attention forms, and what
``start.runtime.sampling`` says of the decode step (compiled, graphs, buckets) where the trainer reports it: a row
asks for ``sampling.compile: on`` but reports what ran, never assumes it. Rows run most informative first (the
issue's 16x8x256 target first); a row that cannot start within the budget is reported ``skipped``. The end prints
one table and the mismatch per kernel set, and writes them into RESULTS.md's ``gpu-check-rows`` section.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "gpu_check.py"

BUDGET_S = 470.0
"""The whole check's wall-clock budget: 8 minutes less a margin for the machine's own start and the copy back."""


@dataclass(frozen=True)
class Shape:
    name: str
    prompts: int
    candidates: int
    max_new_tokens: int
    steps: int
    """RL steps of the row; the first warms kernels, compiled graphs and the allocator up (with one, it is reported
    as it is, warm-up included)."""
    limit_s: float
    """The row's own time limit (capped by what is left of the budget)."""


SHAPES = (Shape("8x4x128", 8, 4, 128, 2, 100), Shape("16x8x256", 16, 8, 256, 2, 160),
          Shape("32x8x512", 32, 8, 512, 1, 240))
TINY_SHAPES = (Shape("2x2x8", 2, 2, 8, 2, 120), Shape("4x2x16", 4, 2, 16, 2, 120), Shape("4x4x16", 4, 4, 16, 1, 120))


@dataclass(frozen=True)
class Row:
    shape: Shape
    compile: str
    """sampling.compile asked for: off (the eager loop) or on."""
    kernels: str
    """fla (the fast kernels installed here) or torch (their fallbacks, the packages blocked)."""

    @property
    def name(self) -> str:
        return f"{self.shape.name} compile={self.compile} kernels={self.kernels}"


def plan(shapes: tuple[Shape, ...], compiles: list[str], kernel_sets: list[str]) -> list[Row]:
    """Every (shape, compile, kernels) row, most informative first: the middle shape (the issue's target), compiled
    and fast kernels before eager and fallback, then the smallest shape, then the largest."""
    order = [shapes[1], shapes[0], shapes[2]] if len(shapes) == 3 else list(shapes)
    rank = {"on": 0, "off": 1, "fla": 0, "torch": 1}
    rows = [Row(s, c, k) for s in order for k in kernel_sets for c in compiles]
    return sorted(rows, key=lambda r: (order.index(r.shape), rank[r.kernels], rank[r.compile]))


def child_command(row: Row, out: Path, tiny: bool) -> list[str]:
    """The row's own run of gpu_check.py (a fresh interpreter: the kernel choice holds from its first import)."""
    s = row.shape
    cmd = [sys.executable, str(SCRIPT), "--no-write", "--json-out", str(out), "--prompts", str(s.prompts),
           "--candidates", str(s.candidates), "--max-new-tokens", str(s.max_new_tokens), "--steps", str(s.steps),
           "--micro-batch", str(min(16, s.prompts * s.candidates)), "--compile", row.compile,
           "--kernels", "installed" if row.kernels == "fla" else "torch"]
    return cmd + (["--tiny"] if tiny else [])


def fla_installed() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    for dist in ("fla-core", "flash-linear-attention"):
        try:
            return version(dist)
        except PackageNotFoundError:
            continue
    return None


def run_row(row: Row, *, tiny: bool, limit_s: float, log_dir: Path) -> dict:
    """One row in its own process group, killed whole at ``limit_s`` -> the row's JSON."""
    out = log_dir / f"{row.name.replace(' ', '_').replace('=', '-')}.json"
    log = out.with_suffix(".log")
    out.unlink(missing_ok=True)
    t0 = time.monotonic()
    with open(log, "w") as log_file:
        proc = subprocess.Popen(child_command(row, out, tiny), cwd=ROOT, stdout=log_file, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            code = proc.wait(timeout=limit_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            code = None
    wall = time.monotonic() - t0
    base = {**_describe(row), "wall_s": round(wall, 1), "limit_s": round(limit_s, 1), "log": str(log)}
    if code is None:
        return {**base, "status": "timeout", "reason": f"no result within the row's {limit_s:.0f} s limit"}
    if code != 0 or not out.exists():
        tail = log.read_text(errors="replace")[-1500:] if log.exists() else ""
        return {**base, "status": "error", "reason": f"exit {code}", "log_tail": tail}
    return {**base, "status": "ok", **summarize(json.loads(out.read_text()))}


def summarize(result: dict) -> dict:
    """The row's numbers out of gpu_check.run's result."""
    runtime = result.get("runtime") or {}
    med = result["median"]
    sampling = result.get("sampling")
    return {"gen_tok_s": med["gen_tok_s"], "update_tok_s": med["update_tok_s"], "step_s": med["step_s"],
            "rollout_s": med["rollout_s"], "update_s": med["update_s"], "mismatch_kl": med["mismatch_kl"],
            "logprob_diff_max": med["logprob_diff_max"], "peak_gib": result.get("peak_gib"),
            "first_step_s": result.get("first_step_s"), "timed_steps": result.get("timed_steps"),
            "kernels": runtime.get("kernels"), "linear_attention": runtime.get("linear_attention"),
            "sampling": sampling,
            "compiled": sampling.get("compiled") if isinstance(sampling, dict) else None,
            "compile_note": None if isinstance(sampling, dict) else
            "start.runtime.sampling absent: this trainer does not report a compiled decode step (it ran eager)",
            "device": (result.get("facts") or {}).get("device"), "torch": (result.get("facts") or {}).get("torch")}


def kernel_set(row: dict) -> str:
    """What the linear-attention layers ran, as measured: chunked (prefill, training) / decode kernel."""
    k = row.get("kernels") or {}
    text = f"chunked {k.get('gated_delta_rule', '?')}, decode {k.get('gated_delta_rule_decode', '?')}"
    return text + (" (rerouted)" if k.get("rerouted") else "")


def mismatch_by_kernel_set(rows: list[dict]) -> dict[str, dict]:
    """``{kernel set: {rows, mismatch_kl (median), logprob_diff_max (max)}}`` over the rows that ran."""
    groups: dict[str, list[dict]] = {}
    for r in rows:
        if r["status"] == "ok":
            groups.setdefault(kernel_set(r), []).append(r)
    return {name: {"rows": len(g), "mismatch_kl": statistics.median(r["mismatch_kl"] for r in g),
                   "logprob_diff_max": max(r["logprob_diff_max"] for r in g)} for name, g in groups.items()}


def table(rows: list[dict], *, tiny: bool, budget_s: float, total_s: float) -> str:
    head = ("## GPU check rows (CPU smoke test only: `--tiny`)" if tiny else "## GPU check rows") + "\n\n"
    lines = [head + f"Each row is `benchmarks/gpu_check.py` in a process of its own with its own time limit; whole "
             f"check {total_s:.0f} s of a {budget_s:.0f} s budget. `compiled` is what `start.runtime.sampling` "
             f"reported (n/a: the trainer did not report it, and decoded eagerly).", "",
             ("| row | status | compiled | kernels (chunked / decode) | generation tok/s | update tok/s | step s | "
              "generate s | update s | mismatch KL | max abs Δ log-prob | peak GiB |"),
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["status"] != "ok":
            lines.append(f"| {r['row']} | {r['status']}: {r.get('reason', '')} | | | | | | | | | | |")
            continue
        peak = f"{r['peak_gib']:.1f}" if r.get("peak_gib") is not None else "n/a"
        compiled = "n/a" if r["compiled"] is None else str(r["compiled"]).lower()
        lines.append(f"| {r['row']} | ok | {compiled} | {kernel_set(r)} | {r['gen_tok_s']:.0f} | "
                     f"{r['update_tok_s']:.0f} | {r['step_s']:.1f} | {r['rollout_s']:.1f} | {r['update_s']:.1f} | "
                     f"{r['mismatch_kl']:.2e} | {r['logprob_diff_max']:.3f} | {peak} |")
    by_set = mismatch_by_kernel_set(rows)
    if by_set:
        lines += ["", ("Sampler/trainer mismatch per kernel set (`rollout/mismatch_kl` median, "
                       "`rollout/logprob_diff_max` max over its rows):"), ""]
        lines += [f"- {name}: mismatch KL {v['mismatch_kl']:.2e}, max abs Δ log-prob {v['logprob_diff_max']:.3f} "
                  f"({v['rows']} rows)" for name, v in by_set.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", action="store_true", help="(how gpu_check.py hands over to this module)")
    ap.add_argument("--tiny", action="store_true", help="CPU smoke test: tiny shapes of the same rows")
    ap.add_argument("--shapes", default=None, help="comma-separated shape names to run (default: all)")
    ap.add_argument("--compile", default="off,on", help="comma-separated sampling.compile values (off,on)")
    ap.add_argument("--kernels", default="fla,torch", help="comma-separated kernel sets (fla,torch)")
    ap.add_argument("--budget-s", type=float, default=BUDGET_S, help="wall-clock budget of the whole check")
    ap.add_argument("--row-limit-s", type=float, default=None, help="every row's own limit (default: per shape)")
    ap.add_argument("--min-row-s", type=float, default=None,
                    help="a row does not start with less budget left than this (default: 45 s, 5 s with --tiny)")
    ap.add_argument("--jsonl-out", type=Path, default=None, help="append each row's JSON here as it finishes")
    ap.add_argument("--log-dir", type=Path, default=None, help="each row's log and JSON (default: a temporary dir)")
    ap.add_argument("--no-write", action="store_true", help="do not update RESULTS.md")
    args, _ = ap.parse_known_args(argv)

    shapes = TINY_SHAPES if args.tiny else SHAPES
    if args.shapes:
        wanted = args.shapes.split(",")
        unknown = sorted(set(wanted) - {s.name for s in shapes})
        if unknown:
            ap.error(f"--shapes: unknown {unknown}; choose from {[s.name for s in shapes]}")
        shapes = tuple(s for s in shapes if s.name in wanted)
    compiles = [c for c in args.compile.split(",") if c]
    kernel_sets = [k for k in args.kernels.split(",") if k]
    if set(compiles) - {"off", "on"} or set(kernel_sets) - {"fla", "torch"}:
        ap.error("--compile takes off,on and --kernels takes fla,torch")
    min_row_s = args.min_row_s if args.min_row_s is not None else (5.0 if args.tiny else 45.0)
    fla = fla_installed()
    log_dir = args.log_dir or Path(tempfile.mkdtemp(prefix="gpu-check-rows-"))
    log_dir.mkdir(parents=True, exist_ok=True)

    started = time.monotonic()
    deadline = started + args.budget_s
    rows: list[dict] = []
    for row in plan(shapes, compiles, kernel_sets):
        left = deadline - time.monotonic()
        if row.kernels == "fla" and fla is None:
            result = {**_describe(row), "status": "skipped",
                      "reason": "flash-linear-attention is not installed here (its row would measure the torch "
                                "fallback again)"}
        elif left < min_row_s:
            result = {**_describe(row), "status": "skipped", "reason": f"budget: {max(left, 0):.0f} s left"}
        else:
            limit = min(args.row_limit_s or row.shape.limit_s, left)
            print(f"[gpu-check rows] {row.name}: starting (limit {limit:.0f} s)", file=sys.stderr, flush=True)
            result = run_row(row, tiny=args.tiny, limit_s=limit, log_dir=log_dir)
        rows.append(result)
        line = json.dumps(result, default=str)
        print(line, flush=True)
        if args.jsonl_out:
            with open(args.jsonl_out, "a") as f:
                f.write(line + "\n")
    text = table(rows, tiny=args.tiny, budget_s=args.budget_s, total_s=time.monotonic() - started)
    print(text)
    if not args.no_write:
        from benchmarks.results import update_section

        update_section("gpu-check-rows", text)
    return 0 if any(r["status"] == "ok" for r in rows) else 1


def _describe(row: Row) -> dict:
    return {"row": row.name, "shape": row.shape.name, **{k: v for k, v in asdict(row.shape).items() if k != "name"},
            "compile_requested": row.compile, "kernels_requested": row.kernels}


def _kill_group(proc: subprocess.Popen) -> None:
    """The row's whole process group (its sandbox workers, a vLLM server): a hung row leaves nothing behind."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


if __name__ == "__main__":
    sys.exit(main())
