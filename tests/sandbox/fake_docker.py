"""A recording fake of the Docker SDK client, for the docker backend's code paths where no engine runs.

It records every image build (its arguments and the build context it was sent) and every container
created (image and options). A started container runs the command it was created with as a LOCAL,
UNISOLATED process (the real harness relay worker, under /usr/bin/python3 in a scratch directory of
its own) whose stdout and stderr come back over the attach socket in Docker's multiplexed framing.
So a test drives the backend's real relay, demultiplexing and verdict code; nothing here is
isolated, and an image's content does not exist: a container of an environment image lacks its
packages (only their place on `sys.path` can be seen)."""

from __future__ import annotations

import socket
import subprocess
import tarfile
import tempfile
import threading
from dataclasses import dataclass, field

from docker.errors import BuildError, ImageNotFound


@dataclass
class FakeImage:
    id: str
    tags: list[str]
    labels: dict = field(default_factory=dict)


@dataclass
class Build:
    """One `images.build` call: its keyword arguments and the files of its context."""
    kwargs: dict
    files: dict[str, str]


class FakeImages:
    def __init__(self, engine: "FakeDocker"):
        self.engine = engine

    def get(self, name: str) -> FakeImage:
        for image in self.engine.images_held:
            if name in image.tags or name == image.id:
                return image
        raise ImageNotFound(f"No such image: {name}")

    def pull(self, name: str):
        raise AssertionError(f"the fake engine cannot pull {name}")

    def build(self, **kwargs):
        with tarfile.open(fileobj=kwargs["fileobj"]) as tar:
            files = {m.name: tar.extractfile(m).read().decode() for m in tar.getmembers() if m.isfile()}
        self.engine.builds.append(Build(kwargs, files))
        if self.engine.fail_builds:
            log = [{"stream": "Step 2/3 : RUN [...]"}, {"stream": self.engine.fail_builds + "\n"},
                   {"error": "The command '...' returned a non-zero code: 1"}]
            raise BuildError("The command returned a non-zero code: 1", log)
        image = FakeImage(id=f"sha256:built{len(self.engine.builds)}", tags=[kwargs["tag"]],
                          labels=dict(kwargs.get("labels") or {}))
        self.engine.images_held.append(image)
        return image, iter(())


class FakeContainer:
    def __init__(self, image: str, kwargs: dict):
        self.image, self.kwargs = image, kwargs
        self.proc: subprocess.Popen | None = None
        self._ours = self._theirs = None
        self._pumps: list[threading.Thread] = []
        self.removed = False

    def attach_socket(self, params=None):
        self._ours, self._theirs = socket.socketpair()
        return self._ours

    def start(self) -> None:
        command = ["/usr/bin/python3", *self.kwargs["command"][1:]]
        self.proc = subprocess.Popen(command, stdin=self._theirs.fileno(), stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, cwd=tempfile.mkdtemp(prefix="fake-container-"),
                                     env=dict(self.kwargs["environment"]), start_new_session=True)
        for stream, pipe in ((1, self.proc.stdout), (2, self.proc.stderr)):
            t = threading.Thread(target=self._pump, args=(stream, pipe), daemon=True)
            t.start()
            self._pumps.append(t)

    def _pump(self, stream: int, pipe) -> None:
        """Docker's attach framing: 1 byte stream, 3 zero bytes, 4 bytes big-endian length, payload."""
        try:
            while chunk := pipe.read1(1 << 16):
                self._theirs.sendall(bytes([stream, 0, 0, 0]) + len(chunk).to_bytes(4, "big") + chunk)
        except OSError:
            pass

    def remove(self, force: bool = False) -> None:
        self.removed = True
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(timeout=5)
            for t in self._pumps:
                t.join(timeout=5)
            self.proc.stdout.close()
            self.proc.stderr.close()
        if self._theirs is not None:
            self._theirs.close()


class FakeContainers:
    def __init__(self, engine: "FakeDocker"):
        self.engine = engine

    def create(self, image: str, **kwargs) -> FakeContainer:
        self.engine.images.get(image)  # an engine creates containers only of images it holds
        container = FakeContainer(image, kwargs)
        self.engine.created.append(container)
        return container


class FakeDocker:
    """`docker.DockerClient` as the docker backend uses it. `images_held` starts with the base image."""

    def __init__(self, base: str = "python:3.11-slim", base_id: str = "sha256:base1"):
        self.images_held = [FakeImage(id=base_id, tags=[base])]
        self.builds: list[Build] = []
        self.created: list[FakeContainer] = []
        self.fail_builds: str | None = None
        """When set, every build fails with this line in its log (as pip's error would be)."""
        self.images = FakeImages(self)
        self.containers = FakeContainers(self)

    def ping(self) -> bool:
        return True

    def close(self) -> None:
        pass
