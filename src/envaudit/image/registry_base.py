"""Bases pinned by registry digest (`name@sha256:...`, a lock's `base.image`): made present in
the engine by that digest only, verified, and kept as a `docker save` archive in the store for
machines that cannot reach the registry.

Where a build's base comes from, in order: the engine already holds the digest reference; else
the engine pulls `name@sha256:...` (never a tag, so a tag that moved after locking changes
nothing) and the pulled image's RepoDigests must hold that digest; else (offline, or the registry
cannot be reached or no longer has the digest) the archive `envaudit fetch --bases` kept: its
sha256 is checked before it is loaded (a damaged one is quarantined), and the loaded image's id
must be the one recorded when it was saved. A loaded image has no digest reference in the engine
(`docker load` keeps none), so builds name the base by a local tag (`pinned_base_tag`) that is
pointed at the verified image just before each build.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from envaudit.errors import EXIT_USAGE, EnvauditError
from envaudit.image.engine import Engine, EngineError, ImageInfo, PullFailed
from envaudit.image.plan import pinned_base_tag
from envaudit.lock.registry import tag_digest
from envaudit.lock.store import BaseArchive, Store, shared_folder
from envaudit.schema.locks import Artifact, Lock
from envaudit.schema.paths import sha256_file

Say = Callable[[str], None]


@dataclass(frozen=True)
class PinnedBase:
    """A base pinned by digest, as a lock records it."""

    env: str
    reference: str
    """name@sha256:..."""
    registry_tag: str | None = None
    """The tag the digest was resolved from, when the lock has one (base.registry)."""

    @property
    def name(self) -> str:
        return self.reference.rpartition("@")[0]

    @property
    def digest(self) -> str:
        return self.reference.rpartition("@")[2]

    @property
    def local_tag(self) -> str:
        return pinned_base_tag(self.reference)


def pinned_base(lock: Lock) -> PinnedBase | None:
    """The lock's base when it is pinned by digest; None for a recipe."""
    if lock.base.image is None:
        return None
    return PinnedBase(lock.env, lock.base.image, lock.base.registry)


def ensure_base(
    engine: Engine, base: PinnedBase, store: Store, offline: bool, say: Say | None = None
) -> ImageInfo:
    """The verified image of `base` under its local tag (see the module's docstring)."""
    image = local_image(engine, base)
    why = "offline (--offline or ENVAUDIT_OFFLINE=1): the registry is not asked"
    if image is None and not offline:
        if say is not None:
            say(f"pulling {base.reference}")
        try:
            image = pulled_image(engine, base)
        except PullFailed as exc:
            why = _pull_failure(exc, base, store)
    if image is None:
        image = archived_image(engine, base, store, why, say)
    return engine.tag(image.id, base.local_tag)


def local_image(engine: Engine, base: PinnedBase) -> ImageInfo | None:
    """The engine's image of the digest reference, its RepoDigests checked; None when absent."""
    image = engine.image(base.reference)
    if image is not None:
        check_repo_digests(base, image)
    return image


def pulled_image(engine: Engine, base: PinnedBase) -> ImageInfo:
    """Pull by digest; the pulled image, whose RepoDigests must hold the lock's digest."""
    engine.pull(base.reference)
    image = engine.image(base.reference)
    if image is None:
        raise EngineError(
            f"the engine pulled {base.reference} but holds no image under it", EXIT_USAGE
        )
    check_repo_digests(base, image)
    return image


def check_repo_digests(base: PinnedBase, image: ImageInfo) -> None:
    """Refuse (exit 2, both digests named) an image whose RepoDigests lack the lock's digest
    for its repository."""
    found = [d for d in image.digests if _familiar(d.rpartition("@")[0]) == _familiar(base.name)]
    if any(d.rpartition("@")[2] == base.digest for d in found):
        return
    shown = ", ".join(d.rpartition("@")[2] for d in found) or "none"
    raise EngineError(
        f"base of {base.env}: the image {image.id[:19]} the engine gave for {base.reference}"
        f" has the digest(s) {shown} for {base.name}, the lock says {base.digest}; refused",
        EXIT_USAGE,
        hint=f"remove it (`docker rmi {image.id[7:19]}`) and build again: it is pulled by digest",
    )


def _familiar(name: str) -> str:
    """Docker Hub's names as the engine shows them (`docker.io/library/x` is `x`)."""
    name = name.removeprefix("docker.io/")
    return name.removeprefix("library/") if name.count("/") == 1 else name


def _pull_failure(exc: PullFailed, base: PinnedBase, store: Store) -> str:
    """Why the archive is the way left (in words), or the refusal when there is no archive and
    the registry says it has no such digest."""
    if not exc.absent:
        return f"the registry cannot be reached through the engine ({exc.cause})"
    if store.base_record(base.digest) is not None:
        return f"the registry no longer has {base.digest} ({exc.cause})"
    raise EngineError(
        f"base of {base.env}: the registry has no {base.digest} of {base.name} ({exc.cause});"
        f" the lock's base.image {base.reference} cannot be pulled{_tag_now(base)}",
        EXIT_USAGE,
        hint=f"`envaudit lock {base.env}` pins what the tag points to now, or load the image"
        " from an archive (`envaudit fetch --bases` where it was reachable)",
    )


def _tag_now(base: PinnedBase) -> str:
    """`; the tag X now points to sha256:...`, when the lock has a tag and it can be asked."""
    if base.registry_tag is None:
        return ""
    try:
        return f"; the tag {base.registry_tag} now points to {tag_digest(base.registry_tag)}"
    except EnvauditError as exc:
        return f"; the tag {base.registry_tag} could not be asked ({exc})"


def archived_image(
    engine: Engine, base: PinnedBase, store: Store, why: str, say: Say | None = None
) -> ImageInfo:
    """The image loaded from the store's archive of this digest, sha256 and id verified."""
    record = store.base_record(base.digest)
    if record is None:
        raise EngineError(
            f"base of {base.env}: {base.reference} is not in the engine and {why}; the store"
            f" {store.root} keeps no archive of it",
            EXIT_USAGE,
            hint=f"run `envaudit fetch {base.env} --bases` where the registry can be reached,"
            " and bring that store here",
        )
    present = engine.image(record.image_id)
    if present is not None:  # an image id is its config's sha256: the same content
        return present
    _check_archive(base, store, record)
    if say is not None:
        say(f"loading {base.reference} from {store.path_of(record.archive)}")
    with store.path_of(record.archive).open("rb") as handle:
        loaded = engine.load(handle)
    image = engine.image(record.image_id)
    if image is None:
        raise EngineError(
            f"base of {base.env}: loading {store.path_of(record.archive)} gave the image(s)"
            f" {', '.join(loaded) or 'none'}, but {store.base_record_path(base.digest)} records"
            f" {record.image_id} for {base.reference}; refused",
            EXIT_USAGE,
            hint=f"remove both and run `envaudit fetch {base.env} --bases` where the registry"
            " can be reached",
        )
    return image


def _check_archive(base: PinnedBase, store: Store, record: BaseArchive) -> None:
    """Refuse an archive that is absent or not what its record says; a damaged one is moved to
    the store's quarantine."""
    archive = record.archive
    with store.locked(archive):
        problem = store.problem(archive, rehash=True, source="its record")
        if problem is not None:
            moved = store.quarantine(archive)
            raise EngineError(
                f"base of {base.env}: the archive of {base.reference} in the store"
                f" ({archive.filename}, sha256 {archive.sha256}) has {problem}; moved to"
                f" {moved}",
                EXIT_USAGE,
                hint=f"run `envaudit fetch {base.env} --bases` where the registry can be"
                " reached, and bring that store here",
            )
        if not store.has(archive):
            raise EngineError(
                f"base of {base.env}: {store.base_record_path(base.digest)} names the archive"
                f" {archive.sha256}, which is not in the store",
                EXIT_USAGE,
                hint=f"run `envaudit fetch {base.env} --bases` again",
            )


def keep_archive(
    engine: Engine, lock: Lock, store: Store, offline: bool, verify: bool = False
) -> tuple[str, bool]:
    """`fetch --bases`: the lock's base pinned by digest into the store as a `docker save`
    archive, unless a sound one is there. (What was done, in words; whether the store now has
    it.) Offline, only an image the engine already holds is saved."""
    base = pinned_base(lock)
    if base is None:
        return f"base: the recipe {lock.base.recipe} is made here (`envaudit base build`)", True
    record = store.base_record(base.digest)
    if record is not None:
        with store.locked(record.archive):
            problem = store.problem(record.archive, rehash=verify, source="its record")
            if problem is not None:
                store.quarantine(record.archive)
            elif store.has(record.archive):
                return f"base {base.reference}: archive already in the store", True
    image = local_image(engine, base)
    if image is None and offline:
        return f"base {base.reference}: not in the engine, and offline: not saved", False
    if image is None:
        image = pulled_image(engine, base)
    record = save_archive(engine, base, image, store)
    size = record.archive.size / 1e6
    return f"base {base.reference}: saved ({size:.0f} MB, sha256 {record.archive.sha256})", True


def save_archive(engine: Engine, base: PinnedBase, image: ImageInfo, store: Store) -> BaseArchive:
    """`docker save` into the store by the archive's sha256, then its record (both atomic: the
    archive is renamed into place once hashed, the record written whole)."""
    staging = shared_folder(store.root / "partial")
    fd, tmp = tempfile.mkstemp(dir=staging, suffix=".save")
    try:
        with os.fdopen(fd, "wb") as handle:
            engine.save(base.reference, handle)
        archive = Artifact(
            filename=f"{base.name.rpartition('/')[2]}-{base.digest[7:23]}.tar",
            size=Path(tmp).stat().st_size,
            sha256=sha256_file(Path(tmp)),
        )
        with store.locked(archive):
            store.admit(Path(tmp), archive, f"the archive of {base.reference}", "engine")
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    record = BaseArchive(
        reference=base.reference, image_id=image.id, archive=archive, engine=engine.version()
    )
    store.keep_base_record(record)
    return record
