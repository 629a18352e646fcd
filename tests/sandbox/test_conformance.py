"""One conformance suite for every available backend: benign programs pass, attacks are contained,
verdicts cannot be forged. Limits are small (1 s, 128 MB) to keep the suite quick on 2 shared cores."""

from __future__ import annotations

import textwrap


from sandbox.result import Outcome

from .conftest import fn_problem, limits, stdio_problem


def run(executor, problem, code, **limit_overrides):
    code = textwrap.dedent(code)
    return executor.run(problem, code, limits(problem, **limit_overrides))


def assert_not_passed_and_all_listed(res, problem):
    assert res.status is not Outcome.PASSED
    assert res.tests_total == len(problem.tests or problem.test_cases)
    assert not any(t.passed for t in res.tests), [t.to_dict() for t in res.tests]


SQUARE = fn_problem(["assert f(2) == 4", "assert f(3) == 9", "assert f(-4) == 16"])


# --- benign programs ---------------------------------------------------------------------------

def test_a_correct_function_passes_every_test(executor):
    res = run(executor, SQUARE, "def f(x):\n    return x * x\n")
    assert res.status is Outcome.PASSED, res.to_dict()
    assert (res.tests_passed, res.tests_total) == (3, 3)
    assert res.isolation != "none" and "rlimits" in res.isolation_features


def test_a_wrong_function_fails_only_its_wrong_tests(executor):
    res = run(executor, SQUARE, "def f(x):\n    return 4 if x == 2 else 9\n")
    assert res.status is Outcome.FAILED
    assert [t.passed for t in res.tests] == [True, True, False]
    assert "AssertionError" in res.tests[2].error


def test_stdlib_programs_pass(executor):
    p = fn_problem(["assert f('b a b') == [('b', 2), ('a', 1)]", "assert f('') == []"])
    res = run(executor, p, """
        import collections, itertools, functools, heapq, json, re, math, fractions, decimal
        def f(s):
            words = re.findall(r"\\w+", s)
            assert json.loads(json.dumps(words)) == words
            return collections.Counter(words).most_common()
    """)
    assert res.status is Outcome.PASSED, res.to_dict()


def test_moderate_recursion_passes(executor):
    p = fn_problem(["assert f(3000) == 3000"])
    res = run(executor, p, "def f(n):\n    return 0 if n == 0 else 1 + f(n - 1)\n")
    assert res.status is Outcome.PASSED, res.to_dict()


def test_a_50_mb_allocation_passes(executor):
    p = fn_problem(["assert f() == 50 * 1024 * 1024"], memory_limit_mb=256)
    res = run(executor, p, """
        def f():
            buf = bytearray(50 * 1024 * 1024)
            for i in range(0, len(buf), 4096):
                buf[i] = 1
            return len(buf)
    """)
    assert res.status is Outcome.PASSED, res.to_dict()


def test_ten_thousand_printed_lines_pass_and_are_captured(executor):
    p = fn_problem(["assert f() == 10000"])
    res = run(executor, p, """
        def f():
            for i in range(10000):
                print("line", i)
            return 10000
    """)
    assert res.status is Outcome.PASSED, res.to_dict()
    assert res.stdout.count("\n") == 10000 and not res.stdout_truncated


def test_a_stdin_program_passes(executor):
    p = stdio_problem([("3\n1 2 3\n", "6\n"), ("2\n10 -1\n", "9\n")])
    res = run(executor, p, "input()\nprint(sum(map(int, input().split())))\n")
    assert res.status is Outcome.PASSED, res.to_dict()


def test_stdio_output_is_compared_whole(executor):
    p = stdio_problem([("", "1 2 3\n")], checker="exact")
    assert run(executor, p, "print('1 2')").status is Outcome.FAILED  # a prefix
    assert run(executor, p, "print('1 2 3 4')").status is Outcome.FAILED  # extra output
    crash = run(executor, p, "print('1 2 3')\nraise SystemExit(3)")
    assert crash.status is not Outcome.PASSED and crash.exit_code == 3
    assert run(executor, p, "print('1 2 3')").status is Outcome.PASSED


def test_the_float_checker_accepts_small_differences(executor):
    p = stdio_problem([("", "0.333333\n")], checker="float:1e-4")
    assert run(executor, p, "print(1/3)").status is Outcome.PASSED
    assert run(executor, p, "print(0.34)").status is Outcome.FAILED


def test_a_syntax_error_is_reported_without_running(executor):
    res = run(executor, SQUARE, "def f(x) return x")
    assert res.status is Outcome.SYNTAX_ERROR and not res.syntax_ok
    assert res.tests_total == 3 and not any(t.passed for t in res.tests)


def test_an_exception_before_the_tests_is_an_error(executor):
    res = run(executor, SQUARE, "raise ValueError('boom')\n")
    assert res.status is Outcome.ERROR and "boom" in res.detail
    assert_not_passed_and_all_listed(res, SQUARE)


# --- resource attacks --------------------------------------------------------------------------

def test_an_infinite_loop_times_out(executor):
    res = run(executor, SQUARE, "while True:\n    pass\n", time_limit_s=1.0)
    assert res.status is Outcome.TIMEOUT
    assert_not_passed_and_all_listed(res, SQUARE)


def test_sleeping_past_the_limit_times_out(executor):
    res = run(executor, SQUARE, "def f(x):\n    import time; time.sleep(30)\n", time_limit_s=1.0)
    assert res.status is Outcome.TIMEOUT
    assert_not_passed_and_all_listed(res, SQUARE)


def test_a_loop_that_ignores_sigterm_times_out(executor):
    res = run(executor, SQUARE, """
        import signal
        for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGXCPU):
            signal.signal(s, signal.SIG_IGN)
        while True:
            pass
    """, time_limit_s=1.0)
    assert res.status is Outcome.TIMEOUT


def test_a_stdio_infinite_loop_times_out(executor):
    p = stdio_problem([("", "1\n")])
    res = run(executor, p, "while True: pass")
    assert res.status is Outcome.TIMEOUT and not res.tests[0].passed


def test_a_fork_bomb_is_contained(executor):
    p = fn_problem(["assert f() <= 64"])
    res = run(executor, p, """
        import os, time
        n = 0
        for _ in range(500):
            try:
                if os.fork() == 0:
                    time.sleep(60)
                    os._exit(0)
                n += 1
            except OSError:
                break
        def f():
            return n
    """)
    assert res.status is Outcome.PASSED, res.to_dict()  # forking stopped at the process cap


def test_an_endless_fork_bomb_ends_at_the_deadline(executor):
    res = run(executor, SQUARE, """
        import os
        while True:
            try:
                os.fork()
            except OSError:
                pass
    """, time_limit_s=1.0)
    assert res.status in (Outcome.TIMEOUT, Outcome.KILLED, Outcome.MEMORY), res.to_dict()


def test_a_thread_bomb_is_contained(executor):
    p = fn_problem(["assert f() <= 64"])
    res = run(executor, p, """
        import threading, time
        n = 0
        for _ in range(500):
            try:
                threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
                n += 1
            except (RuntimeError, MemoryError):
                break
        def f():
            return n
    """)
    assert res.status is Outcome.PASSED, res.to_dict()


def test_a_memory_bomb_ends_with_status_memory(executor):
    res = run(executor, SQUARE, """
        hog = []
        while True:
            hog.append(bytearray(8 * 1024 * 1024))
    """)
    assert res.status is Outcome.MEMORY, {k: v for k, v in res.to_dict().items() if k != "tests"}


def test_a_memory_bomb_split_across_children_is_contained(executor):
    p = fn_problem(["assert f() == 'done'"], memory_limit_mb=128, time_limit_s=2.0)
    res = run(executor, p, """
        import os, time
        kids = []
        for _ in range(4):
            pid = os.fork()
            if pid == 0:
                block = bytearray(60 * 1024 * 1024)
                for i in range(0, len(block), 4096):
                    block[i] = 1
                time.sleep(60)
                os._exit(0)
            kids.append(pid)
        time.sleep(1.0)
        def f():
            return 'done'
    """)
    if "cgroup_memory" in res.isolation_features:
        # 240 MB asked for under a 128 MB limit: the execution as a whole never got it.
        assert res.peak_memory_mb <= 128 + 64, res.to_dict()
    assert res.status in (Outcome.PASSED, Outcome.MEMORY, Outcome.KILLED), res.to_dict()


def test_a_stdout_flood_ends_with_output_limit(executor):
    res = run(executor, SQUARE, "while True:\n    print('x' * 10000)\n")
    assert res.status is Outcome.OUTPUT_LIMIT
    assert res.stdout_truncated and len(res.stdout.encode()) <= 1 << 20


def test_a_stderr_flood_ends_with_output_limit(executor):
    res = run(executor, SQUARE, "import sys\nwhile True:\n    sys.stderr.write('y' * 10000)\n")
    assert res.status is Outcome.OUTPUT_LIMIT
    assert res.stderr_truncated and len(res.stderr.encode()) <= 1 << 20


def test_one_big_file_is_capped(executor):
    p = fn_problem(["assert f() <= 16 * 1024 * 1024"])
    res = run(executor, p, """
        written = 0
        try:
            with open("big.bin", "wb", buffering=0) as fh:
                for _ in range(200):
                    written += fh.write(b"x" * (1 << 20))
        except OSError:
            pass
        def f():
            return written
    """)
    assert res.status is Outcome.PASSED, res.to_dict()


def test_many_files_are_capped_and_wiped_before_the_next_execution(executor):
    p = fn_problem(["assert f() >= 0"], time_limit_s=2.0)
    res = run(executor, p, """
        import os
        made = 0
        try:
            os.makedirs("d", exist_ok=True)
            for i in range(3000):
                with open(f"d/{i}", "wb") as fh:
                    fh.write(b"z" * 65536)
                made += 1
        except OSError:
            pass
        def f():
            return made
    """, scratch_mb=64)
    assert res.status is Outcome.PASSED, res.to_dict()
    after = run(executor, fn_problem(["assert f() == []"]), """
        import os, tempfile
        def f():
            return sorted(os.listdir(".")) + sorted(os.listdir(tempfile.gettempdir()))
    """)
    assert after.status is Outcome.PASSED, after.to_dict()


def test_shared_memory_files_are_wiped_before_the_next_execution(executor):
    res = run(executor, fn_problem(["assert f() == 1"]), """
        import os
        def f():
            with open("/dev/shm/left-behind", "w") as fh:
                fh.write("state for a later candidate")
            return len([n for n in os.listdir("/dev/shm") if n == "left-behind"])
    """)
    assert res.status is Outcome.PASSED, res.to_dict()
    after = run(executor, fn_problem(["assert f() == []"]), """
        import os
        def f():
            return sorted(os.listdir("/dev/shm"))
    """)
    assert after.status is Outcome.PASSED, after.to_dict()


# --- escapes -----------------------------------------------------------------------------------

BLOCKED = fn_problem(["assert f() == []"])


def test_network_to_loopback_services_is_blocked(executor):
    res = run(executor, BLOCKED, """
        import socket
        def f():
            reached = []
            for port in (5432, 6379, 22, 80):
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.3).close()
                    reached.append(port)
                except OSError:
                    pass
            return reached
    """)
    assert res.status is Outcome.PASSED, res.to_dict()


def test_network_to_the_outside_is_blocked(executor):
    res = run(executor, BLOCKED, """
        import socket
        def f():
            opened = []
            for family, kind in ((socket.AF_INET, socket.SOCK_STREAM), (socket.AF_INET, socket.SOCK_DGRAM),
                                 (socket.AF_INET6, socket.SOCK_STREAM), (socket.AF_NETLINK, socket.SOCK_RAW),
                                 (socket.AF_PACKET, socket.SOCK_RAW)):
                try:
                    s = socket.socket(family, kind)
                except OSError:
                    continue
                try:
                    s.settimeout(0.3)
                    s.connect(("1.1.1.1", 53)) if family == socket.AF_INET else None
                    opened.append(str(family))
                except OSError:
                    pass
                finally:
                    s.close()
            return opened
    """)
    assert res.status is Outcome.PASSED, res.to_dict()
    if "seccomp" in res.isolation_features:
        seccomp = run(executor, fn_problem(["assert f() == 'denied'"]), """
            import socket
            def f():
                try:
                    socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                    return 'created'
                except OSError:
                    return 'denied'
        """)
        assert seccomp.status is Outcome.PASSED, seccomp.to_dict()


def test_the_workers_environment_secrets_are_not_visible(executor):
    res = run(executor, BLOCKED, """
        import os
        def f():
            leaks = [k for k, v in os.environ.items() if 'hunter2' in v or 'SECRET' in k]
            for pid in [p for p in os.listdir('/proc') if p.isdigit()]:
                try:
                    if b'hunter2' in open(f'/proc/{pid}/environ', 'rb').read():
                        leaks.append(pid)
                except OSError:
                    pass
            return leaks
    """)
    assert res.status is Outcome.PASSED, res.to_dict()


def test_other_processes_are_not_visible_in_proc(executor):
    res = run(executor, BLOCKED, """
        import os
        def f():
            foreign = []
            for pid in [p for p in os.listdir('/proc') if p.isdigit()]:
                try:
                    cmd = open(f'/proc/{pid}/cmdline', 'rb').read()
                except OSError:
                    continue
                if b'harness.py' not in cmd and int(pid) != os.getpid():
                    foreign.append(cmd[:80].decode(errors='replace'))
            return foreign
    """)
    assert res.status is Outcome.PASSED, res.to_dict()


def test_files_outside_the_scratch_dir_cannot_be_read(executor):
    res = run(executor, BLOCKED, """
        import os
        def f():
            readable = []
            for path in ('/etc/shadow', '/etc/passwd', '/root', '/home', '/work', '/work/main',
                         '/var/lib/postgresql', '/proc/1/root/etc/shadow', '/sys/fs/cgroup',
                         '/run', '/var/run/redis'):
                try:
                    if os.path.isdir(path):
                        os.listdir(path)
                    else:
                        open(path, 'rb').read(1)
                    readable.append(path)
                except OSError:
                    pass
            return readable
    """)
    assert res.status is Outcome.PASSED, res.to_dict()


def test_nothing_outside_the_scratch_dir_can_be_written(executor):
    res = run(executor, BLOCKED, """
        import os
        def f():
            writable = []
            for d in ('/', '/usr', '/usr/lib', '/etc', '/opt/crucible', '/dev', '/proc/sys/kernel', '/var', '/home'):
                try:
                    with open(os.path.join(d, 'pwned'), 'w') as fh:
                        fh.write('x')
                    writable.append(d)
                except OSError:
                    pass
            return writable
    """)
    assert res.status is Outcome.PASSED, res.to_dict()


def test_the_only_writable_places_are_the_scratch_dir(executor):
    """Every mount the sandbox sees is tried, not a list of guesses: a read-write mount other than
    the scratch (a host directory bound in by mistake, say) fails this test."""
    # docker mounts a private /dev/shm tmpfs that its worker wipes like the scratch (see the
    # test above); the process backend links /dev/shm to the scratch itself.
    allowed = ["/tmp", "/dev/shm"] if executor.backend_id == "docker" else ["/tmp"]
    res = run(executor, BLOCKED, f"""
        import os
        SCRATCH = {allowed!r}
        def f():
            mounts = set()
            with open("/proc/self/mountinfo") as fh:
                for line in fh:
                    mounts.add(line.split()[4].replace("\\\\040", " "))
            writable = []

            def probe(d):
                try:
                    with open(os.path.join(d, ".probe"), "w"):
                        pass
                    writable.append(d)
                except OSError as e:
                    return e.errno
            for top in sorted(mounts):
                if top == "/proc" or top.startswith(("/proc/", "/sys")):
                    continue
                for root, dirs, files in os.walk(top):
                    dirs[:] = [d for d in dirs if os.path.join(root, d) not in mounts]
                    real = os.path.realpath(root)
                    if any(real == s or real.startswith(s + "/") for s in SCRATCH):
                        continue
                    if probe(root) == 30 and root == top:  # EROFS: the whole mount is read-only
                        break
            return writable
    """, time_limit_s=5.0)
    assert res.status is Outcome.PASSED, res.to_dict()


def test_the_hosts_temporary_files_are_not_visible(executor):
    import os
    import tempfile
    import uuid
    name = f"crucible-marker-{uuid.uuid4().hex}"
    marker = os.path.join(tempfile.gettempdir(), name)
    with open(marker, "w") as fh:
        fh.write("host secret")
    os.chmod(marker, 0o644)
    try:
        res = run(executor, BLOCKED, f"""
            import os
            def f():
                seen = []
                for top in ("/tmp", "/dev/shm", "/dev", "/opt", "/etc", "/var", "/run", "/home", "/root"):
                    for root, dirs, files in os.walk(top, followlinks=True):
                        if {name!r} in files:
                            seen.append(root)
                return seen
        """, time_limit_s=5.0)
    finally:
        os.unlink(marker)
    assert res.status is Outcome.PASSED, res.to_dict()


def test_a_double_forked_daemon_does_not_outlive_the_run(executor):
    res = run(executor, SQUARE, """
        import os, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                time.sleep(120)
            os._exit(0)
        time.sleep(0.1)
        def f(x):
            return x * x
    """)
    assert res.status is Outcome.PASSED, res.to_dict()
    after = run(executor, fn_problem(["assert f() == []"]), """
        import os
        def f():
            others = []
            for pid in [p for p in os.listdir('/proc') if p.isdigit()]:
                try:
                    stat = open(f'/proc/{pid}/stat').read()
                except OSError:
                    continue
                if int(pid) not in (os.getpid(), 1) and ' Z ' not in stat:
                    others.append(stat[:60])
            return others
    """)
    assert after.status is Outcome.PASSED, after.to_dict()


def test_killing_the_parent_changes_nothing(executor):
    res = run(executor, SQUARE, """
        import os, signal
        for target in (os.getppid(), 1, -1):
            for sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGSTOP):
                try:
                    if target == -1 and sig != signal.SIGSTOP:
                        continue
                    os.kill(target, sig)
                except OSError:
                    pass
        def f(x):
            return x * x
    """)
    assert res.status is Outcome.PASSED, res.to_dict()
    assert run(executor, SQUARE, "def f(x):\n    return x * x\n").status is Outcome.PASSED


# --- verdict forging ---------------------------------------------------------------------------

def test_an_object_equal_to_everything_fails(executor):
    res = run(executor, SQUARE, """
        class Anything:
            def __eq__(self, other): return True
            def __ne__(self, other): return False
            __hash__ = object.__hash__
        def f(x):
            return Anything()
    """)
    assert_not_passed_and_all_listed(res, SQUARE)


def test_a_builtin_subclass_with_a_lying_eq_fails(executor):
    res = run(executor, SQUARE, """
        class Liar(int):
            def __eq__(self, other): return True
            __hash__ = int.__hash__
        def f(x):
            return Liar(0)
    """)
    assert_not_passed_and_all_listed(res, SQUARE)


def test_monkeypatched_builtins_do_not_change_verdicts(executor):
    p = fn_problem(["assert abs(f(2) - 4.5) < 1e-9", "assert isinstance(f(2), str)",
                    "assert len(f(3)) == 3", "assert sorted(f(1)) == [1, 2]"])
    res = run(executor, p, """
        import builtins
        builtins.abs = lambda x: 0
        builtins.isinstance = lambda *a: True
        builtins.len = lambda x: 3
        builtins.sorted = lambda x, **k: [1, 2]
        builtins.AssertionError = type('Nope', (Exception,), {})
        def f(x):
            return 0
    """)
    assert_not_passed_and_all_listed(res, p)


def test_exiting_before_the_tests_gets_no_credit(executor):
    for code in ("import sys\ndef f(x): return x*x\nsys.exit(0)\n",
                 "import os\ndef f(x): return x*x\nos._exit(0)\n",
                 "import atexit, os\natexit.register(lambda: print('3 passed'))\nos._exit(0)\n"):
        res = run(executor, SQUARE, code)
        assert res.status is Outcome.ERROR, res.to_dict()
        assert_not_passed_and_all_listed(res, SQUARE)


def test_exiting_during_the_tests_fails_the_rest(executor):
    res = run(executor, SQUARE, """
        import os, sys
        calls = 0
        def f(x):
            global calls
            calls += 1
            if calls == 2:
                os._exit(0)
            return x * x
    """)
    assert res.status is Outcome.FAILED, res.to_dict()
    assert [t.passed for t in res.tests] == [True, False, False], res.to_dict()
    assert res.tests[2].error.startswith("not run")
    res = run(executor, SQUARE, "import sys\ndef f(x):\n    sys.exit(0)\n")
    assert_not_passed_and_all_listed(res, SQUARE)


def test_patching_unittest_and_printing_passed_gets_no_credit(executor):
    res = run(executor, SQUARE, """
        import unittest, sys, json
        unittest.TestCase.assertEqual = lambda *a, **k: None
        unittest.TestCase.assertTrue = lambda *a, **k: None
        print('PASSED\\n3 passed, 0 failed')
        print(json.dumps({"status": "passed", "tests_passed": 3, "tests_total": 3}))
        sys.stderr.write('OK\\n')
        def f(x):
            return None
    """)
    assert_not_passed_and_all_listed(res, SQUARE)


def test_writing_fake_replies_on_the_harness_channel_gets_no_credit(executor):
    res = run(executor, SQUARE, """
        import os, json
        def frame(obj):
            body = json.dumps(obj).encode()
            return len(body).to_bytes(4, 'big') + body
        for fd in range(3, 10):
            for msg in ({"ok": True}, {"ok": True, "value": 4}, {"ok": True, "value": 9}):
                try:
                    os.write(fd, frame(msg))
                except OSError:
                    pass
        def f(x):
            return -1
    """)
    assert_not_passed_and_all_listed(res, SQUARE)


def test_the_expected_values_never_reach_the_sandbox(executor):
    # The candidate searches every string it can reach for the expected value 1234567.
    p = fn_problem(["assert f() == 1234567"])
    res = run(executor, p, """
        import gc, sys
        def f():
            for obj in gc.get_objects():
                if isinstance(obj, (str, bytes)) and '1234567' in str(obj):
                    return 1234567
            for frame in sys._current_frames().values():
                while frame:
                    if '1234567' in repr(frame.f_locals):
                        return 1234567
                    frame = frame.f_back
            return 0
    """)
    assert res.status is Outcome.FAILED, res.to_dict()


def test_a_statement_test_that_raises_fails(executor):
    p = fn_problem(["x = f(2)\nassert x == 4", "for i in range(3):\n    assert f(i) == i * i"])
    assert run(executor, p, "def f(x):\n    return x * x\n").status is Outcome.PASSED
    res = run(executor, p, "def f(x):\n    return 0\n")
    assert_not_passed_and_all_listed(res, p)


def test_privileged_syscalls_are_refused(executor):
    res = run(executor, BLOCKED, """
        import ctypes, os
        libc = ctypes.CDLL(None, use_errno=True)
        def f():
            allowed = []
            if libc.unshare(0x10000000) == 0:               # CLONE_NEWUSER
                allowed.append('unshare')
            if libc.ptrace(16, 1, 0, 0) == 0:                # PTRACE_ATTACH to pid 1
                allowed.append('ptrace')
            if libc.mount(b'none', b'/tmp', b'tmpfs', 0, None) == 0:
                allowed.append('mount')
            if libc.ioctl(0, 0x5412, ctypes.c_char_p(b'x')) == 0:   # TIOCSTI
                allowed.append('tiocsti')
            return allowed
    """)
    assert res.status is Outcome.PASSED, res.to_dict()


def test_flooding_the_harness_channel_gets_no_credit(executor):
    res = run(executor, SQUARE, "import os\nwhile True:\n    os.write(4, b'x' * 65536)\n")
    assert_not_passed_and_all_listed(res, SQUARE)
    assert run(executor, SQUARE, "def f(x):\n    return x * x\n").status is Outcome.PASSED


LOOPED = fn_problem(["for x in range(5):\n    assert f(x) == x * x",
                     "for i in range(20):\n    a, b = random.randint(0, 99), random.randint(0, 99)\n"
                     "    assert add(a, b) == a + b",
                     "xs = []\nfor i in range(4):\n    xs.append(i)\nassert f(len(xs)) == 16"],
                    setup="import random\ndef add(a, b):\n    return f(a) - a * a + a + b\n")


def test_loop_tests_are_decided_outside_the_sandbox(executor):
    assert run(executor, LOOPED, "def f(x):\n    return x * x\n").status is Outcome.PASSED
    res = run(executor, LOOPED, """
        import builtins
        class Anything:
            def __eq__(self, other): return True
            __hash__ = object.__hash__
        builtins.range = lambda *a: [0]
        def f(x):
            return Anything() if x else 0
    """)
    assert_not_passed_and_all_listed(res, LOOPED)
    assert "decided there" not in res.detail  # no test was left to the sandbox's word


def test_a_loop_test_fails_on_the_first_wrong_value(executor):
    res = run(executor, LOOPED, "def f(x):\n    return x * x if x < 3 else 0\n")
    assert [t.passed for t in res.tests] == [False, False, False]
    assert res.tests[0].error == "AssertionError: assert f(x) == x * x"


def test_each_execution_gets_fresh_random_state_and_honest_streams(executor):
    p = fn_problem(["assert f() is False"])
    code = """
        import random, sys
        def f():
            print(random.random())
            return sys.stdout.seekable()  # a pipe: False
    """
    results = [run(executor, p, code) for _ in range(3)]
    assert all(r.status is Outcome.PASSED for r in results), [r.to_dict() for r in results]
    draws = {r.stdout for r in results}
    assert len(draws) == 3, draws


def test_interrupting_the_worker_changes_nothing(executor):
    res = run(executor, fn_problem(["assert f() == 1"]), """
        import os, signal, time
        def f():
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1):
                try:
                    os.kill(1, sig)
                except OSError:
                    pass
            time.sleep(0.2)
            return 1
    """)
    assert res.status is Outcome.PASSED, res.to_dict()
    assert run(executor, SQUARE, "def f(x):\n    return x * x\n").status is Outcome.PASSED
