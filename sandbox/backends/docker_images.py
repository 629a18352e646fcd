"""Problem environments for the docker backend: one image per distinct environment, built from a
generated build context, tagged by a hash of its content, and reused for as long as it exists.

The image is the backend's base image with the environment's packages installed by the base
image's own Python (`pip install --target /opt/crucible-env --only-binary=:all:`: wheels only, so
the build never runs a package's setup code) and made readable, never writable, by the sandbox
user. The containers that run it are the backend's usual locked-down ones (sandbox.backends.docker):
the packages are part of the read-only root, nothing is bound from the host, and the host needs no
Python of the image's version. `key` hashes the sorted requirement list, the base image's id, the
interpreter and this recipe's version, so a new base image (or a change to the recipe below) builds
a new image instead of reusing a stale one.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import threading
import time

from ..environments import BUILD_TIMEOUT_S, RETRY_FAILED_AFTER_S, SANDBOX_PATH, EnvironmentBuildError
from ..problems import Environment

IMAGE_REPOSITORY = "crucible-env"
"""Environment images are tagged `crucible-env:<key>`."""
RECIPE_VERSION = 1
"""Part of every key: raise it when `dockerfile` changes, so images of the old recipe are not reused."""
KEY_LABEL = "crucible.env.key"
PACKAGES_LABEL = "crucible.env.packages"
BASE_LABEL = "crucible.env.base"


def requirements(env: Environment) -> list[str]:
    """The environment's requirements as pip receives them (normalized by `Environment.requirements`:
    names and versions only, never an option, URL, path or file name)."""
    return list(env.requirements())


def image_key(env: Environment, base_image_id: str, python: str) -> str:
    """Hash of everything the image's content depends on (32 hex digits)."""
    content = {"python_packages": requirements(env), "base": base_image_id, "python": python,
               "recipe": RECIPE_VERSION}
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()[:32]


def dockerfile(base_image: str, python: str, env: Environment) -> str:
    """The generated Dockerfile. Exec-form RUN (JSON arrays): no shell ever sees a requirement."""
    pip = [python, "-m", "pip", "install", "--no-cache-dir", "--no-input", "--disable-pip-version-check",
           "--no-warn-script-location", "--only-binary=:all:", "--target", SANDBOX_PATH, *requirements(env)]
    # Readable (directories enterable) by uid 65534, writable by nobody but root.
    chmod = ["chmod", "-R", "a+rX,go-w", SANDBOX_PATH]
    return (f"FROM {base_image}\n"
            "USER root\n"
            f"RUN {json.dumps(pip)}\n"
            f"RUN {json.dumps(chmod)}\n")


def build_context(base_image: str, python: str, env: Environment) -> bytes:
    """The build context: a tar holding the Dockerfile alone (the build copies nothing from the host)."""
    data = dockerfile(base_image, python, env).encode()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("Dockerfile")
        info.size, info.mode, info.mtime = len(data), 0o644, 0
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


class EnvironmentImages:
    """Builds each environment's image on first use (per engine: an image already there is reused, by
    this process or any other) and answers its tag; thread-safe."""

    def __init__(self, client, base_image: str, python: str):
        self.client = client
        self.base_image = base_image
        self.python = python
        self._ready: dict[str, str] = {}
        self._failed: dict[str, tuple[float, EnvironmentBuildError]] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()
        self._base_id: str | None = None

    def base_image_id(self) -> str:
        if self._base_id is None:
            self._base_id = self.client.images.get(self.base_image).id
        return self._base_id

    def tag(self, env: Environment) -> str:
        return f"{IMAGE_REPOSITORY}:{image_key(env, self.base_image_id(), self.python)}"

    def image(self, env: Environment) -> str:
        """The tag of `env`'s image, built now when the engine does not hold it yet."""
        tag = self.tag(env)
        if tag in self._ready:
            return tag
        with self._lock:
            lock = self._locks.setdefault(tag, threading.Lock())
        with lock:
            if tag not in self._ready:
                failed = self._failed.get(tag)
                if failed is not None and time.monotonic() - failed[0] < RETRY_FAILED_AFTER_S:
                    raise failed[1]  # not rebuilt for every candidate of the batch
                if not self._present(tag):
                    try:
                        self._build(tag, env)
                    except EnvironmentBuildError as e:
                        self._failed[tag] = (time.monotonic(), e)
                        raise
                self._ready[tag] = tag
        return tag

    def _present(self, tag: str) -> bool:
        """Whether the engine holds `tag` as built by this recipe (a foreign image under our tag is rebuilt)."""
        from docker.errors import ImageNotFound
        try:
            image = self.client.images.get(tag)
        except ImageNotFound:
            return False
        return (image.labels or {}).get(KEY_LABEL) == tag.split(":", 1)[1]

    def _build(self, tag: str, env: Environment) -> None:
        key = tag.split(":", 1)[1]
        labels = {KEY_LABEL: key, PACKAGES_LABEL: json.dumps(requirements(env)), BASE_LABEL: self.base_image_id(),
                  "crucible.sandbox": "1"}
        try:
            self.client.images.build(fileobj=io.BytesIO(build_context(self.base_image, self.python, env)),
                                     custom_context=True, tag=tag, labels=labels, pull=False, rm=True,
                                     forcerm=True, timeout=int(BUILD_TIMEOUT_S))
        except Exception as e:  # docker.errors.BuildError (a step failed), APIError, a timeout
            log = getattr(e, "build_log", None) or []
            said = [ln.strip() for item in log if isinstance(item, dict)
                    for ln in str(item.get("stream") or item.get("error") or "").splitlines() if ln.strip()]
            what = ("pip install failed in the docker image build" if said else
                    f"the docker image build failed ({type(e).__name__}: {str(e)[:300]})")
            raise EnvironmentBuildError(f"environment [{env.describe()}]: {what} from {self.base_image} (wheels "
                                        f"only, for its {self.python}){': ' if said else ''}"
                                        f"{' | '.join(said[-6:])[:1500]}") from None
