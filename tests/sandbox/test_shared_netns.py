"""cold mode's reused network namespaces (process backend `Home`s): a sandbox never shares its
network namespace with a running sandbox, finds nothing a previous one left in it, and cannot
reconfigure it."""

from __future__ import annotations

import textwrap
import time

import pytest

from sandbox.backends.process import ProcessExecutor
from sandbox.isolation.netns import shared_netns_supported
from sandbox.isolation.programs import find_bwrap
from sandbox.result import Outcome
from sandbox.runner import Candidate, Runner

from .conftest import fn_problem, limits

pytestmark = pytest.mark.skipif(
    not (find_bwrap() and shared_netns_supported()),
    reason="reused network namespaces need bubblewrap and root (setns)")

# f() prints its netns and whether a listener left by an earlier execution answered; it then
# leaves a listener of its own behind in a double-forked daemon (killed at the end of the run).
LEAVE_LISTENER = textwrap.dedent("""
    import os, socket, time
    NAME = b'\\0crucible-netns-probe'
    def f():
        ns = os.readlink('/proc/self/ns/net')
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(NAME)
            answered = True
        except OSError:
            answered = False
        s.close()
        r, w = os.pipe()
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    srv.bind(NAME)
                    srv.listen(8)
                except OSError:
                    pass
                os.write(w, b'x')
                while True:
                    try:
                        srv.accept()[0].send(b'hi')
                    except OSError:
                        time.sleep(0.01)
            os._exit(0)
        os.read(r, 1)  # the daemon listens now
        print(ns, 'answered' if answered else 'silent', flush=True)
""")


def test_nothing_of_an_execution_survives_into_the_next_in_the_same_netns():
    problem = fn_problem(["assert f() is None"], time_limit_s=5.0)
    seen = []
    with ProcessExecutor("cold") as ex:
        for _ in range(8):
            res = ex.run(problem, LEAVE_LISTENER, limits(problem))
            assert res.status is Outcome.PASSED, res.to_dict()
            seen.append(res)
            time.sleep(0.3)  # let the executor take the Home back, so the next run reuses it
    lines = [r.stdout.split() for r in seen]
    assert all("net_ns_reused" in r.isolation_features for r in seen)
    assert all(len(x) == 2 and x[0].startswith("net:[") for x in lines), lines
    namespaces = [x[0] for x in lines]
    assert len(set(namespaces)) < len(namespaces), "no namespace was reused: the test proves nothing"
    assert all(x[1] == "silent" for x in lines), lines  # no earlier run's listener answered


CONCURRENT = textwrap.dedent("""
    import os, socket, time
    def f(role):
        ns = os.readlink('/proc/self/ns/net')
        name = b'\\0crucible-concurrent-probe'
        end = time.monotonic() + 1.5
        if role == 'listen':
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.bind(name)
            s.listen(8)
            s.settimeout(0.05)
            while time.monotonic() < end:
                try:
                    s.accept()
                    return print(ns, 'contacted', flush=True)
                except OSError:
                    pass
            return print(ns, 'alone', flush=True)
        while time.monotonic() < end:
            c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                c.connect(name)
                return print(ns, 'contacted', flush=True)
            except OSError:
                time.sleep(0.02)
            finally:
                c.close()
        return print(ns, 'alone', flush=True)
""")


def test_concurrent_candidates_cannot_reach_each_other():
    listen = fn_problem(["assert f('listen') is None"], time_limit_s=5.0, pid="listen")
    connect = fn_problem(["assert f('connect') is None"], time_limit_s=5.0, pid="connect")
    cands = [Candidate("listen", code=CONCURRENT), Candidate("connect", code=CONCURRENT)] * 3
    with Runner(workers=2, mode="cold") as runner:
        results = runner.run_batch([listen, connect], cands)
    assert all(r.status is Outcome.PASSED for r in results), [r.to_dict() for r in results]
    lines = [r.stdout.split() for r in results]
    assert all(len(x) == 2 and x[0].startswith("net:[") for x in lines), lines
    assert all(x[1] == "alone" for x in lines), lines
    for a, b in zip(lines[0::2], lines[1::2]):  # each pair ran at the same time, 1.5 s each
        assert a[0] != b[0], lines


def test_the_payload_cannot_reconfigure_its_netns():
    problem = fn_problem(["assert f() == ['down', 'EPERM', 'down', 'refused']"])
    code = textwrap.dedent("""
        import errno, fcntl, socket, struct
        SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 1
        def flags(s):
            return struct.unpack('16sH', fcntl.ioctl(s, SIOCGIFFLAGS, struct.pack('16sH', b'lo', 0)))[1]
        def f():
            s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            out = ['up' if flags(s) & IFF_UP else 'down']
            try:
                fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack('16sH', b'lo', flags(s) | IFF_UP))
                out.append('changed')
            except OSError as e:
                out.append(errno.errorcode.get(e.errno, str(e.errno)))
            out.append('up' if flags(s) & IFF_UP else 'down')
            try:
                open('/proc/sys/net/ipv4/ip_forward', 'w').write('1')
                out.append('sysctl written')
            except OSError:
                out.append('refused')
            return out
    """)
    with ProcessExecutor("cold") as ex:
        for _ in range(2):
            res = ex.run(problem, code, limits(problem))
            assert res.status is Outcome.PASSED, res.to_dict()
            assert "net_ns_reused" in res.isolation_features


def test_without_homes_each_sandbox_makes_its_own_netns():
    problem = fn_problem(["assert f(2) == 4"])
    with ProcessExecutor("cold", reuse_homes=False) as ex:
        res = ex.run(problem, "def f(x):\n    return x * x\n", limits(problem))
    assert res.status is Outcome.PASSED
    assert "net_ns" in res.isolation_features and "net_ns_reused" not in res.isolation_features


def _settle(ex, n_homes: int = 1) -> None:
    """Wait until the reaper has taken every sandbox's Home back."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (ex._reap_queue or len(ex._homes) < n_homes):
        time.sleep(0.02)


def test_a_home_keeps_its_cgroups_only_while_they_are_empty():
    import subprocess
    problem = fn_problem(["assert f() == 1"])
    code = "def f():\n    return 1\n"
    with ProcessExecutor("cold") as ex:
        assert ex.run(problem, code, limits(problem)).status is Outcome.PASSED
        _settle(ex)
        (home,) = ex._homes
        assert home.cgroup is not None and home.cgroup.procs() == []
        paths = dict(home.cgroup.paths)
        assert ex.run(problem, code, limits(problem)).status is Outcome.PASSED
        _settle(ex)
        assert ex._homes == [home] and home.cgroup.paths == paths  # the same cgroups, reused

        # A process still in them when the sandbox is taken back: they are removed, not kept.
        w = ex._borrow(limits(problem))
        assert w.home is home and w.cgroup is home.cgroup
        straggler = subprocess.Popen(["sleep", "30"])
        try:
            w.cgroup.add(straggler.pid)
            ex._give_back(w, True)
            _settle(ex)
            assert home.cgroup is None
            assert straggler.wait(timeout=5) == -9  # killed with the cgroups
        finally:
            straggler.kill()
        assert ex.run(problem, code, limits(problem)).status is Outcome.PASSED
        _settle(ex)
        assert home.cgroup is not None and home.cgroup.paths != paths  # fresh ones
