"""The host side of the execution protocol, the same over every backend's channel.

Send the candidate, its setup and each test's sub-expressions to the child, decide every assertion
here (verdict.py), read the capped stdout/stderr, enforce the wall-clock deadline, and turn what
happened into an `ExecutionResult`. The worker's side is sandbox/harness.py; the channel between
them, sandbox/protocol/channel.py.
"""

from __future__ import annotations

import os
import secrets
import selectors
import signal
import time
from dataclasses import dataclass, field

from .. import flags, interpret, verdict
from ..limits import Limits
from ..result import ExecutionResult, Outcome, TestResult
from .channel import Channel, Done, ExecIO, WorkerBroken


class _Capture:
    def __init__(self, cap: int):
        self.cap = cap
        self.chunks: list[bytes] = []
        self.size = 0
        self.truncated = False
        self.eof = False

    def feed(self, data: bytes) -> bool:
        """False once past the cap."""
        room = self.cap - self.size
        if len(data) > room:
            self.chunks.append(data[:room])
            self.size = self.cap
            self.truncated = True
            return False
        self.chunks.append(data)
        self.size += len(data)
        return True

    def text(self) -> str:
        return b"".join(self.chunks).decode("utf-8", "replace")


class Deadline(verdict.Abort):
    pass


class OutputFlood(verdict.Abort):
    pass


class ChildGone(verdict.Abort):
    pass


class _Session:
    """Multiplexes one execution's streams until the deadline."""

    def __init__(self, io: ExecIO, limits: Limits, deadline: float):
        self.io = io
        self.deadline = deadline
        self.out = _Capture(limits.output_limit_bytes)
        self.err = _Capture(limits.output_limit_bytes)
        self.sel = selectors.PollSelector()  # no epoll instance to create and close per execution
        for fd, cap in ((io.stdout, self.out), (io.stderr, self.err)):
            os.set_blocking(fd, False)
            self.sel.register(fd, selectors.EVENT_READ, cap)
        if io.rpc_from_child is not None:
            os.set_blocking(io.rpc_from_child, False)
            self.sel.register(io.rpc_from_child, selectors.EVENT_READ, "rpc")
        self.rpc_buf = b""
        self.rpc_eof = False
        self.done: Done | None = None
        self.channel: Channel | None = None

    def _pump(self, timeout: float) -> None:
        for key, _ in self.sel.select(max(0.0, timeout)):
            fd = key.fd
            if key.data == "ctrl":
                self.done = self.channel.poll_done() or self.done
                continue
            try:
                data = os.read(fd, 1 << 16)
            except BlockingIOError:
                continue
            if key.data == "rpc":
                if not data:
                    self.rpc_eof = True
                    self.sel.unregister(fd)
                else:
                    self.rpc_buf += data
                    if len(self.rpc_buf) > verdict.MAX_ITEMS * 16:
                        raise verdict.ProtocolViolation("reply too large")
                continue
            cap = key.data
            if not data:
                cap.eof = True
                self.sel.unregister(fd)
            elif not cap.feed(data):
                raise OutputFlood()

    def request(self, obj: dict) -> dict:
        return self.receive(self.send(obj))

    def send(self, obj: dict) -> int:
        """Queue one request for the child; returns its id. Each request carries a fresh random id
        that the reply must echo, so frames a candidate writes ahead of time cannot pass for
        replies. Requests may be sent ahead; replies come back in order."""
        import marshal
        request_id = secrets.randbits(63)
        obj = dict(obj, id=request_id)
        body = marshal.dumps(obj)  # host -> sandbox frames are marshal; replies are JSON
        data = len(body).to_bytes(4, "big") + body
        fd = self.io.rpc_to_child
        view = memoryview(data)
        os.set_blocking(fd, False)
        while view:
            try:
                n = os.write(fd, view)
                view = view[n:]
            except BlockingIOError:
                self._wait(0.002)
            except BrokenPipeError:
                raise ChildGone() from None
        return request_id

    def receive(self, request_id: int) -> dict:
        while True:
            if len(self.rpc_buf) >= 4:
                n = int.from_bytes(self.rpc_buf[:4], "big")
                if n > verdict.MAX_ITEMS * 16:
                    raise verdict.ProtocolViolation("reply too large")
                if len(self.rpc_buf) >= 4 + n:
                    body, self.rpc_buf = self.rpc_buf[4:4 + n], self.rpc_buf[4 + n:]
                    reply = verdict.parse_frame(body)
                    if reply.get("id") != request_id:
                        raise verdict.ProtocolViolation("a reply that answers no request")
                    return reply
            if self.rpc_eof:
                raise ChildGone()
            self._wait(1.0)

    def _wait(self, step: float) -> None:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise Deadline()
        self._pump(min(step, left))

    def wait_exit(self, channel: "Channel") -> Done:
        """Read stdout/stderr until the worker reports that the child exited (it has then killed
        every other process of the execution, so a daemon holding the pipes open cannot stall us)."""
        self.channel = channel
        self.sel.register(channel.ctrl_fd(), selectors.EVENT_READ, "ctrl")
        try:
            while self.done is None:
                self._wait(1.0)
        finally:
            self.sel.unregister(channel.ctrl_fd())
        self.drain_available()
        return self.done

    def drain_available(self) -> None:
        try:
            for _ in range(64):
                if not self.sel.get_map() or not self.sel.select(0):
                    break
                self._pump(0)
        except OutputFlood:
            pass

    def close(self) -> None:
        self.sel.close()
        for fd in (self.io.stdout, self.io.stderr, self.io.rpc_to_child, self.io.rpc_from_child):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass


@dataclass
class _Outcome:
    status: Outcome | None = None
    detail: list[str] = field(default_factory=list)
    memory_error: bool = False
    exited: bool = False
    """The program ended itself before its tests did (sandbox/flags.py's exit_before_tests)."""


_EXIT_ETYPES = ("SystemExit", "KeyboardInterrupt")
# Signals a program sends itself (kill, abort, alarm) rather than gets for a fault or a limit.
_SENT_SIGNALS = frozenset(int(getattr(signal, name)) for name in (
    "SIGHUP", "SIGINT", "SIGQUIT", "SIGABRT", "SIGKILL", "SIGUSR1", "SIGUSR2", "SIGALRM", "SIGTERM"))


def drive_execution(channel: Channel, problem, code: str, limits: Limits) -> tuple[ExecutionResult, bool]:
    """Run `code` for `problem` on a started worker. Returns (result, worker_still_healthy)."""
    if problem.kind == "stdio":
        return _drive_stdio(channel, problem, code, limits)
    return _drive_function(channel, problem, code, limits)


def _shadowed(problem) -> frozenset[str]:
    """Names the tests' namespace binds besides the candidate's: the trusted evaluator must not
    take them for builtins."""
    key = (problem.setup or "", problem.entry_point)
    hit = _SHADOWED.get(key)
    if hit is None:
        hit = frozenset(interpret.defined_names(key[0])) | ({key[1]} if key[1] else frozenset())
        if len(_SHADOWED) > 4096:
            _SHADOWED.clear()
        _SHADOWED[key] = hit
    return hit


_SHADOWED: dict[tuple, frozenset] = {}


def _finish(channel: Channel, session: _Session | None, how: str, limits: Limits) -> Done:
    if session is not None and session.done is not None:
        return session.done
    channel.end_execution(how)
    done = channel.wait_done(timeout=5.0 + limits.time_limit_s)
    if session is not None:
        session.drain_available()
    return done


def _base_result(channel: Channel, started: float) -> ExecutionResult:
    return ExecutionResult(status=Outcome.FAILED, isolation=channel.isolation,
                           isolation_features=list(channel.features),
                           wall_time_s=time.monotonic() - started)


def _apply_end(res: ExecutionResult, out: _Outcome, done: Done, channel: Channel, limits: Limits,
               session: _Session) -> None:
    res.isolation_features = list(channel.features)  # minus any limit that failed to apply
    peak_mb, mem_hit = channel.memory_report()
    res.peak_memory_mb = peak_mb or done.maxrss_kb / 1024.0
    res.cpu_time_s = done.cpu_s
    res.stdout, res.stderr = session.out.text(), session.err.text()
    res.stdout_truncated, res.stderr_truncated = session.out.truncated, session.err.truncated
    if done.signal is not None and done.ended_by == "exit":
        res.exit_code = -done.signal
    elif done.exit_code is not None:
        res.exit_code = done.exit_code
    if out.status is None and done.ended_by == "exit" and done.signal is not None:
        import signal as _signal
        if done.signal == _signal.SIGXCPU or (done.signal == _signal.SIGKILL
                                               and done.cpu_s >= limits.time_limit_s * 0.95):
            out.status = Outcome.TIMEOUT
            out.detail.append(f"CPU-time limit of {limits.time_limit_s:g}s reached")
        elif mem_hit:
            out.status = Outcome.MEMORY
            out.detail.append(f"memory limit of {limits.memory_mb} MB reached")
        else:
            out.status = Outcome.KILLED
            try:
                name = _signal.Signals(done.signal).name
            except ValueError:
                name = str(done.signal)
            out.detail.append(f"the program was killed by {name}")
    if out.status is None and mem_hit and out.memory_error:
        out.status = Outcome.MEMORY
    if out.status is Outcome.KILLED and mem_hit:
        out.status = Outcome.MEMORY
        out.detail.append(f"memory limit of {limits.memory_mb} MB reached")


def _drive_function(channel: Channel, problem, code: str, limits: Limits):
    started = time.monotonic()
    deadline = started + limits.time_limit_s
    plans = interpret.cached_plans(tuple(problem.tests))
    shadowed = _shadowed(problem)
    tests = [TestResult(name=p.name, passed=False, error="not run") for p in plans]
    res = _base_result(channel, started)
    res.tests = tests
    out = _Outcome()
    channel.before_execution(limits)
    io = channel.start_execution("function", None, b"", limits)
    session = _Session(io, limits, deadline)
    healthy = True
    how = "end"
    phase = "candidate"
    current = None

    # Requests whose order is known in advance are sent at once (the candidate, the setup, and the
    # single sub-expression of each leading `assert f(...) == LITERAL` test), so a test costs no
    # round trip; the first test of another shape ends the pipeline.
    ahead: list[tuple[str, int]] = []

    def ask(src: str, bindings: dict | None = None):
        if ahead and ahead[0][0] == src and not bindings:
            reply = session.receive(ahead.pop(0)[1])
        else:
            if ahead:
                raise verdict.ProtocolViolation("pipelined requests out of order")
            reply = session.request({"op": "eval", "src": src, "bind": bindings or None})
        if reply["ok"]:
            if "value" not in reply:
                raise verdict.ProtocolViolation("eval reply without a value")
            return verdict.decode(reply["value"])
        raise _remote_error(reply)

    def run_remote(src: str, bindings: dict | None = None):
        if ahead:
            raise verdict.ProtocolViolation("pipelined requests out of order")
        reply = session.request({"op": "exec", "src": src, "filename": "<test>",
                                 "bind": bindings or None})
        if not reply["ok"]:
            raise _remote_error(reply)

    def check_deadline():
        if time.monotonic() > deadline:
            raise Deadline()

    def _remote_error(reply: dict) -> verdict.RemoteError:
        out.memory_error |= reply.get("memory") is True
        return verdict.RemoteError(str(reply.get("etype", "Error"))[:100],
                                   str(reply.get("error", ""))[:2000], reply.get("memory") is True)

    try:
        first = [session.send({"op": "exec", "src": code, "filename": "<candidate>"})]
        if problem.setup and problem.setup.strip():
            first.append(session.send({"op": "exec", "src": problem.setup, "filename": "<setup>"}))
        for plan in plans:
            src = interpret.first_request(plan, shadowed)
            if src is None:
                break
            ahead.append((src, session.send({"op": "eval", "src": src})))
        reply = session.receive(first[0])
        if not reply["ok"]:
            out.memory_error = reply.get("memory") is True
            out.exited |= reply.get("etype") in _EXIT_ETYPES
            out.status = Outcome.MEMORY if out.memory_error else Outcome.ERROR
            out.detail.append(f"the program raised before the tests ran: {str(reply.get('error'))[:2000]}")
            raise StopIteration
        phase = "setup"
        if len(first) > 1:
            reply = session.receive(first[1])
            if not reply["ok"]:
                out.status = Outcome.ERROR
                out.memory_error = reply.get("memory") is True
                out.detail.append(f"the problem's setup raised: {str(reply.get('error'))[:2000]}")
                raise StopIteration
        phase = "tests"
        untrusted = 0
        for plan, t in zip(plans, tests):
            current = t
            t0 = time.monotonic()
            t.error = interpret.Interpreter(plan, ask, run_remote, shadowed, check_deadline).run()
            t.passed = t.error is None
            t.time_s = time.monotonic() - t0
            untrusted += not plan.trusted
            current = None
        if untrusted:
            out.detail.append(f"{untrusted} test(s) have assertions inside statements that run "
                              "in the sandbox (def, try, with...) and were decided there")
    except StopIteration:
        pass
    except Deadline:
        how = "kill"
        out.status = Outcome.TIMEOUT
        out.detail.append(f"wall-clock limit of {limits.time_limit_s:g}s reached during the {phase}")
    except OutputFlood:
        how = "kill"
        out.status = Outcome.OUTPUT_LIMIT
        out.detail.append(f"output passed the {limits.output_limit_bytes} byte cap")
    except ChildGone:
        how = "gone"
        where = "before the tests ran" if phase != "tests" else "during the tests"
        out.detail.append(f"the program ended {where}")
    except verdict.ProtocolViolation as e:
        how = "kill"
        out.detail.append(f"the program tampered with the harness channel ({e})")
    if current is not None:
        current.error = current.error if current.error not in (None, "not run") else \
            "did not finish"
        current.passed = False
    for t in tests:
        if t.error == "not run":
            t.error = "not run: the execution ended before this test"
    try:
        done = _finish(channel, session, how, limits)
    except WorkerBroken as e:
        healthy = False
        done = Done(ended_by="kill")
        out.detail.append(f"worker failed: {e}")
        if out.status is None:
            out.status = Outcome.KILLED
    finally:
        session.close()
    _apply_end(res, out, done, channel, limits, session)
    if how == "gone" and (done.signal is None or done.signal in _SENT_SIGNALS) \
            and out.status in (None, Outcome.KILLED):
        out.exited = True  # no limit ended it: the program ended itself (exit, os._exit, a signal)
    if out.exited:
        res.flags.append(flags.EXIT_BEFORE_TESTS)
    if done.ended_by == "exit" and out.status is None and phase == "tests" \
            and any(t.error and t.error.startswith("not run") or t.error == "did not finish"
                    for t in tests):
        code_note = f"exit code {done.exit_code}" if done.exit_code is not None else "a signal"
        out.detail.append(f"the program exited ({code_note}) before every test ran")
    if out.status is None and phase != "tests":
        out.status = Outcome.ERROR
    if out.status is None:
        out.status = Outcome.PASSED if all(t.passed for t in tests) else Outcome.FAILED
    if how == "end" and done.ended_by == "end" and res.exit_code is None:
        res.exit_code = 0
    res.status = out.status
    res.detail = "; ".join(out.detail)
    res.wall_time_s = time.monotonic() - started
    return res, healthy


def _drive_stdio(channel: Channel, problem, code: str, limits: Limits):
    started = time.monotonic()
    res = _base_result(channel, started)
    cases = list(problem.test_cases)
    res.tests = [TestResult(name=f"case {i + 1}", passed=False, error="not run") for i in range(len(cases))]
    out = _Outcome()
    healthy = True
    stdout_parts, stderr_parts = [], []
    any_truncated = {"stdout": False, "stderr": False}
    cpu_total, peak = 0.0, 0.0
    for i, case in enumerate(cases):
        t = res.tests[i]
        t0 = time.monotonic()
        channel.before_execution(limits)
        io = channel.start_execution("stdio", code, case.input.encode("utf-8", "surrogatepass"), limits)
        session = _Session(io, limits, t0 + limits.time_limit_s)
        how = "end"
        status = None
        try:
            done = session.wait_exit(channel)
        except Deadline:
            how, status = "kill", Outcome.TIMEOUT
            out.detail.append(f"case {i + 1}: wall-clock limit of {limits.time_limit_s:g}s reached")
        except OutputFlood:
            how, status = "kill", Outcome.OUTPUT_LIMIT
            out.detail.append(f"case {i + 1}: output passed the {limits.output_limit_bytes} byte cap")
        except WorkerBroken as e:
            how, status = "broken", Outcome.KILLED
            healthy = False
            done = Done(ended_by="kill")
            out.detail.append(f"worker failed: {e}")
        try:
            if how == "kill":
                done = _finish(channel, session, how, limits)
        except WorkerBroken as e:
            healthy = False
            done = Done(ended_by="kill")
            out.detail.append(f"worker failed: {e}")
        finally:
            session.close()
        case_out = _Outcome(status=status)
        _apply_end(res, case_out, done, channel, limits, session)
        cpu_total += done.cpu_s
        peak = max(peak, res.peak_memory_mb)
        stdout_parts.append(res.stdout)
        stderr_parts.append(res.stderr)
        any_truncated["stdout"] |= res.stdout_truncated
        any_truncated["stderr"] |= res.stderr_truncated
        t.time_s = time.monotonic() - t0
        if case_out.status is not None:
            out.detail.extend(d for d in case_out.detail if d not in out.detail)
            t.error = f"{case_out.status.value}: " + "; ".join(case_out.detail)[:500]
            out.status = case_out.status
            break
        if res.exit_code not in (0, None):
            t.error = f"exit code {res.exit_code}: " + res.stderr[-500:]
            continue
        ok, why = verdict.compare_output(problem.checker, case.output, res.stdout)
        t.passed, t.error = ok, why
        if not healthy:
            break
    for t in res.tests:
        if t.error == "not run":
            t.error = "not run: the execution ended before this case"
    for name, parts in (("stdout", stdout_parts), ("stderr", stderr_parts)):
        text = "".join(parts)
        data = text.encode("utf-8", "surrogatepass")
        if len(data) > limits.output_limit_bytes:
            text = data[: limits.output_limit_bytes].decode("utf-8", "ignore")
            setattr(res, f"{name}_truncated", True)
        setattr(res, name, text)
    res.stdout_truncated = res.stdout_truncated or any_truncated["stdout"]
    res.stderr_truncated = res.stderr_truncated or any_truncated["stderr"]
    res.cpu_time_s, res.peak_memory_mb = cpu_total, peak
    if out.status is None:
        out.status = Outcome.PASSED if all(t.passed for t in res.tests) else Outcome.FAILED
        if any(t.error and t.error.startswith("exit code") for t in res.tests) and \
                not any(t.passed for t in res.tests):
            out.status = Outcome.ERROR
            out.detail.append("the program exited with an error on every case")
    res.status = out.status
    res.detail = "; ".join(out.detail)
    res.wall_time_s = time.monotonic() - started
    return res, healthy
