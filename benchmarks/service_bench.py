"""The sandbox as a service: replicas, the service path's overhead, and recovery from a dead replica.

    python -m sandbox bench --endpoints [URL ...] [--n 1024] [--overhead-n 256] [--rounds 3]

With no URL the bench starts its own local replicas (`python -m sandbox serve` on loopback, each
pinned to its own cores where the machine has them); with URLs it measures those (scaling only).
It reports, on sandbox_bench.py's MBPP-size workload:

- scaling: one client spreading `--n` candidates over 1, 2 and 4 replicas of 1 worker each, in
  `--rounds` rounds of every count in turn, next to the in-process pool of the same number of
  workers (more replicas than cores share them evenly: what that shows is the cost of sharing);
- overhead: `--overhead-n` candidates through the service (one replica of `--workers` workers, and
  `--workers` replicas of one) vs the in-process pool of `--workers` workers, in symmetric rounds
  (pool, service, service, pool); target ≤ 10%;
- recovery: `--n` candidates on two replicas, one killed once a quarter of the results are in:
  every candidate must get exactly one result, with the verdicts of the pool.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

SECTION = "sandbox-service-bench"


def pinned_replicas(n: int, workers: int, token: str) -> tuple[object, list]:
    """`n` local replicas of `workers` workers, replica k on cores k*workers ... (k+1)*workers - 1,
    modulo the CPU count: with more workers than cores, replicas share cores evenly (4 replicas of
    one worker on 2 cores: two per core). -> (context manager to close them, replicas)."""
    from tests.sandbox.replicas import replicas
    ctx = replicas(n, workers=workers, token=token)
    started = ctx.__enter__()
    cores = os.cpu_count() or 1
    if n > 1:
        for k, r in enumerate(started):
            pin_tree(r.proc.pid, {(k * workers + j) % cores for j in range(workers)})
    return ctx, started


def pin_tree(pid: int, cores: set[int]) -> None:
    """Pin every thread of `pid` and of its descendants (its warm sandbox workers) to `cores`; what it
    starts later inherits the pinning."""
    from training.engines.guardian import descendants
    for p in [pid, *descendants(pid)]:
        try:
            for tid in os.listdir(f"/proc/{p}/task"):
                os.sched_setaffinity(int(tid), cores)
        except OSError:
            pass  # gone meanwhile


def rate(runner, problems, cands) -> tuple[float, list]:
    t0 = time.perf_counter()
    results = runner.run_batch(problems, cands)
    return len(cands) / (time.perf_counter() - t0), results


def bench_scaling(problems, cands, urls: list[str] | None, token: str, rounds: int) -> list[str]:
    """Rounds that each measure every replica count in turn (1, 2, 4, 1, 2, 4, ...), so that a load
    that comes and goes on a shared machine falls on every count alike; medians and ranges."""
    from sandbox.remote import RemoteRunner
    from sandbox.runner import Runner
    cores = os.cpu_count() or 1
    counts = [1, 2, 4] if urls is None else [len(urls)]
    svc: dict[int, list[float]] = {n: [] for n in counts}
    pool: dict[int, list[float]] = {n: [] for n in counts}
    passed: dict[int, set[int]] = {n: set() for n in counts}
    for r in range(rounds):
        for n in counts:
            with Runner(workers=n) as local:
                local.run_batch(problems, cands[:n])
                pool[n].append(rate(local, problems, cands)[0])
            ctx, started = (None, []) if urls else pinned_replicas(n, 1, token)
            try:
                runner = RemoteRunner(urls or [x.url for x in started], token)
                runner.run_batch(problems, cands[:8])
                svc_rate, results = rate(runner, problems, cands)
            finally:
                if ctx is not None:
                    ctx.__exit__(None, None, None)
            svc[n].append(svc_rate)
            passed[n].add(sum(x.passed for x in results))
            print(f"scaling round {r + 1}/{rounds}: {n} replica(s) {svc_rate:.0f}/s, pool of {n} "
                  f"{pool[n][-1]:.0f}/s", file=sys.stderr)
    rows = ["| replicas × workers | pinning | service executions/s (median; range) | "
            "vs 1 replica | in-process pool of as many workers (median; range) | correct |",
            "|---|---|---|---|---|---|"]
    base = statistics.median(svc[counts[0]])
    for n in counts:
        share = ("remote" if urls else "unpinned" if n == 1 else "one core each" if n <= cores
                 else f"{-(-n // cores)} per core")
        rows.append(f"| {n} × 1 | {share} | {statistics.median(svc[n]):.1f}; {min(svc[n]):.0f} … {max(svc[n]):.0f} | "
                    f"{statistics.median(svc[n]) / base:.2f}× | {statistics.median(pool[n]):.1f}; "
                    f"{min(pool[n]):.0f} … {max(pool[n]):.0f} | "
                    f"{'/'.join(str(p) for p in sorted(passed[n]))}/{len(cands)} passed |")
    return rows


def bench_overhead(problems, cands, workers: int, rounds: int, token: str) -> tuple[list[str], dict]:
    """Symmetric rounds (pool, service, service, pool) for each service layout."""
    from sandbox.remote import RemoteRunner
    from sandbox.runner import Runner
    layouts = {f"1 replica × {workers} workers": (1, workers), f"{workers} replicas × 1 worker": (workers, 1)}
    found: dict[str, list[float]] = {}
    rows = ["| service layout | pool executions/s (median) | service executions/s (median) | "
            "overhead (median) | overhead (range) |", "|---|---|---|---|---|"]
    with Runner(workers=workers) as pool:
        pool.run_batch(problems, cands[:workers])
        for name, (n, w) in layouts.items():
            ctx, started = pinned_replicas(n, w, token)
            try:
                runner = RemoteRunner([r.url for r in started], token)
                runner.run_batch(problems, cands[:8])
                pool_rates, svc_rates, overheads = [], [], []
                for r in range(rounds):
                    p1 = rate(pool, problems, cands)[0]
                    s1 = rate(runner, problems, cands)[0]
                    s2 = rate(runner, problems, cands)[0]
                    p2 = rate(pool, problems, cands)[0]
                    pool_rates += [p1, p2]
                    svc_rates += [s1, s2]
                    overheads.append((p1 + p2) / (s1 + s2) - 1)
                    print(f"overhead {name} round {r + 1}/{rounds}: pool {p1:.0f}/{p2:.0f}/s, service "
                          f"{s1:.0f}/{s2:.0f}/s", file=sys.stderr)
            finally:
                ctx.__exit__(None, None, None)
            found[name] = overheads
            rows.append(f"| {name} | {statistics.median(pool_rates):.1f} | {statistics.median(svc_rates):.1f} | "
                        f"{statistics.median(overheads):+.1%} | {min(overheads):+.1%} … {max(overheads):+.1%} |")
    return rows, found


def bench_recovery(problems, cands, token: str) -> list[str]:
    from sandbox.remote import RemoteRunner
    from sandbox.runner import Runner
    with Runner(workers=2) as pool:
        expected = [(r.status.value, tuple(t.passed for t in r.tests)) for r in pool.run_batch(problems, cands)]
    ctx, (doomed, survivor) = pinned_replicas(2, 1, token)
    try:
        runner = RemoteRunner([doomed.url, survivor.url], token)
        runner.run_batch(problems, cands[:8])
        t0 = time.perf_counter()
        future = runner.submit_batch(problems, cands)
        while runner.last_batch.received < len(cands) // 4:
            time.sleep(0.005)
        doomed.kill()
        killed_at = time.perf_counter() - t0
        results = future.result(timeout=600)
        wall = time.perf_counter() - t0
        batch = runner.last_batch
    finally:
        ctx.__exit__(None, None, None)
    got = [(r.status.value, tuple(t.passed for t in r.tests)) for r in results]
    lost = sum(r is None for r in results)
    return [f"Recovery: {len(cands)} candidates on 2 replicas × 1 worker, one killed (SIGKILL) after "
            f"{killed_at:.2f} s with {len(cands) // 4} results in: the batch finished in {wall:.2f} s with "
            f"{len(results)} results ({lost} missing); {batch.requeued} candidates of the killed replica went "
            f"back on the queue and ran on the survivor, {batch.duplicates} second results were dropped; verdicts "
            f"{'identical to' if got == expected else '**different from**'} the in-process "
            f"pool's ({sum(r.passed for r in results)}/{len(cands)} passed); the killed replica: "
            f"{runner.last_endpoints[0].error}."]


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m sandbox bench --endpoints")
    ap.add_argument("--endpoints", nargs="*", metavar="URL", help="replicas to measure (none: start local ones)")
    ap.add_argument("--n", type=int, default=1024, help="candidates for scaling and recovery (1024)")
    ap.add_argument("--overhead-n", type=int, default=256, help="candidates for the overhead rounds (256)")
    ap.add_argument("--workers", type=int, default=2, help="workers of the overhead comparison (2)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-write", action="store_true", help="print only")
    a = ap.parse_args(argv)
    from sandbox_bench import workload
    token = os.environ.setdefault("CRUCIBLE_SANDBOX_TOKEN", "bench-" + os.urandom(16).hex())
    problems, cands, _ = workload(a.n)
    _, few, _ = workload(a.overhead_n)
    urls = a.endpoints or None
    lines = ["## Sandbox service: replicas, overhead, recovery", "",
             f"{os.cpu_count()} CPUs, shared with other work; {time.strftime('%Y-%m-%d %H:%M')}; process backend, "
             "warm mode; workload of the sandbox bench (MBPP-size, 3/4 correct). "
             f"Scaling: {a.n} candidates, one client, {a.rounds} rounds of every replica count in turn; "
             f"load average at the start {' '.join(f'{x:.2f}' for x in os.getloadavg())}.", ""]
    lines += bench_scaling(problems, cands, urls, token, a.rounds)
    if urls is None:
        rows, found = bench_overhead(problems, few, a.workers, a.rounds, token)
        worst = max(statistics.median(v) for v in found.values())
        lines += ["", f"Overhead of the service path vs the in-process pool of {a.workers} workers, "
                      f"{a.overhead_n} candidates, {a.rounds} symmetric rounds (pool, service, service, pool); "
                      f"overhead = pool rate / service rate − 1 (negative: the service was faster). Target ≤ 10%: "
                      f"{'**met**' if worst <= 0.10 else '**NOT met**'} (worst layout's median {worst:+.1%}). "
                      "Replicas of one worker each are pinned one per core with their sandbox workers; each "
                      "drives its executions in its own interpreter, where the pool's slots share one.", ""] + rows
        lines += [""] + bench_recovery(problems, cands, token)
    table = "\n".join(lines)
    print(table)
    if not a.no_write:
        from benchmarks.results import update_section
        print(f"\nwrote {update_section(SECTION, table)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
