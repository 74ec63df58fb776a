"""The container engine, reached through the `docker` Python SDK (Docker's API; podman serves
the same API on its compatible socket).

Every engine failure a user can meet (no engine, an engine that does not answer, a failing
build step, a full disk) becomes an `EngineError` naming what failed and what to do; SDK
exceptions do not travel further up.
"""

from __future__ import annotations

import functools
import io
import os
import re
import tarfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import docker
import docker.errors
import requests.exceptions

from envaudit.errors import EXIT_FAILED, EXIT_USAGE, EnvauditError
from envaudit.settings import ENGINE_HOST, read

ENGINE_TIMEOUT_S = 600
BUILD_TAIL_LINES = 30
STEP = re.compile(r"^Step (\d+)/(\d+) : (.*)$")


class EngineError(EnvauditError):
    """The engine is missing, refused a request, or a build failed."""


MANIFEST_ABSENT = ("manifest unknown", "name unknown", "not found", "no such manifest")
"""How a registry says, through the engine, that it has no manifest of that digest."""


class PullFailed(EngineError):
    """A pull that did not give the image: the registry has no such manifest (`absent`), or
    the registry or the engine's way to it failed."""

    def __init__(self, reference: str, cause: str) -> None:
        super().__init__(f"pulling {reference} failed: {cause}", EXIT_USAGE)
        self.cause = cause
        self.absent = any(sign in cause.lower() for sign in MANIFEST_ABSENT)


@dataclass(frozen=True)
class ImageInfo:
    id: str
    tags: list[str]
    size: int
    labels: dict[str, str]
    digests: list[str]
    layers: list[str]


@dataclass
class BuildOutcome:
    image: ImageInfo
    steps: int
    cached_steps: int
    log: list[str] = field(default_factory=list)


def engine_address(kind: str) -> str | None:
    """Where the engine listens: ENVAUDIT_ENGINE_HOST, else the engine's own variable (DOCKER_HOST
    or CONTAINER_HOST), else the SDK's default (docker) or podman's usual sockets."""
    explicit = read(ENGINE_HOST)
    if explicit is not None:
        return explicit
    if kind == "docker":
        return os.environ.get("DOCKER_HOST")
    if os.environ.get("CONTAINER_HOST"):
        return os.environ["CONTAINER_HOST"]
    runtime_dir = os.environ.get("XDG_RUNTIME_DIR", f"/run/user/{os.getuid()}")
    for socket in (f"{runtime_dir}/podman/podman.sock", "/run/podman/podman.sock"):
        if Path(socket).exists():
            return f"unix://{socket}"
    return "unix:///run/podman/podman.sock"


class Engine:
    def __init__(self, client: docker.DockerClient, kind: str, address: str) -> None:
        self.client = client
        self.kind = kind
        self.address = address

    @classmethod
    def connect(cls, kind: str = "docker") -> Engine:
        address = engine_address(kind)
        shown = address or "the default socket (DOCKER_HOST unset)"
        try:
            if address is None:
                client = docker.from_env(timeout=ENGINE_TIMEOUT_S)
            else:
                client = docker.DockerClient(base_url=address, timeout=ENGINE_TIMEOUT_S)
            client.ping()
        except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
            raise EngineError(
                f"no {kind} engine answers at {shown}: {_short(exc)}",
                EXIT_USAGE,
                hint=f"start the {kind} daemon, or point ENVAUDIT_ENGINE_HOST at its socket;"
                " `envaudit doctor` says what was found, and --runtime local runs without one",
            ) from None
        return cls(client, kind, address or "default")

    def version(self) -> str:
        info = self.client.version()
        return f"{info.get('Version', '?')} (API {info.get('ApiVersion', '?')})"

    def info(self) -> dict[str, Any]:
        return dict(self.client.info())

    @functools.cached_property
    def podman(self) -> bool:
        """Whether the engine behind the socket is podman's Docker-compatible service (the
        socket can be pointed anywhere: the engine's own account of itself decides). Asked
        once per engine: every job's GPU passing reads it."""
        components = self.client.version().get("Components") or []
        return any(c.get("Name") == "Podman Engine" for c in components)

    def image(self, reference: str) -> ImageInfo | None:
        if not reference.strip():  # the SDK raises NullResource for an empty name
            return None
        try:
            found = self.client.images.get(reference)
        except docker.errors.ImageNotFound:
            return None
        except docker.errors.APIError as exc:
            raise EngineError(f"the engine could not inspect {reference}: {_short(exc)}") from None
        attrs = found.attrs
        return ImageInfo(
            id=str(found.id),
            tags=list(found.tags),
            size=int(attrs.get("Size") or 0),
            labels=dict((attrs.get("Config") or {}).get("Labels") or {}),
            digests=list(attrs.get("RepoDigests") or []),
            layers=list((attrs.get("RootFS") or {}).get("Layers") or []),
        )

    def images(self, prefix: str) -> list[ImageInfo]:
        found = []
        for image in self.client.images.list():
            if any(tag.startswith(prefix) for tag in image.tags):
                info = self.image(str(image.id))
                if info is not None:
                    found.append(info)
        return found

    def layer_sizes(self, reference: str) -> list[tuple[str, int]]:
        """(created-by, bytes) of every layer, oldest first (the engine's history)."""
        history = self.client.api.history(reference)  # type: ignore[no-untyped-call]
        return [(str(h.get("CreatedBy", "")), int(h.get("Size") or 0)) for h in reversed(history)]

    def build(
        self,
        context: Path,
        tag: str,
        labels: dict[str, str],
        no_cache: bool = False,
        on_step: Callable[[int, int, str], None] | None = None,
    ) -> BuildOutcome:
        """Build context/Dockerfile with no network and never pulling; stream the steps."""
        log: list[str] = []
        steps = cached = 0
        current = ""
        image_id: str | None = None
        with _engine_call(f"building {tag}"):
            stream = self.client.api.build(
                # an iterator: requests sends it chunked, as it is read (the stubs say IO)
                fileobj=context_tar(context),  # type: ignore[arg-type]
                custom_context=True,
                tag=tag,
                labels=labels,
                network_mode="none",
                nocache=no_cache,
                rm=True,
                forcerm=True,
                pull=False,
                decode=True,
            )
            for chunk in stream:
                if "error" in chunk:
                    raise _build_failure(tag, current, log, str(chunk["error"]))
                if "aux" in chunk and isinstance(chunk["aux"], dict) and "ID" in chunk["aux"]:
                    image_id = str(chunk["aux"]["ID"])
                text = str(chunk.get("stream") or "")
                for line in text.splitlines():
                    log.append(line)
                    match = STEP.match(line)
                    if match:
                        steps = int(match.group(1))
                        current = line
                        if on_step is not None:
                            on_step(steps, int(match.group(2)), match.group(3))
                    elif "Using cache" in line:
                        cached += 1
        info = self.image(image_id or tag)
        if info is None:
            raise EngineError(f"the build of {tag} ended without an image", EXIT_FAILED)
        return BuildOutcome(info, steps, cached, log)

    def import_rootfs(self, tarball: IO[bytes], repository: str, tag: str) -> str:
        """`docker import` of a root file system tar; the new image's id."""
        with _engine_call(f"importing {repository}:{tag}"):
            answer = self.client.api.import_image_from_stream(
                tarball, repository=repository, tag=tag
            )
        image = self.image(f"{repository}:{tag}")
        if image is None:
            raise EngineError(f"the import of {repository}:{tag} gave no image: {answer}")
        return image.id

    def label(self, source: str, tag: str, labels: dict[str, str]) -> ImageInfo:
        """A new tag of `source` carrying these labels (a one-line build, no context)."""
        dockerfile = io.BytesIO(f"FROM {source}\n".encode())
        with _engine_call(f"labelling {tag}"):
            for chunk in self.client.api.build(
                fileobj=dockerfile, tag=tag, labels=labels, pull=False, rm=True, decode=True
            ):
                if "error" in chunk:
                    raise EngineError(f"labelling {tag} failed: {chunk['error']}")
        info = self.image(tag)
        assert info is not None
        return info

    def run_python(
        self, image: str, interpreter: str, script: str, args: Sequence[str] = ()
    ) -> str:
        """Run a short script with the image's interpreter (no network, removed after); its
        standard output."""
        with _engine_call(f"running {interpreter} in {image}"):
            out = self.client.containers.run(
                image,
                [interpreter, "-c", script, *args],
                remove=True,
                network_mode="none",
                working_dir="/tmp",
                stdout=True,
                stderr=False,
            )
        return bytes(out).decode(errors="replace")

    def pull(self, reference: str) -> None:
        """Pull `name@sha256:...` (by digest only: a build never pulls a tag). A `PullFailed`
        says whether the registry answered that it has no such manifest, or could not be
        asked; errors the engine streams after answering 200 are caught too."""
        name, _, digest = reference.partition("@")
        try:
            for chunk in self.client.api.pull(name, tag=digest, stream=True, decode=True):
                if isinstance(chunk, dict) and "error" in chunk:
                    raise PullFailed(reference, str(chunk["error"]))
        except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
            raise PullFailed(reference, _short(exc)) from None

    def save(self, reference: str, handle: IO[bytes]) -> None:
        """`docker save` of one image into `handle`."""
        with _engine_call(f"saving {reference}"):
            for chunk in self.client.api.get_image(reference, chunk_size=1 << 20):
                handle.write(chunk)

    def load(self, handle: IO[bytes]) -> list[str]:
        """`docker load` of an archive; the ids of the images it held."""
        loaded: list[str] = []
        with _engine_call("loading an image archive"):
            for chunk in self.client.api.load_image(handle):  # type: ignore[no-untyped-call]
                if "error" in chunk:
                    raise EngineError(f"loading an image archive failed: {chunk['error']}")
                text = str(chunk.get("stream") or "")
                loaded += re.findall(r"Loaded image ID: (sha256:[0-9a-f]{64})", text)
        return loaded

    def tag(self, image_id: str, tag: str) -> ImageInfo:
        """Point `repository:tag` at the image `image_id` (moving the tag if it exists)."""
        repository, _, name = tag.rpartition(":")
        with _engine_call(f"tagging {image_id[:19]} as {tag}"):
            self.client.api.tag(image_id, repository, name, force=True)
        info = self.image(tag)
        assert info is not None
        return info

    def remove_image(self, reference: str) -> None:
        with _engine_call(f"removing {reference}"):
            self.client.images.remove(reference, force=True, noprune=False)


CHUNK = 1 << 20
"""Bytes of a context file read at a time while it is sent."""


def context_tar(context: Path) -> Iterator[bytes]:
    """The build context as a tar, in chunks, streamed to the engine as it is read: no copy of
    it is written first (a context holds gigabytes of wheels, which the engine unpacks once
    more on the same disk). Every file is a regular entry, in sorted order.

    Python's tarfile (and so the SDK's own context tar) writes a second path to one inode as a
    hard link to the first. A file staged twice (hard links to one store file) would then
    change the engine's cache checksum of the folder holding the link with what another folder
    holds, so two envs sharing a layer would stop sharing its stage."""
    headers = tarfile.TarFile(fileobj=io.BytesIO(), mode="w")
    for path in sorted(context.rglob("*")):
        info = headers.gettarinfo(str(path), path.relative_to(context).as_posix())
        if info.islnk():
            info.type, info.linkname, info.size = tarfile.REGTYPE, "", path.stat().st_size
        yield info.tobuf(headers.format, headers.encoding, headers.errors)
        if not info.isreg():
            continue
        sent = 0
        with path.open("rb") as data:
            while chunk := data.read(min(CHUNK, info.size - sent)):
                sent += len(chunk)
                yield chunk
        if sent != info.size:
            raise EngineError(f"{path} changed while the build context was sent", EXIT_USAGE)
        yield tarfile.NUL * (-sent % tarfile.BLOCKSIZE)
    yield tarfile.NUL * (2 * tarfile.BLOCKSIZE)


@contextmanager
def _engine_call(what: str) -> Iterator[None]:
    try:
        yield
    except EngineError:
        raise
    except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
        text = _short(exc)
        hint = None
        if "no space left" in text:
            hint = "the engine's disk is full: free space (docker system prune) and build again"
        raise EngineError(f"{what} failed: {text}", hint=hint) from None


def _build_failure(tag: str, step: str, log: list[str], error: str) -> EngineError:
    tail = "\n".join(log[-BUILD_TAIL_LINES:])
    message = (
        f"the build of {tag} failed at {step or 'its first step'}: {error.strip()}\n"
        f"last lines of the build:\n{tail}"
    )
    if "no space left" in error or "no space left" in tail:
        hint = "the engine's disk is full: free space (docker system prune) and build again"
        return EngineError(message, EXIT_USAGE, hint=hint)
    return EngineError(message, EXIT_FAILED)


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:400] if text else type(exc).__name__
