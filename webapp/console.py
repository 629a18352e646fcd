"""What `make run` prints: every line a service writes goes to its log file under the data dir; the
terminal gets only warnings, errors, tracebacks and run state changes (``VERBOSE=1``: every line).
A Python warning that several services print alike (Celery's superuser SecurityWarning, one per
worker) reaches the terminal once.
"""
from __future__ import annotations

import re
import subprocess
import threading
from pathlib import Path
from typing import IO, Callable

# The first line of a log record: Celery's "[2026-12-02 04:00:00,123: INFO/MainProcess] ...", Django's
# and daphne's "2026-12-02 04:00:00,123 INFO name: ...", daphne's access log "127.0.0.1:5000 - - [...]".
RECORD_START = re.compile(r"^(\[\d{4}-\d\d-\d\d[ T]|\d{4}-\d\d-\d\d[ T]\d|\S+:\d+ - - \[)")
LEVEL = re.compile(r"\b(DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)\b")
LOUD_LEVELS = frozenset({"WARNING", "WARN", "ERROR", "CRITICAL", "FATAL"})
# warnings.showwarning: "FILE:LINE: CATEGORY: MESSAGE" (the message may span lines), then the source
# line indented by two spaces.
PY_WARNING = re.compile(r"^\S+:\d+: (\w*Warning): (.*)$")
# services.notify_status logs each run state change as "run #ID “NAME”: STATUS ..." (webapp.runs.services).
RUN_STATE = re.compile(r"run #\d+ “.*”: (queued|running|cancelling|succeeded|failed|cancelled)\b")
LOUD_START = re.compile(r"^(Traceback \(most recent call last\):|Error:|error:|Usage:)")


class SeenWarnings:
    """The Python warnings already shown, shared by every service's :class:`Echo` (their threads race)."""

    def __init__(self):
        self._keys: set[str] = set()
        self._lock = threading.Lock()

    def first_time(self, key: str) -> bool:
        with self._lock:
            new = key not in self._keys
            self._keys.add(key)
            return new


class Echo:
    """Decides, line by line, which lines of one service's output reach the terminal.

    A record's continuation lines (a traceback's frames, a multi-line message) follow the decision
    on its first line. ``seen_warnings`` is shared by every service's Echo: a Python warning already
    shown, by any service, is not shown again (in either mode).
    """

    def __init__(self, verbose: bool, seen_warnings: SeenWarnings):
        self.verbose, self.seen = verbose, seen_warnings
        self.echoing = verbose
        self.in_warning = False

    def __call__(self, line: str) -> bool:
        warning = PY_WARNING.match(line)
        if warning:
            key = f"{warning.group(1)}: {warning.group(2)}"
            self.echoing = self.seen.first_time(key)
            self.in_warning = True
            return self.echoing
        if self.in_warning and line.startswith("  "):  # the warning's source line: its last
            self.in_warning = False
            shown, self.echoing = self.echoing, self.verbose
            return shown
        if RECORD_START.match(line) or LOUD_START.match(line):
            self.in_warning = False
            level = LEVEL.search(line[:80])
            self.echoing = (self.verbose or bool(LOUD_START.match(line)) or bool(RUN_STATE.search(line))
                            or bool(level and level.group(1) in LOUD_LEVELS))
        return self.echoing


class ServiceOutput:
    """Starts services with their output piped through an :class:`Echo` into ``LOG_DIR/<name>.log``."""

    def __init__(self, log_dir: Path, *, verbose: bool, write: Callable[[str], None]):
        self.log_dir, self.verbose, self.write = log_dir, verbose, write
        self.seen_warnings = SeenWarnings()
        log_dir.mkdir(parents=True, exist_ok=True)

    def log_path(self, name: str) -> Path:
        return self.log_dir / f"{name}.log"

    def start(self, name: str, command: list[str], *, cwd: Path, env: dict) -> subprocess.Popen:
        # Own session per child: Ctrl-C reaches only the launcher, which stops each child's whole group.
        proc = subprocess.Popen(command, cwd=cwd, env=env, start_new_session=True, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        echo = Echo(self.verbose, self.seen_warnings)
        threading.Thread(target=self._pump, args=(name, proc.stdout, echo), daemon=True,
                         name=f"output-{name}").start()
        return proc

    def _pump(self, name: str, stream: IO[bytes], echo: Echo) -> None:
        with open(self.log_path(name), "a", encoding="utf-8", errors="replace") as log:
            for raw in iter(stream.readline, b""):
                line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
                log.write(line + "\n")
                log.flush()
                if echo(line):
                    self.write(f"[{name}] {line}")
        stream.close()
