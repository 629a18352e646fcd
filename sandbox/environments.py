"""Execution environments: the Python packages a problem (or its whole set) needs, built once per
distinct content on each host that runs them, mounted read-only into the sandbox.

An environment is a directory `<cache>/<key>/site` of packages installed by pip for the sandbox's own
interpreter (`pip --python <sandbox python> install --target ... --only-binary=:all:`: wheels only,
so building an environment never runs a package's own setup code on the host). `key` hashes the
sorted requirement list and the interpreter, so the same packages are built once and shared by
every problem, batch, Runner and process on the host (a file lock makes concurrent builders wait
for the first). The process backend binds the directory read-only at /opt/crucible-env in the
sandbox and puts it on the candidate's `sys.path`; nothing else changes (same user, namespaces,
seccomp, limits).

The cache is `CRUCIBLE_ENV_DIR`, else /var/cache/crucible/envs (root) or ~/.cache/crucible/envs.
Its directories must be readable by the sandbox user: they are made 0755 and owned by us, and a
cache root that someone else owns or may write is refused.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import threading
import time

from .problems import Environment

ENV_DIR_ENV = "CRUCIBLE_ENV_DIR"
SANDBOX_PATH = "/opt/crucible-env"
"""Where an environment's packages appear inside the sandbox."""
BUILD_TIMEOUT_S = 900.0
RETRY_FAILED_AFTER_S = 60.0
"""A build that failed is not tried again for this long: every candidate of a batch would otherwise
rebuild it in turn (a network outage clears after it)."""


class EnvironmentBuildError(RuntimeError):
    """pip could not build an environment; the message names the packages and quotes pip."""


def cache_root() -> str:
    """The environment cache directory of this host (see the module docstring)."""
    given = os.environ.get(ENV_DIR_ENV)
    if given:
        return os.path.abspath(given)
    if os.geteuid() == 0:
        return "/var/cache/crucible/envs"
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "crucible", "envs")


def _interpreter() -> tuple[str, str]:
    from .isolation.programs import find_python
    python = find_python()
    version = subprocess.run([python, "-I", "-S", "-c", "import sys; print(sys.version)"], capture_output=True,
                             text=True, timeout=60, check=True).stdout.strip()
    return python, version


class EnvironmentCache:
    """Builds environments on first use and hands out their directories; thread- and process-safe."""

    def __init__(self, root: str | None = None):
        self.root = root or cache_root()
        self._locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()
        self._python: tuple[str, str] | None = None
        self._ready: dict[str, str] = {}
        self._failed: dict[str, tuple[float, EnvironmentBuildError]] = {}

    def key(self, env: Environment) -> str:
        python, version = self.python()
        content = {"python_packages": sorted(s.strip() for s in env.python_packages), "python": python,
                   "version": version}
        return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()[:32]

    def python(self) -> tuple[str, str]:
        if self._python is None:
            self._python = _interpreter()
        return self._python

    def site(self, env: Environment) -> str:
        """The host directory of `env`'s packages, built now if this host has not built it yet."""
        key = self.key(env)
        if key in self._ready:
            return self._ready[key]
        with self._lock:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            if key not in self._ready:
                failed = self._failed.get(key)
                if failed is not None and time.monotonic() - failed[0] < RETRY_FAILED_AFTER_S:
                    raise failed[1]
                try:
                    self._ready[key] = self._build_once(key, env)
                except EnvironmentBuildError as e:
                    self._failed[key] = (time.monotonic(), e)
                    raise
        return self._ready[key]

    def _build_once(self, key: str, env: Environment) -> str:
        _make_private_root(self.root)
        final = os.path.join(self.root, key)
        with open(os.path.join(self.root, f".{key}.lock"), "w") as lockfile:
            fcntl.flock(lockfile, fcntl.LOCK_EX)  # another process building the same one: wait for it
            if not os.path.exists(os.path.join(final, "crucible-env.json")):
                self._build(final, env)
        return os.path.join(final, "site")

    def _build(self, final: str, env: Environment) -> None:
        python, version = self.python()
        tmp = f"{final}.build-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(final, ignore_errors=True)  # a build that died before its manifest
        os.makedirs(tmp, mode=0o755)
        cmd = [sys.executable, "-m", "pip", "--python", python, "install", "--target", os.path.join(tmp, "site"),
               "--only-binary=:all:", "--no-input", "--disable-pip-version-check", "--root-user-action=ignore",
               "--no-warn-script-location", *[s.strip() for s in env.python_packages]]
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S,
                                 stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            shutil.rmtree(tmp, ignore_errors=True)
            raise EnvironmentBuildError(f"environment [{env.describe()}]: pip did not finish in "
                                        f"{BUILD_TIMEOUT_S:g} s") from None
        if out.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            said = [ln for ln in (out.stderr or out.stdout).splitlines() if ln.strip()
                    and not ln.startswith("WARNING: Location")][-6:]
            raise EnvironmentBuildError(f"environment [{env.describe()}]: pip install failed (wheels only, for "
                                        f"{python}): {' | '.join(said)[:1500]}")
        installed = sorted(n[:-len(".dist-info")] for n in os.listdir(os.path.join(tmp, "site"))
                           if n.endswith(".dist-info"))
        with open(os.path.join(tmp, "crucible-env.json"), "w") as f:
            json.dump({**env.to_dict(), "python": python, "version": version, "installed": installed}, f)
        _open_to_the_sandbox(tmp)
        os.rename(tmp, final)

    def manifest(self, env: Environment) -> dict:
        """What was built for `env` (its packages, interpreter and installed distributions)."""
        site = self.site(env)
        with open(os.path.join(os.path.dirname(site), "crucible-env.json")) as f:
            return json.load(f)


def _make_private_root(root: str) -> None:
    """Create the cache root (0755, ours); refuse one that another user owns or others may write."""
    os.makedirs(root, mode=0o755, exist_ok=True)
    st = os.lstat(root)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise EnvironmentBuildError(f"environment cache {root}: must be a directory owned by uid {os.geteuid()} "
                                    f"and writable only by it (set {ENV_DIR_ENV} to such a directory)")
    os.chmod(root, 0o755)


def _open_to_the_sandbox(path: str) -> None:
    """Everything readable (and directories enterable) by the sandbox user, nothing writable by it."""
    for dirpath, dirs, files in os.walk(path):
        os.chmod(dirpath, 0o755)
        for name in files:
            full = os.path.join(dirpath, name)
            if not os.path.islink(full):
                mode = os.lstat(full).st_mode
                os.chmod(full, 0o755 if mode & 0o111 else 0o644)


_CACHE: EnvironmentCache | None = None
_CACHE_LOCK = threading.Lock()


def default_cache() -> EnvironmentCache:
    """The process-wide cache at `cache_root()` (made again when CRUCIBLE_ENV_DIR changes)."""
    global _CACHE
    with _CACHE_LOCK:
        if _CACHE is None or _CACHE.root != cache_root():
            _CACHE = EnvironmentCache()
        return _CACHE


_MISSING = re.compile(r"No module named '([^']+)'")


def missing_module(texts: list[str]) -> str | None:
    """The top-level module named by a `ModuleNotFoundError` in any of `texts` (stderr, test errors)."""
    for text in texts:
        m = _MISSING.search(text or "")
        if m:
            return m.group(1).split(".")[0]
    return None
