"""Process backend specifics: honest isolation reports, the rlimits-only fallback, import cost."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from sandbox.isolation.credentials import ThreadCredentials
from sandbox.backends.process import ProcessExecutor
from sandbox.result import Outcome

from .conftest import fn_problem, limits

SQUARE = fn_problem(["assert f(2) == 4"])
GOOD = "def f(x):\n    return x * x\n"


def test_bubblewrap_results_list_the_mechanisms_applied():
    with ProcessExecutor("cold") as ex:
        res = ex.run(SQUARE, GOOD, limits(SQUARE))
    assert res.status is Outcome.PASSED and res.isolation == "bwrap"
    assert {"user_ns", "pid_ns", "net_ns", "mount_ns", "rlimits"} <= set(res.isolation_features)


def test_without_seccomp_the_result_does_not_claim_it():
    with ProcessExecutor("cold", use_seccomp=False) as ex:
        res = ex.run(SQUARE, GOOD, limits(SQUARE))
    assert res.status is Outcome.PASSED and "seccomp" not in res.isolation_features


def test_without_bubblewrap_it_runs_and_reports_rlimits_isolation():
    with ProcessExecutor("warm", use_bwrap=False) as ex:
        res = ex.run(SQUARE, GOOD, limits(SQUARE))
        forged = ex.run(SQUARE, "class A:\n    def __eq__(s, o): return True\ndef f(x): return A()",
                        limits(SQUARE))
        loop = ex.run(SQUARE, "while True: pass", limits(SQUARE))
    assert res.status is Outcome.PASSED and res.isolation == "rlimits"
    assert not {"user_ns", "pid_ns", "net_ns", "mount_ns", "seccomp"} & set(res.isolation_features)
    assert forged.status is Outcome.FAILED  # verdicts are decided outside, whatever the isolation
    assert loop.status is Outcome.TIMEOUT


DEV_CHECK = fn_problem(["assert f() == (sorted(DEVICES), 8, '/tmp', True, False)"],
                       setup="DEVICES = ['full', 'null', 'random', 'urandom', 'zero']")
DEV_PROGRAM = """
import os
def f():
    chars = sorted(n for n in os.listdir('/dev') if not os.path.islink(f'/dev/{n}')
                   and os.stat(f'/dev/{n}').st_mode & 0o170000 == 0o020000)
    with open('/dev/null', 'w') as fh:
        fh.write('discarded')
    with open('/dev/shm/x', 'w') as fh:
        fh.write('x')
    try:
        open('/dev/added', 'w').close()
        dev_writable = True
    except OSError:
        dev_writable = False
    return (chars, len(open('/dev/urandom', 'rb').read(8)), os.path.realpath('/dev/shm'),
            os.path.exists('/tmp/x'), dev_writable)
"""


@pytest.mark.parametrize("prepared", [True, False], ids=["prepared-dev", "device-binds"])
def test_dev_holds_the_usual_devices_and_links_shm_to_the_scratch(prepared, monkeypatch):
    """/dev is the harness directory's prepared dev/ (one mount) where device nodes can be made
    there, else a directory of the read-only root with the host's devices bound one by one."""
    from sandbox.backends import process
    process.harness_dir()
    if not prepared:
        monkeypatch.setattr(process, "_DEV_READY", [False])
    elif not process._DEV_READY[0]:
        pytest.skip("device nodes cannot be made in the harness directory here")
    with ProcessExecutor("cold") as ex:
        res = ex.run(DEV_CHECK, DEV_PROGRAM, limits(DEV_CHECK))
    assert res.status is Outcome.PASSED, res.to_dict()


def test_importing_sandbox_pulls_in_neither_torch_nor_django_nor_threads():
    code = ("import sys, threading, sandbox; from sandbox import Runner, Problem, check_problems\n"
            "assert 'torch' not in sys.modules and 'django' not in sys.modules, 'heavy import'\n"
            "assert threading.active_count() == 1\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def _status(pid: int | str) -> dict[str, str]:
    with open(f"/proc/{pid}/status") as f:
        return dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)


@pytest.mark.skipif(not ThreadCredentials.supported(), reason="needs root on x86_64/aarch64")
def test_only_the_starting_thread_drops_to_nobody_and_it_comes_back():
    import os
    import threading
    seen: dict = {}
    inside, done = threading.Event(), threading.Event()

    def start():
        with ThreadCredentials():
            seen["thread"] = os.getresuid(), os.getresgid(), os.getgroups()
            seen["child"] = subprocess.run(["cat", "/proc/self/status"], capture_output=True,
                                           text=True).stdout
            inside.set()
            done.wait(10)
        seen["after"] = os.getresuid(), os.getresgid()

    groups = os.getgroups()
    t = threading.Thread(target=start)
    t.start()
    assert inside.wait(10)
    assert os.getresuid() == (0, 0, 0) and os.getgroups() == groups  # the rest of the process
    done.set()
    t.join()
    assert seen["thread"] == ((65534, 65534, 0), (65534, 65534, 65534), [])
    child = dict(line.split(":\t", 1) for line in seen["child"].splitlines() if ":\t" in line)
    assert child["Uid"].split() == ["65534"] * 4 and child["Gid"].split() == ["65534"] * 4
    assert child["Groups"].strip() == ""
    assert all(int(child[c], 16) == 0 for c in ("CapPrm", "CapEff", "CapInh", "CapAmb"))
    assert seen["after"] == ((0, 0, 0), (0, 0, 0))


@pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox drops to nobody only when started by root")
def test_bubblewrap_itself_runs_as_nobody_without_capabilities():
    with ProcessExecutor("warm") as ex:
        w = ex._borrow(limits(SQUARE))
        try:
            status = _status(w.proc.pid)  # the host-side bubblewrap process
        finally:
            ex._give_back(w, True)
    assert status["Uid"].split() == ["65534"] * 4 and status["Gid"].split() == ["65534"] * 4
    assert int(status["CapEff"], 16) == 0 and int(status["CapPrm"], 16) == 0


@pytest.mark.skipif(os.geteuid() != 0, reason="cgroups need root here")
def test_a_cgroups_process_list_is_current_at_every_read():
    """cgroup v1 caches a cgroup.procs listing per open file: a kept descriptor re-read from
    offset 0 answered one read late, so the sweep after an execution missed new strays."""
    from sandbox.isolation.cgroups import CgroupRoot
    cg = CgroupRoot.get().new_group()
    if not cg.paths:
        pytest.skip(f"no cgroups: {cg.errors}")
    try:
        assert cg.procs() == []
        p = subprocess.Popen(["sleep", "30"])
        try:
            cg.add(p.pid)
            assert cg.procs() == [p.pid]
        finally:
            p.kill()
            p.wait()
        assert cg.procs() == []
    finally:
        cg.destroy()


@pytest.mark.skipif(not ThreadCredentials.supported(), reason="needs root on x86_64/aarch64")
def test_concurrent_starts_leave_the_process_dumpable():
    import ctypes
    import threading
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.prctl(3, 0, 0, 0, 0) == 1  # PR_GET_DUMPABLE

    def start_some():
        for _ in range(30):
            with ThreadCredentials():
                subprocess.run(["true"])

    threads = [threading.Thread(target=start_some) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert libc.prctl(3, 0, 0, 0, 0) == 1


@pytest.mark.skipif(not ThreadCredentials.supported() or not shutil.which("setpriv"),
                    reason="needs root, setpriv and ThreadCredentials")
def test_with_ambient_capabilities_sandboxes_start_through_setpriv_and_get_none():
    """Ambient capabilities survive a drop that keeps the saved uid 0: such a process must not
    use ThreadCredentials (setpriv changes every id and so clears them)."""
    import json
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        problem = os.path.join(d, "p.json")
        code = os.path.join(d, "c.py")
        with open(problem, "w") as f:
            json.dump({"id": "p", "kind": "stdio", "test_cases": [{"input": "", "output": "0"}]}, f)
        with open(code, "w") as f:
            f.write("print(int(open('/proc/self/status').read().split('CapEff:')[1].split()[0], 16))\n")
        caps = "+dac_override,+dac_read_search"
        out = subprocess.run(
            ["setpriv", f"--inh-caps={caps}", f"--ambient-caps={caps}", "--", sys.executable, "-c",
             "import sys; from sandbox.isolation.credentials import ThreadCredentials as T; "
             "print(T.supported()); from sandbox import cli; sys.exit(cli.main(['run', '--problem', "
             f"{problem!r}, '--code', {code!r}]))"],
            capture_output=True, text=True, timeout=120, cwd=os.path.dirname(os.path.dirname(
                os.path.dirname(os.path.abspath(__file__)))))
    assert out.returncode == 0, out.stderr[-2000:]
    first, result = out.stdout.split("\n", 1)
    assert first == "False"
    assert json.loads(result)["status"] == "passed", result  # the payload's CapEff is 0


def test_without_bubblewrap_the_spawning_thread_never_drops_itself(monkeypatch):
    entered = []
    monkeypatch.setattr(ThreadCredentials, "__enter__", lambda self: entered.append(1) or self)
    with ProcessExecutor("warm", use_bwrap=False) as ex:
        res = ex.run(SQUARE, GOOD, limits(SQUARE))
    assert res.status is Outcome.PASSED and res.isolation == "rlimits" and entered == []


def test_a_spawner_thread_with_other_credentials_starts_nothing():
    from sandbox.protocol.channel import WorkerBroken
    with ProcessExecutor("warm") as ex:
        ex._credentials = (12345, 12345, 12345)  # as if this thread had failed to come back
        with pytest.raises(WorkerBroken, match="refusing"):
            ex._spawner.submit(ex._start, limits(SQUARE), False).result()


@pytest.mark.skipif(os.geteuid() != 0, reason="cgroups need root here")
def test_cgroups_missing_a_controller_are_not_reused():
    from sandbox.isolation.cgroups import CgroupRoot
    cg = CgroupRoot.get().new_group()
    if len(cg.paths) < 2:
        pytest.skip(f"needs pids and memory cgroups: {cg.errors}")
    gone = None
    try:
        assert cg.reusable() is (not any(cg.v2.values()))
        gone = cg.paths.pop("memory")  # as when a worker could not join it
        assert not cg.reusable()
    finally:
        cg.destroy()
        if gone:
            os.rmdir(gone)


@pytest.mark.skipif(os.geteuid() != 0, reason="cgroups need root here")
def test_the_sweep_kills_every_process_but_the_ones_kept():
    from sandbox.isolation.cgroups import CgroupRoot
    cg = CgroupRoot.get().new_group()
    if not cg.paths:
        pytest.skip(f"no cgroups: {cg.errors}")
    kept, stray = subprocess.Popen(["sleep", "30"]), subprocess.Popen(["sleep", "30"])
    try:
        cg.add(kept.pid)
        assert cg.sweep({kept.pid}) == 0
        cg.add(stray.pid)
        assert cg.sweep({kept.pid}) == 1
        assert stray.wait(timeout=5) == -9 and kept.poll() is None
        assert cg.sweep({kept.pid}) == 0
    finally:
        for p in (kept, stray):
            p.kill()
            p.wait()
        cg.destroy()


def test_harness_directories_of_ended_processes_are_removed(tmp_path):
    from sandbox.backends import process
    ended = subprocess.Popen(["true"])
    ended.wait()
    stale = tmp_path / f"crucible-harness-{ended.pid}-abc"
    alive = tmp_path / f"crucible-harness-{os.getppid()}-def"
    other = tmp_path / "crucible-harness-xyz"  # not ours to judge
    for d in (stale, alive, other):
        (d / "dev").mkdir(parents=True)
    link = tmp_path / f"crucible-harness-{ended.pid}-link"  # a link is never followed
    link.symlink_to(alive)
    process._remove_stale_harness_dirs(str(tmp_path))
    assert not stale.exists() and alive.exists() and other.exists() and link.is_symlink()
