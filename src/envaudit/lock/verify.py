"""`envaudit verify-env`: does an installed Python environment hold what a lock says?

The target interpreter is only ever run in a subprocess with a stdlib-only script that lists
its distributions; nothing of it is imported here, so a broken or foreign environment cannot
change the process that judges it.

Which differences fail, and why:

- a locked package that is missing, installed at another version, or installed as another
  build (same public version, other local label such as `+cu130`) always fails: the code that
  would run is not the code that was locked;
- a file whose content differs from the locked wheel's RECORD always fails, for the same reason
  (checked only where the locked wheel is in the content-addressed store);
- an installed package that the lock does not hold ("extra") fails only with `--exact`. A shared
  host interpreter may hold more than the lock and still run the locked packages exactly as
  locked; `--exact` is for environments that were made from the lock alone.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import subprocess
import tempfile
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from packaging.utils import parse_wheel_filename
from packaging.version import InvalidVersion, Version

from envaudit.errors import EXIT_USAGE
from envaudit.lock.files import LockError
from envaudit.lock.store import Store
from envaudit.schema.locks import Artifact, Lock, normalize_name

if TYPE_CHECKING:  # the line models load only where a drift record is made
    from envaudit.schema.result_line import EnvCheck

MARKER = "ENVAUDIT-DISTRIBUTIONS:"
EXAMPLES = 3  # paths named per package whose files differ
NOT_IN_STORE = "artifact not in the store"
NO_RECORD = "no RECORD installed"
BUILT_IN_PLACE = "built where the environment was made (no wheel in the lock)"

# Runs inside the target interpreter: stdlib only, and as old a Python 3 as importlib.metadata.
# The marker keeps a sitecustomize that prints to stdout from corrupting the answer.
LIST_SCRIPT = f"""
import base64, csv, hashlib, io, json, os, sys
from importlib import metadata
found = []
with_records = "records" in sys.argv[1:]
on_disk = "disk" in sys.argv[1:]
def digest(path):
    hasher = hashlib.sha256()
    try:
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                hasher.update(block)
    except OSError:
        return None
    return "sha256=" + base64.urlsafe_b64encode(hasher.digest()).rstrip(b"=").decode()
for dist in metadata.distributions():
    name = dist.metadata["Name"]
    if not name:
        continue
    text = dist.read_text("RECORD") if with_records else None
    record = None
    location = str(dist.locate_file(""))
    if text is not None:
        record = [(row + ["", ""])[:2] for row in csv.reader(io.StringIO(text)) if row]
    disk = None
    if record is not None and on_disk:
        disk = [(path, digest(os.path.join(location, path))) for path, _ in record]
    found.append({{"name": name, "version": dist.version or "", "location": location,
                  "record": record, "disk": disk}})
sys.stdout.write("\\n{MARKER}" + json.dumps(found) + "\\n")
"""


@dataclass(frozen=True)
class InstalledDist:
    """One distribution as the target interpreter sees it; `record` is None without RECORD.
    `disk`: each RECORD path's sha256 as hashed where the files are (inside a container image,
    where this process cannot read them); None when they are on this machine's disk."""

    name: str
    version: str
    location: Path
    record: tuple[tuple[str, str], ...] | None
    disk: tuple[tuple[str, str | None], ...] | None = None


@dataclass(frozen=True)
class LockedDist:
    """A package the environment must hold: a locked wheel or the built wheel of a source."""

    name: str
    version: str
    artifact: Artifact


@dataclass(frozen=True)
class VersionDrift:
    name: str
    locked: str
    installed: str
    kind: Literal["different version", "different build"]


@dataclass(frozen=True)
class FileDrift:
    """Installed files of a locked package whose sha256 is not the locked wheel's."""

    name: str
    version: str
    differing: int
    compared: int
    examples: tuple[str, ...]


@dataclass
class Drift:
    """Everything compare() found; `failed()` applies the rules of the module docstring."""

    env: str
    locked: int
    matching: list[str] = field(default_factory=list)
    missing: list[LockedDist] = field(default_factory=list)
    different: list[VersionDrift] = field(default_factory=list)
    changed_files: list[FileDrift] = field(default_factory=list)
    extra: list[InstalledDist] = field(default_factory=list)
    hashes_checked: list[str] = field(default_factory=list)
    hashes_not_checked: dict[str, str] = field(default_factory=dict)
    python: tuple[str, str] | None = None  # (locked, installed) when they differ

    def failed(self, exact: bool = False) -> bool:
        return bool(
            self.python
            or self.missing
            or self.different
            or self.changed_files
            or (exact and self.extra)
        )


# --- what is installed ------------------------------------------------------------------------


def installed_distributions(python: str, records: bool = True) -> list[InstalledDist]:
    """The distributions importable by `python`, first on sys.path winning (as in imports);
    without `records`, names and versions only (no RECORD files read: no file-hash check).

    The script runs from an empty folder so that our working directory (first on sys.path
    with `-c`) cannot add distributions the environment does not hold."""
    with tempfile.TemporaryDirectory(prefix="envaudit-verify-") as cwd:
        try:
            done = subprocess.run(
                [python, "-c", LIST_SCRIPT, *(["records"] if records else [])],
                capture_output=True,
                text=True,
                cwd=cwd,
                timeout=300,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise _python_error(python, f"cannot run it: {exc}") from exc
    if done.returncode != 0:
        raise _python_error(python, f"it exited {done.returncode}: {done.stderr.strip()[-2000:]}")
    return parse_listing(python, done.stdout)


def python_version(python: str) -> str:
    """major.minor of the interpreter (run, never imported)."""
    try:
        done = subprocess.run(
            [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise _python_error(python, f"cannot run it: {exc}") from exc
    if done.returncode != 0:
        raise _python_error(python, f"it exited {done.returncode}: {done.stderr.strip()[-500:]}")
    return done.stdout.strip().splitlines()[-1]


def _python_error(python: str, detail: str) -> LockError:
    return LockError(
        f"--python {python}: {detail}",
        exit_code=EXIT_USAGE,
        hint="pass --python with the interpreter of the environment to verify",
    )


def parse_listing(python: str, stdout: str) -> list[InstalledDist]:
    lines = [line for line in stdout.splitlines() if line.startswith(MARKER)]
    if not lines:
        raise _python_error(python, "it printed no list of distributions")
    try:
        raw: list[dict[str, Any]] = json.loads(lines[-1][len(MARKER) :])
    except ValueError as exc:
        raise _python_error(python, f"its list of distributions is not JSON: {exc}") from exc
    found: dict[str, InstalledDist] = {}
    for item in raw:
        dist = _installed(item)
        found.setdefault(dist.name, dist)  # a shadowed copy further down sys.path is not used
    return sorted(found.values(), key=lambda d: d.name)


def _installed(item: dict[str, Any]) -> InstalledDist:
    record, disk = item.get("record"), item.get("disk")
    return InstalledDist(
        name=normalize_name(str(item["name"])),
        version=str(item["version"]),
        location=Path(str(item["location"])),
        record=None if record is None else tuple((str(p), str(h)) for p, h in record),
        disk=None
        if disk is None
        else tuple((str(p), None if h is None else str(h)) for p, h in disk),
    )


# --- what is locked ---------------------------------------------------------------------------


def locked_distributions(lock: Lock) -> list[LockedDist]:
    """The run closure: runtime packages plus the built wheels of sources. Build-only inputs
    are not part of the environment, nor is the CUDA toolchain (role "cuda": its own prefix at
    cuda.home, and it may lock another version of a runtime package's name)."""
    found = {p.name: LockedDist(p.name, p.version, p.artifact) for p in lock.runtime_packages()}
    for source in lock.sources:
        if source.wheel is None:
            continue
        _, wheel_version, _, _ = parse_wheel_filename(source.wheel.filename)
        name = normalize_name(source.name)
        found[name] = LockedDist(name, source.version or str(wheel_version), source.wheel)
    return sorted(found.values(), key=lambda d: d.name)


# --- the comparison ---------------------------------------------------------------------------


def compare(
    lock: Lock,
    installed: Iterable[InstalledDist],
    store: Path | None,
    python_version: str | None = None,
) -> Drift:
    """Compare the installed distributions with the lock; file hashes where the store allows;
    the interpreter's major.minor when given."""
    locked = locked_distributions(lock)
    by_name = {d.name: d for d in installed}
    drift = Drift(env=lock.env, locked=len(locked))
    if python_version is not None and python_version != lock.python:
        drift.python = (lock.python, python_version)
    for want in locked:
        have = by_name.get(want.name)
        if have is None:
            drift.missing.append(want)
            continue
        kind = version_drift(want.version, have.version)
        if kind is not None:
            drift.different.append(VersionDrift(want.name, want.version, have.version, kind))
            continue
        if _check_files(want, have, store, drift):
            drift.matching.append(want.name)
    names = {d.name for d in locked} | _built_in_place(lock, by_name, drift)
    drift.extra = [d for d in by_name.values() if d.name not in names]
    return drift


def _built_in_place(lock: Lock, by_name: dict[str, InstalledDist], drift: Drift) -> set[str]:
    """Sources the lock holds no wheel of, found installed: an image compiles such a source in
    its build stage from the locked tree (status "surveyed"), so the version is whatever that
    build made and there is no wheel to hash the files against. They match by name, are
    counted among the locked, and say why their files were not checked."""
    found = set()
    for source in lock.sources:
        name = normalize_name(source.name)
        if source.wheel is not None or name not in by_name:
            continue
        found.add(name)
        drift.locked += 1
        drift.matching.append(name)
        drift.hashes_not_checked[name] = BUILT_IN_PLACE
    return found


def version_drift(
    locked: str, installed: str
) -> Literal["different version", "different build"] | None:
    """None when equal as versions (1.0 == 1.0.0); a local label (+cu130) is a different build."""
    try:
        want, have = Version(locked), Version(installed)
    except InvalidVersion:
        return None if locked == installed else "different version"
    if want == have:
        return None
    return "different build" if want.public == have.public else "different version"


def _check_files(want: LockedDist, have: InstalledDist, store: Path | None, drift: Drift) -> bool:
    """Record the file-hash outcome for one package; False when its files differ."""
    if store is None or not Store(store).has(want.artifact):
        drift.hashes_not_checked[want.name] = NOT_IN_STORE
        return True
    wheel = Store(store).path_of(want.artifact)
    if have.record is None:
        drift.hashes_not_checked[want.name] = NO_RECORD
        return True
    drift.hashes_checked.append(want.name)
    found = file_drift(want, have, wheel_record(wheel, want))
    if found is None:
        return True
    drift.changed_files.append(found)
    return False


def wheel_record(wheel: Path, want: LockedDist) -> dict[str, str]:
    """path -> `sha256=...` from the wheel's top-level *.dist-info/RECORD."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            names = [
                n
                for n in archive.namelist()
                if n.count("/") == 1 and n.endswith(".dist-info/RECORD")
            ]
            if len(names) != 1:
                raise zipfile.BadZipFile(f"{len(names)} *.dist-info/RECORD files, expected 1")
            text = archive.read(names[0]).decode()
    except (OSError, zipfile.BadZipFile, UnicodeDecodeError) as exc:
        raise LockError(
            f"{wheel} ({want.artifact.filename}) is not a readable wheel: {exc}",
            exit_code=EXIT_USAGE,
            hint="remove it from the store and fetch it again",
        ) from exc
    rows = csv.reader(io.StringIO(text))
    return {row[0]: row[1] for row in rows if len(row) > 1 and row[1]}


def file_drift(want: LockedDist, have: InstalledDist, expected: dict[str, str]) -> FileDrift | None:
    """Files whose installed RECORD hash or on-disk content differs from the locked wheel.

    The installed RECORD tells what the installer unpacked; hashing the file on disk catches
    edits made after installation. Files under `*.data/` are relocated by installers (scripts,
    headers) and are skipped, and so is bytecode the installer compiles from a source of the
    same wheel (`--compile-bytecode` rewrites a shipped `__pycache__/*.pyc`): the source it is
    compiled from is compared, and an edit to it still fails."""
    recorded = dict(have.record or ())
    hashed = dict(have.disk) if have.disk is not None else None
    differing: list[str] = []
    compared = 0
    for path, digest in sorted(expected.items()):
        if path.split("/", 1)[0].endswith(".data") or compiled_from(path) in expected:
            continue
        compared += 1
        on_disk = hashed.get(path) if hashed is not None else _on_disk(have.location / path)
        if recorded.get(path) != digest or on_disk != digest:
            differing.append(path)
    if not differing:
        return None
    return FileDrift(want.name, want.version, len(differing), compared, tuple(differing[:EXAMPLES]))


def compiled_from(path: str) -> str | None:
    """The source a `__pycache__/NAME.TAG[.opt-N].pyc` path is compiled from (`NAME.py` one
    folder up); None for any other path (a sourceless `.pyc` is a file like any other)."""
    folder, _, name = path.rpartition("/")
    parent, _, cache = folder.rpartition("/")
    if cache != "__pycache__" or not name.endswith(".pyc") or name.count(".") < 2:
        return None
    source = name.split(".", 1)[0] + ".py"
    return f"{parent}/{source}" if parent else source


def _on_disk(path: Path) -> str | None:
    """The RECORD form (`sha256=` + urlsafe base64, unpadded) of a file's sha256."""
    try:
        with path.open("rb") as handle:
            digest = hashlib.file_digest(handle, "sha256").digest()
    except OSError:
        return None
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


# --- for people -------------------------------------------------------------------------------


def render(drift: Drift, exact: bool = False) -> str:
    """One line per finding, grouped by kind, then a summary line."""
    lines = []
    if drift.python:
        lines.append(f"different python: locked {drift.python[0]}, interpreter {drift.python[1]}")
    lines += [f"missing: {d.name}=={d.version}" for d in drift.missing]
    lines += [
        f"{d.kind}: {d.name} locked {d.locked}, installed {d.installed}" for d in drift.different
    ]
    for f in drift.changed_files:
        named = ", ".join(f.examples) + (", ..." if f.differing > len(f.examples) else "")
        lines.append(
            f"changed files: {f.name}=={f.version}: {f.differing} of {f.compared} files differ"
            f" from the locked wheel ({named})"
        )
    label = "extra (not in the lock)" + (", failing with --exact" if exact else "")
    lines += [f"{label}: {d.name}=={d.version}" for d in drift.extra]
    lines.append(summary(drift, exact))
    return "\n".join(lines)


def summary(drift: Drift, exact: bool = False) -> str:
    extra = f"{len(drift.extra)} extra" + ("" if exact else " (not failing)")
    parts = [
        f"{drift.locked} locked",
        f"{len(drift.matching)} match",
        f"{len(drift.missing)} missing",
        f"{len(drift.different)} different",
        f"{len(drift.changed_files)} with changed files",
        extra,
        f"hashes checked for {len(drift.hashes_checked)}",
    ]
    reasons: dict[str, int] = {}
    for reason in drift.hashes_not_checked.values():
        reasons[reason] = reasons.get(reason, 0) + 1
    parts += [f"hash not checked for {n} ({reason})" for reason, n in sorted(reasons.items())]
    return f"verify-env {drift.env}: " + ", ".join(parts)


def drift_record(drift: Drift, limit: int = 8) -> EnvCheck:
    """What a result line carries about its interpreter against the declared lock (extras are
    not counted: a shared interpreter may hold more). `matches` False means the line was not
    measured in the environment the solution declares. The lock's closure hash is the line's
    `context.closure_hash`, not repeated here (result schema version 2)."""
    from envaudit.schema.result_line import EnvCheck, EnvCheckCounts

    return EnvCheck(
        matches=not drift.failed(),
        python=list(drift.python) if drift.python else None,
        missing=[f"{d.name}=={d.version}" for d in drift.missing[:limit]],
        different=[f"{d.name} {d.locked} -> {d.installed}" for d in drift.different[:limit]],
        counts=EnvCheckCounts(
            locked=drift.locked, missing=len(drift.missing), different=len(drift.different)
        ),
    )
