"""Run every benchmark that exists in benchmarks/, one after the other; each rewrites its own section of
RESULTS.md.

    python benchmarks/run_all.py [--only NAME ...] [--skip NAME ...] [--no-write] [--list]

Order: sandbox_bench, service_bench, web_bench, rescore_bench, train_step_bench, learning_demo. gpu_check
is not run here: it needs a GPU machine (run it there by hand; ``python benchmarks/gpu_check.py --tiny``
smoke-tests it on CPU). A benchmark whose file is missing is reported as skipped; one that fails does not stop the
others, and the exit status is 1 if any failed. Benchmarks run sequentially on purpose: they time
things, and running two at once on a small machine would corrupt both.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

# name -> extra arguments (each script accepts --no-write)
BENCHMARKS: dict[str, list[str]] = {
    "sandbox_bench": [],
    "service_bench": [],
    "web_bench": [],
    "rescore_bench": [],
    "train_step_bench": [],
    "learning_demo": [],
}
NOT_HERE = {"gpu_check": "needs a GPU machine; run it there by hand"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="+", choices=sorted(BENCHMARKS), help="run just these")
    ap.add_argument("--skip", nargs="+", choices=sorted(BENCHMARKS), default=[], help="leave these out")
    ap.add_argument("--no-write", action="store_true", help="pass --no-write: print results, leave RESULTS.md")
    ap.add_argument("--list", action="store_true", help="list what would run and exit")
    args = ap.parse_args(argv)

    names = [n for n in BENCHMARKS if (not args.only or n in args.only) and n not in args.skip]
    if args.list:
        for n in BENCHMARKS:
            state = "present" if (HERE / f"{n}.py").exists() else "missing"
            print(f"{n}: {state}{'' if n in names else ' (not selected)'}")
        for n, why in NOT_HERE.items():
            print(f"{n}: not run by run_all ({why})")
        return 0

    outcomes: list[tuple[str, str, float]] = []
    for name in names:
        script = HERE / f"{name}.py"
        if not script.exists():
            outcomes.append((name, "skipped (file missing)", 0.0))
            continue
        cmd = [sys.executable, str(script), *BENCHMARKS[name]] + (["--no-write"] if args.no_write else [])
        print(f"\n=== {name}: {' '.join(cmd[1:])}", flush=True)
        t0 = time.perf_counter()
        rc = subprocess.call(cmd, cwd=ROOT)
        outcomes.append((name, "ok" if rc == 0 else f"FAILED (exit {rc})", time.perf_counter() - t0))

    print("\n=== summary")
    for name, outcome, seconds in outcomes:
        print(f"{name:18s} {outcome:24s} {seconds:7.1f} s")
    return 1 if any(o.startswith("FAILED") for _, o, _ in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
