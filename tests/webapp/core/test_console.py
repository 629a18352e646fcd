"""`make run`'s terminal: one screen of what matters, then warnings, errors and run state changes only;
every service line in its log file; a warning that each worker prints alike, once."""
import os
import sys
import textwrap
import threading
import time

from webapp.console import Echo, SeenWarnings, ServiceOutput

CELERY_INFO = ("[2026-12-02 04:00:00,123: INFO/Beat] Scheduler: Sending due task runs.fail_lost_runs "
               "(runs.fail_lost_runs)")
CELERY_WARNING = ("[2026-12-02 04:00:01,000: WARNING/ForkPoolWorker-1] runs [3] lost their worker; their last lines "
                  "are recorded")
RUN_STATE = "[2026-12-02 04:00:02,000: INFO/ForkPoolWorker-1] run #3 “demo”: succeeded at step 200"
DJANGO_ERROR = "2026-12-02 04:00:03,000 ERROR django.request: Internal Server Error: /runs/3/"
ACCESS = '127.0.0.1:50312 - - [02/Dec/2026:04:00:04] "GET /runs/3/" 200 18234'

# A service printing what a Celery worker prints as root: Python's warning of Celery's SecurityWarning
# (a multi-line message, then the source line), its INFO lines, a warning, a run state change, a traceback.
SERVICE = textwrap.dedent(f'''
    import sys, warnings
    class SecurityWarning(UserWarning):
        pass
    warnings.warn(SecurityWarning("You're running the worker with superuser privileges: this is\\n"
                                  "absolutely not recommended!\\n\\nUser information: uid=0 euid=0 gid=0 egid=0\\n"))
    print({CELERY_INFO!r})
    print({CELERY_WARNING!r})
    print({RUN_STATE!r})
    print({ACCESS!r})
    print({CELERY_INFO!r}, flush=True)
    raise SystemExit(0)
''')


def echo_of(lines, verbose=False, seen=None):
    echo = Echo(verbose, seen or SeenWarnings())
    return [line for line in lines if echo(line)]


def test_info_lines_stay_in_the_log_and_warnings_errors_and_run_states_reach_the_terminal():
    shown = echo_of([CELERY_INFO, CELERY_WARNING, ACCESS, RUN_STATE, DJANGO_ERROR, CELERY_INFO])
    assert shown == [CELERY_WARNING, RUN_STATE, DJANGO_ERROR]


def test_a_tracebacks_lines_follow_its_first_line():
    traceback = ["Traceback (most recent call last):", '  File "x.py", line 1, in <module>', "ValueError: boom"]
    assert echo_of([CELERY_INFO, "   and a continuation of it"] + traceback + [CELERY_INFO]) == traceback
    error = [DJANGO_ERROR] + traceback
    assert echo_of([ACCESS] + error + [ACCESS]) == error


def test_verbose_shows_every_line():
    lines = [CELERY_INFO, "  -------------- celery@host v5.4", ACCESS, CELERY_WARNING]
    assert echo_of(lines, verbose=True) == lines


def test_the_same_python_warning_from_two_services_is_shown_once_in_either_mode():
    warning = ["/venv/celery/platforms.py:905: SecurityWarning: You're running the worker with superuser "
               "privileges: this is",
               "absolutely not recommended!", "", "User information: uid=0 euid=0 gid=0 egid=0", "",
               "  warnings.warn(SecurityWarning(ROOT_DISCOURAGED.format("]
    for verbose in (False, True):
        seen = SeenWarnings()
        first, second = Echo(verbose, seen), Echo(verbose, seen)
        assert [line for line in warning if first(line)] == warning
        assert [line for line in warning if second(line)] == []
        # The second service's next lines are judged afresh.
        assert second("  -------------- celery@host v5.4") == verbose and second(CELERY_WARNING)


def test_services_write_every_line_to_their_log_and_the_terminal_gets_one_warning(tmp_path):
    shown, lock = [], threading.Lock()

    def write(line):
        with lock:
            shown.append(line)

    output = ServiceOutput(tmp_path / "logs", verbose=False, write=write)
    procs = [output.start(name, [sys.executable, "-c", SERVICE], cwd=tmp_path, env=dict(os.environ))
             for name in ("worker-gpu", "worker-sandbox")]
    for proc in procs:
        assert proc.wait(30) == 0
    deadline = time.monotonic() + 10
    while len(shown) < 8 and time.monotonic() < deadline:  # the pumps finish after the processes end
        time.sleep(0.05)
    time.sleep(0.2)
    warnings = [line for line in shown if "SecurityWarning" in line]
    assert len(warnings) == 1, shown
    for name in ("worker-gpu", "worker-sandbox"):
        assert f"[{name}] {CELERY_WARNING}" in shown and f"[{name}] {RUN_STATE}" in shown
        assert not any(CELERY_INFO in line or ACCESS in line for line in shown)
        log = (tmp_path / "logs" / f"{name}.log").read_text()
        assert log.count(CELERY_INFO) == 2 and ACCESS in log and "SecurityWarning" in log and RUN_STATE in log
    assert output.log_path("web") == tmp_path / "logs" / "web.log"


def test_a_failed_background_build_names_its_log(tmp_path):
    from webapp.launcher import BackgroundBuilds

    said = []
    output = ServiceOutput(tmp_path / "logs", verbose=False, write=lambda line: None)
    builds = BackgroundBuilds({"broken": [sys.executable, "-c", "print('no room left'); raise SystemExit(3)"]},
                              dict(os.environ), say=said.append, output=output)
    deadline = time.monotonic() + 30
    while builds.procs and time.monotonic() < deadline:
        builds.check()
        time.sleep(0.05)
    log = tmp_path / "logs" / "build-broken.log"
    assert any(f"models/broken failed (status 3) (its log: {log})" in line for line in said), said
    deadline = time.monotonic() + 5
    while "no room left" not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "no room left" in log.read_text()


def test_the_ready_screen_names_the_address_the_password_file_the_logs_and_how_to_stop(tmp_path):
    from webapp.launcher import ready_screen

    (tmp_path / "admin-password.txt").write_text("username: admin\npassword: x\n")
    output = ServiceOutput(tmp_path / "logs", verbose=False, write=print)
    screen = "\n".join(ready_screen(8000, tmp_path, output, ["worker-gpu", "worker-sandbox", "web"], verbose=False))
    assert "http://127.0.0.1:8000/" in screen and str(tmp_path / "admin-password.txt") in screen
    assert f"{tmp_path / 'logs'}/{{worker-gpu,worker-sandbox,web}}.log" in screen
    assert "Ctrl-C" in screen and "make run VERBOSE=1" in screen
    assert len(screen.splitlines()) <= 10  # one screen, with room for what follows
    verbose = "\n".join(ready_screen(8000, tmp_path, output, ["web"], verbose=True))
    assert "every service line is printed here too" in verbose
