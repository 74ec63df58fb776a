"""`envaudit fetch ENV`: every artifact of a lock into the content-addressed store,
sha256-verified (lock/fetch.py), and with --bases its base image kept there too
(image/registry_base.py), for builds where the registry cannot be reached.

Two steps, so that the command line can show what the first fetched before the second (a
`docker save` of a base, which can take minutes) starts.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path

from envaudit.lock.build import rebuild_recorded
from envaudit.lock.config import FetchConfig
from envaudit.lock.fetch import fetch_lock
from envaudit.lock.files import env_dir
from envaudit.lock.resolve import current_lock
from envaudit.schema.locks import Lock

ByteProgress = Callable[[str, int, int], None]
"""(file name, bytes done, bytes in all), as a download goes."""
ShowDownloads = Callable[[], AbstractContextManager[ByteProgress | None]]
"""Opens the caller's display of downloads for as long as fetching runs (the command line's
progress bars, console.byte_progress); it yields the callback that feeds it."""


@dataclass(frozen=True)
class FetchRequest:
    env: str
    locks_dir: Path = Path("locks")
    offline: bool = False
    """Use only the store."""
    verify: bool = False
    """Rehash every store entry (sizes are always checked)."""
    store: Path | None = None
    """Store folder (None: ENVAUDIT_STORE)."""
    find_links: list[Path] | None = None
    substitute: str | None = None
    """The closure of this declared substitute base instead of the declared one."""
    build: bool = False
    """Build the sources whose recorded wheel nothing here holds, from what the lock records,
    keeping only wheels whose sha256 is the lock's (lock/build.rebuild_recorded)."""


@dataclass(frozen=True)
class FetchResult:
    """What the store holds of the lock now: each list is in the order fetch found it."""

    env: str
    store: Path
    present: int
    """Artifacts already in the store (and sound)."""
    fetched: list[tuple[str, str]]
    """(file name, where it came from)."""
    quarantined: list[str]
    missing: list[str]
    notes: list[str]
    lock: Lock
    """The lock fetched for, and the configuration it was fetched with: what keep_base
    needs to keep the same lock's base in the same store."""
    config: FetchConfig

    @property
    def complete(self) -> bool:
        return not self.missing


@dataclass(frozen=True)
class BaseKept:
    line: str
    """What was done with the base, in words."""
    kept: bool
    """Whether the store now holds it."""


def fetch_artifacts(request: FetchRequest, show: ShowDownloads | None = None) -> FetchResult:
    """The lock, refused when stale against env.toml, then every artifact it lacks fetched
    into the store; a bad store entry is quarantined and fetched again. A LockError for a lock
    that cannot be fetched from (its exit code says whose fault). The display opens only once
    the lock is read: a refusal is printed alone, with no progress bar before it."""
    config = FetchConfig.from_environment(
        request.store, request.find_links, offline=request.offline
    )
    folder = env_dir(request.env, request.locks_dir)
    locked = current_lock(folder, substitute=request.substitute)
    with show() if show is not None else nullcontext(None) as progress:
        report = fetch_lock(locked, config, progress, verify=request.verify)
    if request.build and not report.complete:
        rebuilt = rebuild_recorded(locked, config, folder)
        if rebuilt:
            report = fetch_lock(locked, config)
            report.notes = rebuilt + report.notes
    return FetchResult(
        env=request.env,
        store=config.store,
        present=len(report.present),
        fetched=list(report.fetched),
        quarantined=list(report.quarantined),
        missing=list(report.missing),
        notes=list(report.notes),
        lock=locked,
        config=config,
    )


def keep_base(fetched: FetchResult, verify: bool = False) -> BaseKept:
    """The lock's base pinned by registry digest saved into the store (`docker save`), unless
    a sound one is there; offline, only an image the engine already holds is saved."""
    from envaudit.image.engine import Engine  # the Docker SDK, only when a base is kept
    from envaudit.image.registry_base import keep_archive
    from envaudit.lock.store import Store

    line, kept = keep_archive(
        Engine.connect(), fetched.lock, Store(fetched.config.store), fetched.config.offline, verify
    )
    return BaseKept(line, kept)
