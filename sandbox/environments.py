"""Execution environments: the Python packages a problem (or its whole set) needs, built once per
distinct content on each host that runs them, mounted read-only into the sandbox.

An environment is a directory `<cache>/<key>/site` of packages installed by pip for the sandbox's own
interpreter (`pip install --target ... --only-binary :all:`: wheels only, so no package's build step
ever runs). `key` hashes the normalized requirements (`Environment.requirements()`: `NumPy>=1.0` and
`numpy>=1` are one build) and the interpreter, so the same packages are built once and shared by
every problem, batch, Runner and process on the host. The key is not the resolved distribution set
(`pip --dry-run --report`): that needs the index at every lookup, not only at a build, and changes
with every release; the per-user and cache quotas bound what different spellings can cost.

pip runs in the candidates' bubblewrap sandbox (sandbox.backends.process `start_sandboxed`) as the
sandbox user: it sees /usr and the libraries, its target directory and, read-only, the resolver and
CA files (or the configured wheel directory), never the working directory, the data dir or the token;
the host's network only when it installs from an index. Its /tmp, where pip stages the install, is a
tmpfs of the per-environment size limit. The result is then made root's (when we are root) and
read-only for everyone else. The process backend binds the directory read-only at /opt/crucible-env
in the sandbox and puts it on the candidate's `sys.path`; nothing else changes.

Quotas (`EnvironmentSettings`, from the host's environment variables): a size per environment, a
total for the cache with least-recently-used eviction, removal of environments unused for a while,
and (checked by the web app at upload) distinct environments per user. An environment is in use
while a process holds a shared lock on its lock file: taken when it is built or first found, kept
while it is asked for (every execution asks), let go after `IN_USE_S` without a request. Eviction
takes the lock exclusively, so it never removes one in use or being built.

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
from dataclasses import dataclass, fields

from .problems import Environment

ENV_DIR_ENV = "CRUCIBLE_ENV_DIR"
SANDBOX_PATH = "/opt/crucible-env"
"""Where an environment's packages appear inside the sandbox."""
BUILD_PATH = "/opt/crucible-build"
"""Where pip's target directory appears inside the build sandbox."""
WHEELS_PATH = "/opt/crucible-wheels"
"""Where the configured wheel directory (`find_links`) appears inside the build sandbox."""
BUILD_TIMEOUT_S = 900.0
RETRY_FAILED_AFTER_S = 60.0
"""A build that failed is not tried again for this long: every candidate of a batch would otherwise
rebuild it in turn (a network outage clears after it)."""
IN_USE_S = 600.0
"""An environment asked for within this long is in use by the process that asked (never evicted)."""
TOUCH_EVERY_S = 60.0
"""How often a process records that an environment was used (the manifest's mtime)."""
MANIFEST = "crucible-env.json"
_KEY = re.compile(r"[0-9a-f]{32}")
# What pip needs of the host's /etc to reach an index over TLS.
_NETWORK_FILES = ("/etc/resolv.conf", "/etc/hosts", "/etc/ssl", "/etc/ca-certificates", "/etc/pki")


@dataclass(frozen=True)
class EnvironmentSettings:
    """How this host builds and keeps problem environments (environment variables of the worker or
    replica: `from_environ`; the web app reads `max_per_user` at upload)."""

    index_url: str = ""
    """CRUCIBLE_ENV_INDEX_URL: the package index pip installs from (http or https); empty: pip's default (PyPI)."""
    find_links: str = ""
    """CRUCIBLE_ENV_FIND_LINKS: a local directory of wheels to install from instead of any index (no network)."""
    max_mb: int = 2048
    """CRUCIBLE_ENV_MAX_MB: largest one environment may be; a build past it is removed and refused."""
    cache_max_mb: int = 20480
    """CRUCIBLE_ENV_CACHE_MAX_MB: total size of this host's environments; the least recently used go first."""
    max_idle_days: float = 30.0
    """CRUCIBLE_ENV_MAX_IDLE_DAYS: an environment unused this long is removed."""
    max_per_user: int = 20
    """CRUCIBLE_ENV_MAX_PER_USER: distinct environments one user's problem sets may name (checked at upload)."""

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type in ("int", "float") and not (isinstance(value, (int, float)) and 0 < value < 1e12):
                raise ValueError(f"{_VARIABLES[f.name]}={value!r}: must be a positive number")
        if self.index_url and not re.match(r"^https?://[^\s]+$", self.index_url):
            raise ValueError(f"CRUCIBLE_ENV_INDEX_URL={self.index_url!r}: must be an http:// or https:// URL")
        if self.find_links and not (os.path.isabs(self.find_links) and os.path.isdir(self.find_links)):
            raise ValueError(f"CRUCIBLE_ENV_FIND_LINKS={self.find_links!r}: must be an absolute path of a directory")

    @classmethod
    def from_environ(cls, environ=None) -> "EnvironmentSettings":
        """The settings from `environ` (default os.environ); ValueError naming a bad variable and its value."""
        environ = os.environ if environ is None else environ
        given = {}
        for f in fields(cls):
            raw = environ.get(_VARIABLES[f.name], "").strip()
            if not raw:
                continue
            if f.type == "str":
                given[f.name] = raw
                continue
            try:
                given[f.name] = int(raw) if f.type == "int" else float(raw)
            except ValueError:
                raise ValueError(f"{_VARIABLES[f.name]}={raw!r}: must be a positive "
                                 f"{'whole ' if f.type == 'int' else ''}number") from None
        return cls(**given)


_VARIABLES = {"index_url": "CRUCIBLE_ENV_INDEX_URL", "find_links": "CRUCIBLE_ENV_FIND_LINKS",
              "max_mb": "CRUCIBLE_ENV_MAX_MB", "cache_max_mb": "CRUCIBLE_ENV_CACHE_MAX_MB",
              "max_idle_days": "CRUCIBLE_ENV_MAX_IDLE_DAYS", "max_per_user": "CRUCIBLE_ENV_MAX_PER_USER"}


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

    def __init__(self, root: str | None = None, settings: EnvironmentSettings | None = None, start=None):
        self.root = root or cache_root()
        self.settings = settings or EnvironmentSettings.from_environ()
        self.start = start
        """How pip is started in the sandbox (`start(argv, scratch_mb=, network=, binds=)` -> Popen:
        sandbox.backends.process `start_sandboxed`, which the executors pass: this module may not
        import the backends, which import it); None until an executor gives one."""
        self._locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()
        self._python: tuple[str, str] | None = None
        self._ready: dict[str, str] = {}
        self._failed: dict[str, tuple[float, EnvironmentBuildError]] = {}
        self._held: dict[str, int] = {}
        """Lock-file descriptors of the environments this process uses (a shared flock each)."""
        self._asked: dict[str, float] = {}
        self._touched: dict[str, float] = {}

    def key(self, env: Environment) -> str:
        python, version = self.python()
        content = {"python_packages": list(env.requirements()), "python": python, "version": version}
        return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()[:32]

    def python(self) -> tuple[str, str]:
        if self._python is None:
            self._python = _interpreter()
        return self._python

    def site(self, env: Environment, start=None) -> str:
        """The host directory of `env`'s packages, built now if this host has not built it yet
        (`start`: how to start pip in the sandbox, kept for later builds; see `self.start`)."""
        self.start = start or self.start
        key = self.key(env)
        with self._lock:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            self._asked[key] = time.monotonic()
            if key not in self._ready:
                failed = self._failed.get(key)
                if failed is not None and time.monotonic() - failed[0] < RETRY_FAILED_AFTER_S:
                    raise failed[1]
                try:
                    self._ready[key] = self._build_once(key, env)
                except EnvironmentBuildError as e:
                    self._failed[key] = (time.monotonic(), e)
                    raise
            self._touch(key)
            site = self._ready[key]
        self._let_go_of_idle()
        return site

    def _touch(self, key: str) -> None:
        """Record a use (the manifest's mtime orders eviction and idle removal), once a minute at most."""
        now = time.monotonic()
        if now - self._touched.get(key, -TOUCH_EVERY_S) >= TOUCH_EVERY_S:
            self._touched[key] = now
            try:
                os.utime(os.path.join(self.root, key, MANIFEST))
            except OSError:
                pass

    def _let_go_of_idle(self) -> None:
        """Release the environments this process has not asked for in IN_USE_S (evictable again)."""
        now = time.monotonic()
        for key in [k for k, t in list(self._asked.items()) if now - t > IN_USE_S]:
            with self._locks[key]:
                if now - self._asked.get(key, now) > IN_USE_S:
                    self._release(key)

    def _release(self, key: str) -> None:
        fd = self._held.pop(key, None)
        self._ready.pop(key, None)
        self._asked.pop(key, None)
        if fd is not None:
            os.close(fd)  # drops the shared flock

    def close(self) -> None:
        """Let go of every environment this cache holds (they may be evicted from now on)."""
        for key in list(self._held):
            self._release(key)

    def _build_once(self, key: str, env: Environment) -> str:
        """The environment built (by us, or by another process that we waited for), held shared."""
        _make_private_root(self.root)
        fd = os.open(os.path.join(self.root, f".{key}.lock"), os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + BUILD_TIMEOUT_S + 60
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:  # in use (shared) or being built (exclusive) elsewhere
                    if self._built(key) and _try_flock(fd, fcntl.LOCK_SH):
                        if self._built(key):
                            break
                        fcntl.flock(fd, fcntl.LOCK_UN)
                    if time.monotonic() > deadline:
                        raise EnvironmentBuildError(f"environment [{env.describe()}]: another process has "
                                                    f"been building it for over {BUILD_TIMEOUT_S:g} s") from None
                    time.sleep(0.2)
                    continue
                if not self._built(key):
                    self._remove_expired()
                    self._build(os.path.join(self.root, key), env)
                    self._make_room(key, env)
                fcntl.flock(fd, fcntl.LOCK_SH)  # from building to using
                break
        except BaseException:
            os.close(fd)
            raise
        self._held[key] = fd
        return os.path.join(self.root, key, "site")

    def _built(self, key: str) -> bool:
        return os.path.exists(os.path.join(self.root, key, MANIFEST))

    def _build(self, final: str, env: Environment) -> None:
        python, version = self.python()
        limit = self.settings.max_mb
        tmp = f"{final}.build-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(final, ignore_errors=True)  # a build that died before its manifest
        os.makedirs(os.path.join(tmp, "site"), mode=0o755)
        os.chmod(tmp, 0o755)
        if os.geteuid() == 0:  # pip runs as the sandbox user: its target alone is writable by it
            from .isolation.credentials import NOBODY
            os.chown(os.path.join(tmp, "site"), NOBODY, NOBODY)
        try:
            said = self._run_pip(python, os.path.join(tmp, "site"), env)
            if said is not None:
                if "No space left on device" in said or "Errno 28" in said:
                    raise EnvironmentBuildError(_too_large(env, limit, "pip ran out of the room it has"))
                raise EnvironmentBuildError(f"environment [{env.describe()}]: pip install failed (wheels only, "
                                            f"for {python}): {said}")
            _own_and_open_to_the_sandbox(tmp)
            installed = _distributions(os.path.join(tmp, "site"))
            size = _size(tmp)
            if size > limit << 20:
                biggest = max(installed, key=lambda d: d[1], default=("?", 0))
                raise EnvironmentBuildError(_too_large(env, limit, f"{_mib(size)}, the largest part "
                                                                   f"{biggest[0]} at {_mib(biggest[1])}"))
            with open(os.path.join(tmp, MANIFEST), "w") as f:
                json.dump({**env.to_dict(), "requirements": list(env.requirements()), "python": python,
                           "version": version, "installed": sorted(n for n, _ in installed), "bytes": size}, f)
            os.chmod(os.path.join(tmp, MANIFEST), 0o644)
            os.rename(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise

    def _run_pip(self, python: str, target: str, env: Environment) -> str | None:
        """Install `env` into `target` with pip in the sandbox; None, or the last lines pip said on failure."""
        if self.start is None:
            raise EnvironmentBuildError(f"environment [{env.describe()}]: no sandbox to build it in (this "
                                        "backend has none)")
        command, binds = _pip_command(python)
        command += ["install", "--isolated", "--target", BUILD_PATH, "--only-binary", ":all:", "--no-input",
                    "--no-cache-dir", "--disable-pip-version-check", "--no-warn-script-location",
                    "--progress-bar", "off"]
        binds = [*binds, ("--bind", target, BUILD_PATH)]
        network = not self.settings.find_links
        if self.settings.find_links:
            command += ["--no-index", "--find-links", WHEELS_PATH]
            binds.append(("--ro-bind", self.settings.find_links, WHEELS_PATH))
        else:
            if self.settings.index_url:
                command += ["--index-url", self.settings.index_url]
            binds += [("--ro-bind-try", path, path) for path in _NETWORK_FILES]
        try:
            proc = self.start([*command, *env.requirements()], scratch_mb=self.settings.max_mb,
                                   network=network, binds=binds)
        except OSError as e:
            raise EnvironmentBuildError(f"environment [{env.describe()}]: cannot start pip in the sandbox: {e}") \
                from None
        try:
            _, err = proc.communicate(timeout=BUILD_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.communicate()
            raise EnvironmentBuildError(f"environment [{env.describe()}]: pip did not finish in "
                                        f"{BUILD_TIMEOUT_S:g} s") from None
        if proc.returncode == 0:
            return None
        lines = [ln for ln in err.decode(errors="replace").splitlines() if ln.strip()
                 and not ln.startswith("WARNING: Location")][-6:]
        return " | ".join(lines)[:1500] or f"exit status {proc.returncode}"

    def entries(self) -> list[tuple[str, float, int]]:
        """`(key, last used as a Unix time, bytes)` of every built environment, least recently used first."""
        found = []
        try:
            names = os.listdir(self.root)
        except FileNotFoundError:
            return []
        for name in names:
            if not _KEY.fullmatch(name):  # a build in progress, or one being removed
                continue
            manifest = os.path.join(self.root, name, MANIFEST)
            try:
                with open(manifest) as f:
                    size = int(json.load(f).get("bytes") or 0)
                found.append((name, os.stat(manifest).st_mtime, size))
            except (OSError, ValueError, TypeError, AttributeError):
                continue
        return sorted(found, key=lambda e: e[1])

    def _evict(self, key: str) -> bool:
        """Remove one environment unless a process uses it or builds it (its lock is taken)."""
        path = os.path.join(self.root, f".{key}.lock")
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:
            return False
        try:
            if not _try_flock(fd, fcntl.LOCK_EX):
                return False
            # Renamed first: a reader never sees a half-removed directory with its manifest.
            trash = os.path.join(self.root, f".{key}.evicted-{os.getpid()}")
            os.rename(os.path.join(self.root, key), trash)
            shutil.rmtree(trash, ignore_errors=True)
            return True
        except OSError:
            return False
        finally:
            os.close(fd)

    def _remove_expired(self) -> list[str]:
        """Remove the environments unused for `max_idle_days` (those not in use); their keys."""
        cutoff = time.time() - self.settings.max_idle_days * 86400
        return [key for key, used, _ in self.entries() if used < cutoff and self._evict(key)]

    def _make_room(self, new_key: str, env: Environment) -> None:
        """Evict the least recently used environments until the cache fits its total with `new_key`
        in it; when the ones in use leave no room, `new_key` goes and the build is refused."""
        limit = self.settings.cache_max_mb << 20
        entries = self.entries()
        total = sum(size for _, _, size in entries)
        recent = time.time() - IN_USE_S
        for key, used, size in entries:
            if total <= limit:
                return
            if key != new_key and used < recent and self._evict(key):
                total -= size
        if total > limit:
            shutil.rmtree(os.path.join(self.root, new_key), ignore_errors=True)  # ours: we hold it exclusively
            raise EnvironmentBuildError(
                f"environment [{env.describe()}]: the environment cache is full ({_mib(total)} with it, "
                f"{self.settings.cache_max_mb} MiB allowed by CRUCIBLE_ENV_CACHE_MAX_MB) and the other "
                "environments are in use; try again later")

    def manifest(self, env: Environment) -> dict:
        """What was built for `env` (its packages, interpreter and installed distributions)."""
        site = self.site(env)
        with open(os.path.join(os.path.dirname(site), MANIFEST)) as f:
            return json.load(f)


def _try_flock(fd: int, how: int) -> bool:
    try:
        fcntl.flock(fd, how | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


def _pip_command(python: str) -> tuple[list[str], list[tuple[str, str, str]]]:
    """How to run pip for `python` in the sandbox, and what it must see beyond /usr: the interpreter's
    own pip when it has one, else ours (`pip --python`), with our prefix bound read-only."""
    has_pip = subprocess.run([python, "-I", "-c", "import pip"], capture_output=True, timeout=60).returncode == 0
    if has_pip:
        return [python, "-I", "-m", "pip"], []
    prefixes = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix)}
    return [sys.executable, "-I", "-m", "pip", "--python", python], [("--ro-bind", p, p) for p in sorted(prefixes)]


def _too_large(env: Environment, limit_mb: int, what: str) -> str:
    return (f"environment [{env.describe()}]: past the size limit of one environment ({limit_mb} MiB, "
            f"CRUCIBLE_ENV_MAX_MB): {what}; name fewer or smaller packages")


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"


def _size(path: str) -> int:
    """Bytes of the files under `path` (links not followed)."""
    total = 0
    for dirpath, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                pass
    return total


def _distributions(site: str) -> list[tuple[str, int]]:
    """`(name-version, bytes)` of each distribution installed in `site`, sized from its RECORD."""
    found = []
    for entry in os.listdir(site):
        if not entry.endswith(".dist-info"):
            continue
        size = 0
        try:
            with open(os.path.join(site, entry, "RECORD"), errors="replace") as f:
                for line in f:
                    parts = line.rsplit(",", 2)
                    if len(parts) == 3 and parts[2].strip().isdigit():
                        size += int(parts[2])
        except OSError:
            pass
        found.append((entry[:-len(".dist-info")], size))
    return found


def _make_private_root(root: str) -> None:
    """Create the cache root (0755, ours); refuse one that another user owns or others may write."""
    os.makedirs(root, mode=0o755, exist_ok=True)
    st = os.lstat(root)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise EnvironmentBuildError(f"environment cache {root}: must be a directory owned by uid {os.geteuid()} "
                                    f"and writable only by it (set {ENV_DIR_ENV} to such a directory)")
    os.chmod(root, 0o755)


def _own_and_open_to_the_sandbox(path: str) -> None:
    """Everything ours (pip wrote it as the sandbox user), readable (directories enterable) by the
    sandbox user, nothing writable by it."""
    me = os.geteuid(), os.getegid()
    for dirpath, dirs, files in os.walk(path):
        os.lchown(dirpath, *me)
        os.chmod(dirpath, 0o755)
        for name in files + [d for d in dirs if os.path.islink(os.path.join(dirpath, d))]:
            full = os.path.join(dirpath, name)
            os.lchown(full, *me)
            if not os.path.islink(full):
                mode = os.lstat(full).st_mode
                os.chmod(full, 0o755 if mode & 0o111 else 0o644)


_CACHE: EnvironmentCache | None = None
_CACHE_LOCK = threading.Lock()


def default_cache() -> EnvironmentCache:
    """The process-wide cache at `cache_root()` (made again when CRUCIBLE_ENV_DIR or a setting changes)."""
    global _CACHE
    settings = EnvironmentSettings.from_environ()
    with _CACHE_LOCK:
        if _CACHE is None or _CACHE.root != cache_root() or _CACHE.settings != settings:
            if _CACHE is not None:
                _CACHE.close()
            _CACHE = EnvironmentCache(settings=settings)
        return _CACHE


_MISSING = re.compile(r"No module named '([^']+)'")


def missing_module(texts: list[str]) -> str | None:
    """The top-level module named by a `ModuleNotFoundError` in any of `texts` (stderr, test errors)."""
    for text in texts:
        m = _MISSING.search(text or "")
        if m:
            return m.group(1).split(".")[0]
    return None


def past_user_limit(existing, problems, limit: int) -> list[tuple[str, str]]:
    """`(problem id, message)` for each new environment of `problems` (sandbox Problems) that would
    take a user past `limit` distinct environments, given the normalized requirement lists the user's
    stored sets already name (`existing`): the first problem naming each such environment."""
    seen = {tuple(r) for r in existing if r}
    refused = []
    for p in problems:
        env = getattr(p, "environment", None)
        reqs = env.requirements() if env is not None else ()
        if not reqs or reqs in seen:
            continue
        seen.add(reqs)
        if len(seen) > limit:
            refused.append((p.id, f"problem {p.id!r}: the environment [{env.describe()}] would be distinct "
                                  f"environment {len(seen)} of your problem sets; at most {limit} per user "
                                  "(CRUCIBLE_ENV_MAX_PER_USER): reuse the package list of one of your sets or "
                                  "delete sets you no longer need"))
    return refused
