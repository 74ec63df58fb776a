"""`envaudit fetch`: every artifact of a lock into the store, each found by its hash.

Where a file may come from, in order: the store itself, the configured find-links folders, the
configured mirrors (folders or http bases, `<base>/<filename>` or `<base>/sha256/<hash>`), then
the index (PEP 691 JSON simple API: the file with that name *and* that sha256). Whatever the
source, the bytes are hashed before they enter the store; the source is therefore irrelevant.

What the store claims to hold is checked too: every entry's size on every run, its sha256 with
`verify`. A bad entry is quarantined (see `Store.quarantine`), reported, and fetched again like
a missing one. Each artifact is handled under its store lock, so concurrent fetches into one
store wait for each other per artifact instead of writing one partial file together.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from envaudit.errors import EXIT_FAILED
from envaudit.lock.config import FetchConfig
from envaudit.lock.files import LockError, env_dir
from envaudit.lock.resolve import current_lock
from envaudit.lock.store import Store
from envaudit.schema.locks import Artifact, Lock, normalize_name, package_label

TIMEOUT_S = 60
CHUNK = 1 << 20
SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"

Progress = Callable[[str, int, int], None]  # (filename, bytes done, bytes total)


@dataclass
class FetchReport:
    present: list[str] = field(default_factory=list)
    fetched: list[tuple[str, str]] = field(default_factory=list)  # (filename, origin)
    missing: list[str] = field(default_factory=list)  # one message per missing artifact
    notes: list[str] = field(default_factory=list)  # sources an image builds from their tree
    quarantined: list[str] = field(default_factory=list)  # one message per bad store entry

    @property
    def complete(self) -> bool:
        return not self.missing


def fetch_lock(
    lock: Lock, config: FetchConfig, progress: Progress | None = None, verify: bool = False
) -> FetchReport:
    """Fetch what is missing from the store, after checking what it holds (sizes; with
    `verify`, every sha256). Hash mismatches of fetched files raise at once (exit 1); missing
    artifacts and quarantined entries are collected so one run names all of them."""
    store = Store(config.store)
    report = FetchReport()
    for what, artifact, package in _wanted(lock):
        try:
            with store.locked(artifact):
                problem = store.problem(artifact, rehash=verify)
                if problem is not None:
                    moved = store.quarantine(artifact)
                    report.quarantined.append(
                        f"{what}: the store's {artifact.filename} (sha256 {artifact.sha256}) had"
                        f" {problem}; moved to {moved}"
                    )
            origin = fetch_artifact(store, artifact, what, package, config, progress)
        except OSError as exc:  # the store itself: read-only, full, not a folder
            raise LockError(
                f"the store {store.root} cannot be used: {exc}",
                hint="ENVAUDIT_STORE (or --store) must name a writable folder with room to spare",
            ) from exc
        if origin == "store":
            report.present.append(artifact.filename)
        elif origin is None:
            report.missing.append(_missing_message(what, artifact, config))
        else:
            report.fetched.append((artifact.filename, origin))
    report.missing += unbuildable_sources(lock)
    report.notes += sources_built_in_images(lock)
    return report


def fetch_artifact(
    store: Store,
    artifact: Artifact,
    what: str,
    package: str | None,
    config: FetchConfig,
    progress: Progress | None = None,
) -> str | None:
    """Bring one artifact into the store unless it is there (of the right size): the origin's
    kind ("store" when it was there), or None when nothing has it. Holds the artifact's lock, so
    concurrent callers bring it once."""
    with store.locked(artifact):
        if store.has(artifact):
            return "store"
        for folder in config.find_links:
            candidate = folder / artifact.filename
            if candidate.is_file():
                store.copy_in(candidate, artifact, what, "find-links")
                return "find-links"
        if config.offline:
            return None
        for mirror in config.mirrors:
            origin = _from_mirror(store, artifact, what, mirror, progress)
            if origin:
                return origin
        if package is None:
            return None
        url = _index_url_for(artifact, package, config)
        if url is None:
            return None
        download(store, artifact, what, url, "index", progress)
        return "index"


def unbuildable_sources(lock: Lock) -> list[str]:
    """Sources whose wheel is not recorded and whose tree was not reached when the lock was
    made: what is missing to build them, in words."""
    messages = []
    for source in lock.sources:
        if source.wheel is not None or source.status == "surveyed":
            continue
        if source.rev_unresolved:
            messages.append(
                f"source {source.name}: rev {source.rev} is only a commit prefix; resolve it"
                " against its remote (git ls-remote / git rev-parse), write the full commit in"
                f" env.toml, then `envaudit lock {lock.env}` builds it"
            )
        else:
            messages.append(
                f"source {source.name}: no built wheel recorded; `envaudit lock {lock.env}` builds"
                " it (its sources and build requirements must be reachable)"
            )
    return messages


def sources_built_in_images(lock: Lock) -> list[str]:
    """Sources locked without a wheel whose tree was surveyed: an image build compiles them in a
    build stage (their build requirements and toolchain are among the artifacts fetched); the
    local and host runtimes install wheels only."""
    return [
        f"source {s.name}: no wheel in the lock; `envaudit build` compiles it from its tree at"
        f" {s.rev} (ENVAUDIT_GIT_BASES must reach it), while the local and host runtimes need"
        + (
            ' its wheel, which no lock holds (built_in = "image": run this env in its image)'
            if s.built_in == "image"
            else f" its wheel (`envaudit lock {lock.env} --rebuild {s.name}`)"
        )
        for s in lock.sources
        if s.wheel is None and s.status == "surveyed"
    ]


def download(
    store: Store, artifact: Artifact, what: str, url: str, origin: str, progress: Progress | None
) -> None:
    """HTTP download into the partial file, resuming from its current length; verified, then
    admitted. A mismatch deletes the partial file so the next run starts clean. The caller
    holds the artifact's lock (the partial file is shared between runs)."""
    partial = store.partial_path(artifact)
    partial.parent.mkdir(parents=True, exist_ok=True)
    have = partial.stat().st_size if partial.exists() else 0
    if have > artifact.size:
        partial.unlink()
        have = 0
    if have < artifact.size:
        request = urllib.request.Request(url, headers={"Range": f"bytes={have}-"} if have else {})
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
                if have and response.status != 206:  # server ignored the range: start over
                    have = 0
                with partial.open("ab" if have else "wb") as handle:
                    while block := response.read(CHUNK):
                        handle.write(block)
                        have += len(block)
                        if progress:
                            progress(artifact.filename, have, artifact.size)
        except (urllib.error.URLError, OSError) as exc:
            raise LockError(
                f"{what}: download of {artifact.filename} from the {origin} failed after"
                f" {have} of {artifact.size} bytes: {exc}",
                hint="run fetch again: it resumes from what was downloaded",
            ) from exc
    try:
        store.admit(partial, artifact, what, origin)
    except LockError:
        partial.unlink(missing_ok=True)
        raise


def _wanted(lock: Lock) -> list[tuple[str, Artifact, str | None]]:
    """(what, artifact, index package name or None) for every artifact of the lock."""
    wanted: list[tuple[str, Artifact, str | None]] = []
    for package in lock.packages:  # a name may be locked twice (runtime and CUDA toolchain)
        wanted.append((package_label(package), package.artifact, package.name))
    for source in lock.sources:
        for package in source.build_requires:
            what = f"{package.name}=={package.version} (to build {source.name})"
            wanted.append((what, package.artifact, package.name))
        if source.sdist is not None:
            wanted.append((f"{source.name} sdist", source.sdist, source.name))
        if source.wheel is not None:
            wanted.append((f"{source.name} (built wheel)", source.wheel, None))
    return wanted


def _from_mirror(
    store: Store, artifact: Artifact, what: str, mirror: str, progress: Progress | None
) -> str | None:
    if mirror.startswith(("http://", "https://")):
        for url in (
            f"{mirror.rstrip('/')}/{artifact.filename}",
            f"{mirror.rstrip('/')}/sha256/{artifact.sha256}",
        ):
            try:
                download(store, artifact, what, url, "mirror", progress)
                return "mirror"
            except LockError as exc:
                if exc.exit_code == EXIT_FAILED:
                    raise
        return None
    for candidate in (Path(mirror) / artifact.filename, Path(mirror) / "sha256" / artifact.sha256):
        if candidate.is_file():
            store.copy_in(candidate, artifact, what, "mirror")
            return "mirror"
    return None


def _index_url_for(artifact: Artifact, package: str, config: FetchConfig) -> str | None:
    """The index's URL of the file with this name and hash (None when the index lacks it)."""
    page = f"{config.index_url}/{normalize_name(package)}/"
    request = urllib.request.Request(page, headers={"Accept": SIMPLE_JSON})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            listing = json.load(response)
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise LockError(
            f"the index answered {exc.code} for {package}", hint="check the index"
        ) from exc
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise LockError(f"the index could not be read for {package}: {exc}") from exc
    for entry in listing.get("files", []):
        if entry.get("filename") == artifact.filename:
            if entry.get("hashes", {}).get("sha256") not in (None, artifact.sha256):
                raise LockError(
                    f"{package}: the index lists {artifact.filename} with sha256"
                    f" {entry['hashes']['sha256']}, the lock says {artifact.sha256}; refused",
                    exit_code=EXIT_FAILED,
                )
            return str(urllib.parse.urljoin(page, entry["url"]))
    return None


def _missing_message(what: str, artifact: Artifact, config: FetchConfig) -> str:
    where = "the store (--offline)" if config.offline else "the store, find-links, mirrors or index"
    return f"{what}: {artifact.filename} (sha256 {artifact.sha256}) is not in {where}"


def fetch_env(
    env: str,
    locks_dir: Path,
    config: FetchConfig,
    progress: Progress | None = None,
    substitute: str | None = None,
) -> None:
    """Every artifact of the env's current lock (or its substitute base's closure) into the
    store (a no-op when all are there); a LockError naming the first missing ones otherwise."""
    lock = current_lock(env_dir(env, locks_dir), substitute=substitute)
    report = fetch_lock(lock, config, progress)
    if not report.complete:
        listed = "; ".join(report.missing[:3]) + (" ..." if len(report.missing) > 3 else "")
        raise LockError(
            f"{len(report.missing)} artifact(s) of {env} cannot be fetched: {listed}",
            hint=f"`envaudit fetch {env}{_asked(substitute)}` says where it looked (find-links,"
            " mirrors, index)",
        )


def _asked(substitute: str | None) -> str:
    return f" --substitute-base {substitute}" if substitute is not None else ""
