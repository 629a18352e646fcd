"""`python -m sandbox run | run-batch | check | serve | bench` (contract: docs/design.md "Execution result
(sandbox/)", CLI, and "Sandbox service (sandbox/)").

Exit status: 0 whatever the verdicts (`check`: 1 when a problem not marked excluded fails its check); 2 for
usage errors and bad input files; 3 when the sandbox itself is broken.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

EXIT_USAGE = 2
EXIT_BROKEN = 3


class UsageError(Exception):
    pass


def _read_text(path: str, what: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as f:
            return f.read()
    except OSError as e:
        raise UsageError(f"{what} {path}: {e.strerror}") from None


def _load_one_problem(path: str):
    from .formats import load_problems
    from .problems import Problem, ProblemError
    text = _read_text(path, "--problem")
    try:
        obj = json.loads(text)
    except ValueError:
        obj = None
    if isinstance(obj, dict):
        try:
            return Problem.from_dict(obj)
        except ProblemError as e:
            native_error = str(e)
        else:  # pragma: no cover
            native_error = ""
    else:
        native_error = "not a single JSON object"
    # Any importable format, as long as the file holds exactly one problem.
    res = load_problems(path)
    if len(res.problems) == 1 and not res.errors:
        return res.problems[0]
    why = "; ".join(str(e) for e in res.errors[:3]) or native_error
    raise UsageError(f"--problem {path}: expected one problem ({why})")


def _load_problems(path: str, fmt: str = "auto"):
    from .formats import load_problems
    try:
        res = load_problems(path, fmt)
    except OSError as e:
        raise UsageError(f"{path}: {e.strerror}") from None
    except ValueError as e:
        raise UsageError(f"{path}: {e}") from None
    for err in res.errors:
        print(f"warning: {path}: {err}", file=sys.stderr)
    return res


def _limits_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--backend", default="process", help="process (default) or docker")
    p.add_argument("--timeout", type=float, default=None, metavar="S",
                   help="time limit in seconds (default: each problem's time_limit_s)")
    p.add_argument("--memory-mb", type=int, default=None, metavar="M",
                   help="memory limit in MB (default: each problem's memory_limit_mb)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m sandbox",
                                     description="Run untrusted candidate programs against problems.")
    sub = parser.add_subparsers(dest="verb", required=True)

    run = sub.add_parser("run", help="run one candidate, print one result")
    run.add_argument("--problem", required=True, metavar="P.json", help="one problem (native JSON)")
    src = run.add_mutually_exclusive_group(required=True)
    src.add_argument("--code", metavar="C.py", help="a whole program")
    src.add_argument("--completion", metavar="C.txt", help="appended to the problem's prompt")
    run.add_argument("--mode", choices=("warm", "cold"), default=None,
                     help="process backend: cold (default for one run: nothing to reuse) or warm")
    _limits_args(run)

    batch = sub.add_parser("run-batch", help="run a JSONL file of candidates")
    batch.add_argument("--problems", required=True, metavar="FILE")
    batch.add_argument("--candidates", required=True, metavar="FILE.jsonl",
                       help='lines {"problem_id": ..., "code"|"completion"|"reply": ...}')
    batch.add_argument("--workers", type=int, default=None, metavar="N",
                       help="parallel sandboxes (default: CPU count)")
    batch.add_argument("--mode", choices=("warm", "cold"), default="warm")
    batch.add_argument("--format", default="auto", help="problem file format (default auto)")
    _limits_args(batch)

    check = sub.add_parser("check", help="reference solutions must pass, empty ones must fail")
    check.add_argument("file", metavar="FILE")
    check.add_argument("--format", default="auto",
                       choices=("auto", "native", "humaneval", "mbpp", "apps", "codecontests"))
    check.add_argument("--backend", default="process")
    check.add_argument("--workers", type=int, default=None, metavar="N")
    check.add_argument("--mode", choices=("warm", "cold"), default="warm")
    check.add_argument("--endpoints", nargs="+", metavar="URL", default=None,
                       help="run on these `serve` replicas (token from CRUCIBLE_SANDBOX_TOKEN) instead of locally")

    serve = sub.add_parser("serve", help="serve run-batch over HTTP (token from CRUCIBLE_SANDBOX_TOKEN)")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1; "
                       "0.0.0.0 serves other machines)")
    serve.add_argument("--port", type=int, default=8700, help="TCP port (default 8700; 0: any free one)")
    serve.add_argument("--workers", type=int, default=None, metavar="N",
                       help="parallel executions (default: CPU count)")
    serve.add_argument("--backend", default="process", help="process (default) or docker")
    serve.add_argument("--mode", choices=("warm", "cold"), default="warm")
    serve.add_argument("--max-body-mb", type=int, default=64, metavar="M", help="largest request body (64)")
    serve.add_argument("--max-candidates", type=int, default=4096, metavar="N",
                       help="most candidates per request (4096)")
    serve.add_argument("--max-connections", type=int, default=64, metavar="N",
                       help="authenticated requests served at once (64; 503 beyond)")
    serve.add_argument("--max-unauthenticated", type=int, default=64, metavar="N",
                       help="connections without the token yet held at once (64; a new one cuts the oldest)")
    serve.add_argument("--max-unauthenticated-per-peer", type=int, default=8, metavar="N",
                       help="of those, from one address (8; a new one cuts that address's oldest)")
    serve.add_argument("--max-json-depth", type=int, default=32, metavar="N",
                       help="deepest nesting of arrays and objects in a body (32; 400 beyond)")

    bench = sub.add_parser("bench", help="measure throughput (benchmarks/sandbox_bench.py)")
    bench.add_argument("args", nargs=argparse.REMAINDER, help="passed to the benchmark")
    return parser


def _print(obj) -> None:
    sys.stdout.write(json.dumps(obj, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def cmd_run(a) -> int:
    from .runner import Candidate, Runner
    problem = _load_one_problem(a.problem)
    cand = Candidate(problem_id=problem.id,
                     code=_read_text(a.code, "--code") if a.code else None,
                     completion=_read_text(a.completion, "--completion") if a.completion else None)
    mode = a.mode or ("cold" if a.backend == "process" else "warm")
    with Runner(backend=a.backend, workers=1, mode=mode, timeout_s=a.timeout,
                memory_mb=a.memory_mb) as runner:
        res = runner.run_one(problem, cand)
    _print(res.to_dict())
    return 0


def _read_candidates(path: str, problem_ids: set[str]):
    from .runner import Candidate
    cands = []
    text = _read_text(path, "--candidates")
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as e:
            raise UsageError(f"{path} line {lineno}: not JSON ({e})") from None
        try:
            cand = Candidate.from_dict(obj, problem_ids)
        except ValueError as e:
            raise UsageError(f"{path} line {lineno}: {e}") from None
        # candidate_index is the 0-based line number in the file (docs/design.md, run-batch), blank lines included.
        cands.append((lineno - 1, cand))
    return cands


def cmd_run_batch(a) -> int:
    from .runner import Runner, summarize
    res = _load_problems(a.problems, a.format)
    problems = {p.id: p for p in res.problems}
    numbered = _read_candidates(a.candidates, set(problems))
    cands = [cand for _, cand in numbered]
    if a.workers is not None and a.workers < 1:
        raise UsageError("--workers must be at least 1")
    with Runner(backend=a.backend, workers=a.workers, mode=a.mode, timeout_s=a.timeout,
                memory_mb=a.memory_mb) as runner:
        t0 = time.monotonic()
        results = runner.run_batch(problems, cands)
        wall = time.monotonic() - t0
    isolation = next((r.isolation for r in results if r.isolation != "none"), "none")
    for (index, cand), r in zip(numbered, results):
        _print({**r.to_dict(), "problem_id": cand.problem_id, "candidate_index": index})
    _print({"summary": {**summarize(results, wall, isolation), "mode": a.mode,
                        "workers": runner.workers}})
    return 0


def cmd_check(a) -> int:
    from .checks import check_problems
    res = _load_problems(a.file, a.format)
    if not res.problems and not res.errors:
        raise UsageError(f"{a.file}: no problems in the file")
    runner = None
    if a.endpoints:
        from .remote import RemoteRunner
        runner = RemoteRunner(a.endpoints)
    try:
        rows = check_problems(res.problems, backend=a.backend, workers=a.workers, mode=a.mode, runner=runner)
    except RuntimeError as e:  # RemoteUnavailable: no replica left
        from .backends.base import SandboxUnavailable
        from .remote import RemoteUnavailable
        if isinstance(e, RemoteUnavailable):
            raise SandboxUnavailable(str(e)) from None
        raise
    # An excluded problem (`"excluded": true`, as an export of a set with excluded problems writes it) is
    # checked and its row says so, but it counts neither way: runs skip it, as the web app's warnings do.
    passed = excluded = excluded_failing = 0
    for problem, row in zip(res.problems, rows):
        ok = row["reference_passed"] and row["empty_failed"]
        if problem.excluded:
            row = {**row, "excluded": True}
            excluded += 1
            excluded_failing += not ok
        else:
            passed += ok
        _print(row)
    # A line that could not be imported is a problem that failed its check; the last stdout line
    # stays exactly `N passed, M failed` (scripts parse it), the explanation goes to stderr.
    failed = len(rows) - excluded - passed + len(res.errors)
    if res.errors:
        print(f"note: {len(res.errors)} of the failed are line(s) that could not be imported "
              f"(see the warnings above)", file=sys.stderr)
    if excluded:
        print(f"note: {excluded} excluded problem(s) checked but not counted ({excluded_failing} of them "
              f"failing; their rows say \"excluded\": true)", file=sys.stderr)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


def cmd_serve(a) -> int:
    from .service import config_from_env, serve
    if a.workers is not None and a.workers < 1:
        raise UsageError("--workers must be at least 1")
    config = config_from_env(host=a.host, port=a.port, workers=a.workers or 0, backend=a.backend, mode=a.mode,
                             max_body_bytes=a.max_body_mb << 20, max_candidates=a.max_candidates,
                             max_connections=a.max_connections, max_unauthenticated=a.max_unauthenticated,
                             max_unauthenticated_per_peer=a.max_unauthenticated_per_peer,
                             max_json_depth=a.max_json_depth)

    def ready(service) -> None:  # first stdout line: where it listens (port 0 picks one)
        _print({"serving": service.url, "workers": service.runner.workers})
        print(f"sandbox service on {service.url}, {service.runner.workers} workers", file=sys.stderr)

    serve(config, ready=ready)
    return 0


def cmd_bench(a) -> int:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sys.path.insert(0, os.path.join(root, "benchmarks"))
    import sandbox_bench  # noqa: E402
    return sandbox_bench.main(a.args)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["bench"]:  # everything after `bench` belongs to the benchmark's own parser
        a = argparse.Namespace(verb="bench", args=argv[1:])
    else:
        a = parser.parse_args(argv)
    from .backends.base import SandboxUnavailable
    from .protocol.channel import WorkerBroken
    try:
        return {"run": cmd_run, "run-batch": cmd_run_batch, "check": cmd_check,
                "serve": cmd_serve, "bench": cmd_bench}[a.verb](a)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except ValueError as e:  # bad limit values, unknown backend
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except (SandboxUnavailable, WorkerBroken, OSError) as e:
        print(f"error: the sandbox is broken: {e}", file=sys.stderr)
        return EXIT_BROKEN
