"""The changes `bisect-env` moves one at a time between two locks, and which of them must move
together.

`diff-env` lists what differs between lock A and lock B by kind. The runtime packages among
those differences (a version changed, a package added or removed) and the runtime environment
variables can be applied to A one by one: every other difference (Python, platform, base, CUDA
toolchain, source builds and their flags) changes what a step's packages would be built or run
by, so a lock holding some of B's packages over A's toolchain is no environment either end
describes. Such ends are refused with what differs, so that the user bisects the part that can
be split (two locks that share their toolchain).

A set of changes is consistent when every runtime package's requirements (its wheel's
Requires-Dist, read from the store) are met by the other packages of the set. Applying a change
whose new version pins a partner (torch 2.11 requires triton==3.6.0) forces the partner's change
too: `fold` adds such partners, and says which requirement forced each. uv then resolves the
folded set (bisect_locks.py), so the requirements read here only choose what to try; the
resolver that made both ends decides whether an intermediate exists.
"""

from __future__ import annotations

import functools
import zipfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from email.parser import HeaderParser
from pathlib import Path
from typing import Literal

from packaging.markers import default_environment
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from envaudit.errors import EXIT_USAGE, EnvauditError
from envaudit.lock.diff import diff_locks
from envaudit.lock.history import FoundLock
from envaudit.lock.store import Store
from envaudit.schema.locks import Artifact, LockedPackage

PACKAGE_GROUPS = ("torch, Triton and CUDA libraries", "the env's own packages", "everything else")
"""diff-env's groups that hold runtime packages (the CUDA toolchain's are not moved alone)."""
ENV_PREFIX = "env_vars."
IGNORED = {"resolver"}
"""Differences that change no environment: the uv that resolved each end (every intermediate is
resolved by this one)."""


class CannotBisect(EnvauditError):
    """A bisection that cannot be attempted (exit 2): what is in the way, and what to do."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message, EXIT_USAGE, hint=hint)


@dataclass(frozen=True)
class Change:
    """One difference that can be applied to A on its own (forced partners aside)."""

    key: str
    """The package's canonical name, or `env_vars.NAME`."""
    kind: Literal["package", "env_var"]
    group: str
    """diff-env's group, for the order (most kernel-relevant first) and the output."""
    a: str | None
    """The version (or value) in A; None: A does not have it."""
    b: str | None

    @property
    def name(self) -> str:
        return self.key.removeprefix(ENV_PREFIX)

    def label(self) -> str:
        """`tilelang 0.1.12 -> 0.1.15`, `toyccc (absent) -> 1.0`."""
        return f"{self.name} {self.a or '(absent)'} -> {self.b or '(absent)'}"


@dataclass(frozen=True)
class Ends:
    """The two locks and their runtime packages by canonical name."""

    a: FoundLock
    b: FoundLock
    packages_a: Mapping[str, LockedPackage]
    packages_b: Mapping[str, LockedPackage]
    changes: tuple[Change, ...]

    def describe(self, which: Literal["a", "b"]) -> str:
        """`env (closure 0123456789abcdef)`: how messages name an end."""
        lock = (self.a if which == "a" else self.b).lock
        return f"{lock.env} (closure {lock.closure_hash})"

    def index(self, key: str) -> int:
        return next(i for i, c in enumerate(self.changes) if c.key == key)


def ends_of(a: FoundLock, b: FoundLock) -> Ends:
    """The movable changes from A to B in diff-env's order; CannotBisect when the locks are one
    closure, have nothing to move, or differ in what cannot be moved piecewise."""
    names = f"A {a.lock.env} (closure {a.lock.closure_hash}) and B {b.lock.env} (closure" + (
        f" {b.lock.closure_hash})"
    )
    if a.lock.closure_hash == b.lock.closure_hash:
        raise CannotBisect(f"{names} are one closure: nothing to bisect")
    packages_a = _runtime(a.lock.runtime_packages())
    packages_b = _runtime(b.lock.runtime_packages())
    changes: list[Change] = []
    fixed: list[str] = []
    for difference in diff_locks(a, b).changes:
        item, name = difference.item, canonicalize_name(difference.item)
        if difference.group in PACKAGE_GROUPS and (name in packages_a or name in packages_b):
            old, new = packages_a.get(name), packages_b.get(name)
            changes.append(
                Change(name, "package", difference.group, _shown(old, new), _shown(new, old))
            )
        elif item.startswith(ENV_PREFIX):
            changes.append(Change(item, "env_var", difference.group, difference.a, difference.b))
        elif item not in IGNORED:
            fixed.append(f"{difference.group}: {item}")
    if fixed:
        listed = "; ".join(fixed[:8]) + (f"; ... ({len(fixed)} in all)" if len(fixed) > 8 else "")
        raise CannotBisect(
            f"{names} differ in what no intermediate lock can hold half of: {listed}",
            hint="bisect-env moves runtime packages and env vars; bisect between two locks that"
            f" share Python, base, CUDA toolchain and source builds (`envaudit diff-env"
            f" {a.lock.env} {b.lock.env}` lists every difference)",
        )
    if not changes:
        raise CannotBisect(f"{names} differ in nothing a step could move")
    return Ends(a, b, packages_a, packages_b, tuple(changes))


def _runtime(packages: Iterable[LockedPackage]) -> dict[str, LockedPackage]:
    return {canonicalize_name(p.name): p for p in packages}


def _shown(mine: LockedPackage | None, theirs: LockedPackage | None) -> str | None:
    """A package's version, with its hash when both ends hold that version as other bytes."""
    if mine is None:
        return None
    if theirs is not None and theirs.version == mine.version:
        return f"{mine.version} (sha256 {mine.artifact.sha256[:12]})"
    return mine.version


@dataclass(frozen=True)
class Folded:
    """A set of changes made consistent: the changes asked for, those their requirements
    forced, and why each forced one moved."""

    applied: frozenset[str]
    forced: Mapping[str, str] = field(default_factory=dict)
    """Change key -> the requirement that forced it (`toypair-a 2.0 requires toypair-b==2.0`)."""


def chosen_packages(ends: Ends, applied: Iterable[str]) -> dict[str, LockedPackage]:
    """A's runtime packages with the applied package changes taken from B."""
    chosen = dict(ends.packages_a)
    for key in applied:
        if key.startswith(ENV_PREFIX):
            continue
        if key in ends.packages_b:
            chosen[key] = ends.packages_b[key]
        else:
            chosen.pop(key, None)
    return chosen


def fold(ends: Ends, asked: Iterable[str], store: Store, python: str) -> Folded:
    """The smallest superset of `asked` whose packages meet each other's requirements: an unmet
    requirement moves the required package to B when B's version meets it, else moves the
    requiring package to B (whose own requirements may differ). Changes are only ever added, so
    a step holds what it was asked to hold. CannotBisect when no change can mend a requirement."""
    applied = set(asked)
    forced: dict[str, str] = {}
    changed = {c.key for c in ends.changes if c.kind == "package"}
    while True:
        chosen = chosen_packages(ends, applied)
        unmet = _first_unmet(chosen, store, python)
        if unmet is None:
            return Folded(frozenset(applied), forced)
        owner, requirement = unmet
        needed = canonicalize_name(requirement.name)
        why = f"{owner} {chosen[owner].version} requires {requirement}"
        theirs = ends.packages_b.get(needed)
        if needed in changed and needed not in applied and _meets(theirs, requirement):
            applied.add(needed)
            forced[needed] = why
        elif owner in changed and owner not in applied:
            applied.add(owner)
            forced[owner] = why
        else:
            raise CannotBisect(
                f"no consistent intermediate lock holds {', '.join(sorted(applied))}: {why},"
                f" which neither end's {needed} meets with the rest of the set",
                hint="the ends' requirements cross (check `envaudit diff-env`); bisect between"
                " locks nearer to each other",
            )


def _first_unmet(
    chosen: Mapping[str, LockedPackage], store: Store, python: str
) -> tuple[str, Requirement] | None:
    """(package, requirement) of the first requirement the chosen set does not meet, the
    requirements of the extras other packages ask for included (flashinfer-python asks for
    nvidia-cutlass-dsl[cu13], whose `extra == "cu13"` requirements then apply)."""
    extras = _extras_asked(chosen, store, python)
    for name in sorted(chosen):
        for requirement in _applying(chosen[name], store, python, extras.get(name, set())):
            if not _meets(chosen.get(canonicalize_name(requirement.name)), requirement):
                return name, requirement
    return None


def _applying(
    package: LockedPackage, store: Store, python: str, extras: set[str]
) -> list[Requirement]:
    """The package's requirements whose markers hold on the target, with no extra or with one
    of `extras`."""
    environments = [{**target_environment(python), "extra": e} for e in ("", *sorted(extras))]
    return [
        requirement
        for requirement in requirements_of(store, package.artifact)
        if requirement.marker is None
        or any(requirement.marker.evaluate(env) for env in environments)
    ]


def _extras_asked(
    chosen: Mapping[str, LockedPackage], store: Store, python: str
) -> dict[str, set[str]]:
    """Package -> the extras the chosen packages ask of it, followed until nothing new is asked
    (an extra's requirements may ask for extras in turn)."""
    asked: dict[str, set[str]] = {}
    while True:
        grown = False
        for name in sorted(chosen):
            for requirement in _applying(chosen[name], store, python, asked.get(name, set())):
                wanted = asked.setdefault(canonicalize_name(requirement.name), set())
                if not requirement.extras <= wanted:
                    wanted |= requirement.extras
                    grown = True
        if not grown:
            return asked


def _meets(package: LockedPackage | None, requirement: Requirement) -> bool:
    if package is None:
        return False
    try:
        return requirement.specifier.contains(Version(package.version), prereleases=True)
    except InvalidVersion:
        return False


def target_environment(python: str) -> dict[str, str]:
    """Marker values of the lock's target (Linux x86_64, CPython `python`), no extra asked."""
    environment: dict[str, str] = {k: str(v) for k, v in default_environment().items()}
    environment.update(
        python_version=python,
        python_full_version=f"{python}.0",
        sys_platform="linux",
        platform_system="Linux",
        platform_machine="x86_64",
        os_name="posix",
        implementation_name="cpython",
        platform_python_implementation="CPython",
        extra="",
    )
    return environment


@functools.lru_cache(maxsize=1024)
def _requires_dist(path: Path) -> tuple[str, ...]:
    with zipfile.ZipFile(path) as wheel:
        names = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
        if not names:
            return ()
        text = wheel.read(min(names, key=len)).decode("utf-8", errors="replace")
    return tuple(HeaderParser().parsestr(text).get_all("Requires-Dist") or ())


def requirements_of(store: Store, artifact: Artifact) -> list[Requirement]:
    """A wheel's Requires-Dist, read from its store entry (which fetch verified); an sdist or
    an unreadable entry has none here (uv still checks it when it resolves the step)."""
    path = store.path_of(artifact)
    if not artifact.filename.endswith(".whl") or not path.is_file():
        return []
    try:
        lines = _requires_dist(path)
    except (OSError, zipfile.BadZipFile):
        return []
    found = []
    for line in lines:
        try:
            found.append(Requirement(line))
        except InvalidRequirement:
            continue
    return found
