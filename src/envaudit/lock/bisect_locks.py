"""Where `bisect-env` finds the locks it runs: the two ends, and each intermediate, a real lock
resolved offline from the store.

An intermediate is A's env.toml with every runtime package pinned to the version the step
holds (A's, or B's for an applied change), written with its lock.json into
`<cache>/bisect/<A>-<B>/locks/bisect-<digest>/`, so that every runtime finds it the way it finds
an env of locks/ (by name, in a locks folder) and refuses it the same way when it is stale.
`lock_env`, the resolver of `envaudit lock`, resolves it with uv from a folder holding exactly
the step's files from the store (`--no-index --offline`): uv either confirms the set or says
why it cannot hold together, and the lock names the same artifacts, by hash, as the ends do.
A folder whose lock is current is used again: a second bisect of the same ends resolves
nothing.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from envaudit.lock.bisect import CannotBisect, Ends, Folded, chosen_packages
from envaudit.lock.config import FetchConfig
from envaudit.lock.files import LockError, load_lock, load_spec, write_lock
from envaudit.lock.history import FoundLock, git_export, git_root
from envaudit.lock.resolve import BASES_DIR, current_lock, lock_env
from envaudit.lock.store import Store
from envaudit.schema.locks import Artifact, EnvSpec, Lock, seal, split_pin
from envaudit.schema.writes import replace_text
from envaudit.settings import cache_root

BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


@dataclass(frozen=True)
class Place:
    """A lock as a runtime finds it: env `env` under `locks_dir`."""

    env: str
    locks_dir: Path
    lock: Lock

    @property
    def folder(self) -> Path:
        return self.locks_dir / self.env


def work_folder(ends: Ends) -> Path:
    """The bisection's own folder in the cache, named by both closures."""
    a, b = ends.a.lock.closure_hash[:16], ends.b.lock.closure_hash[:16]
    return cache_root() / "bisect" / f"{a}-{b}"


def end_place(found: FoundLock, locks_dir: Path, work: Path, side: str) -> Place:
    """An end where a runtime can find it: in place when it is an env of `locks_dir`, else
    its folder copied (a lock.json given as a file) or exported from git history (a closure
    hash the lock has moved on from) into the bisection's folder."""
    origin = Path(found.origin)
    env = found.lock.env
    if origin.name == "lock.json" and origin.parent.parent.resolve() == locks_dir.resolve():
        return Place(origin.parent.name, locks_dir, found.lock)
    ends_dir = work / "ends" / side
    folder = ends_dir / env
    if _holds(folder, found.lock.closure_hash):
        return Place(env, ends_dir, found.lock)
    shutil.rmtree(folder, ignore_errors=True)
    ends_dir.mkdir(parents=True, exist_ok=True)
    if origin.is_file():
        shutil.copytree(origin.parent, folder)
    else:
        _export(found, locks_dir, folder)
    if not (folder / "env.toml").is_file():
        raise CannotBisect(
            f"{found.origin}: the lock of {env} has no env.toml beside it; a runtime needs both",
            hint="give the env's folder (env.toml and lock.json), or its env name",
        )
    return Place(env, ends_dir, found.lock)


def _holds(folder: Path, closure_hash: str) -> bool:
    try:
        return load_lock(folder).closure_hash == closure_hash
    except LockError:
        return False


def _export(found: FoundLock, locks_dir: Path, folder: Path) -> None:
    """The env's folder as it was at the commit the lock was found in."""
    commit, _, path = found.origin.partition(":")
    repo = git_root(locks_dir)
    if repo is None or not path:
        raise CannotBisect(f"{found.origin}: cannot be read back from git history")
    with tempfile.TemporaryDirectory(dir=folder.parent) as tmp:
        exported = git_export(commit, str(Path(path).parent), repo, Path(tmp))
        shutil.move(str(exported), folder)


def step_name(ends: Ends, applied: frozenset[str]) -> str:
    """`bisect-<16 hex>`: the same ends and changes give the same env, hence the same closure."""
    text = json.dumps([ends.a.lock.closure_hash, ends.b.lock.closure_hash, sorted(applied)])
    return "bisect-" + hashlib.sha256(text.encode()).hexdigest()[:16]


def intermediate(ends: Ends, folded: Folded, a_place: Place, store: Store, work: Path) -> Place:
    """The step's lock (made once, then read back): A's env.toml with the step's pins, resolved
    by lock_env from the step's files alone."""
    name = step_name(ends, folded.applied)
    locks_dir = work / "locks"
    folder = locks_dir / name
    if _current(folder, name):
        return Place(name, locks_dir, load_lock(folder))
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    spec = step_spec(ends, folded, load_spec(a_place.folder))
    _copy_source_files(spec, a_place.folder, folder)
    write_env_toml(folder, spec)
    if a_place.lock.sources:  # built wheels are carried from A's lock (resolve._carry_wheel)
        write_lock(folder, a_place.lock)
    lock = _resolve(folder, ends, folded, a_place.lock, store)
    unbuilt = [s.name for s in lock.sources if s.wheel is None]
    if unbuilt:
        raise CannotBisect(
            f"step {name}: source build(s) {', '.join(unbuilt)} of {ends.describe('a')} could"
            " not be carried into the intermediate lock",
            hint=f"`envaudit lock {ends.a.lock.env}` records their wheels first",
        )
    write_lock(folder, lock)
    return Place(name, locks_dir, lock)


def _current(folder: Path, name: str) -> bool:
    """Whether the folder holds this step's lock, current against its env.toml."""
    try:
        return current_lock(folder, BASES_DIR).env == name
    except LockError:
        return False


def step_spec(ends: Ends, folded: Folded, spec_a: EnvSpec) -> EnvSpec:
    """A's env.toml, every runtime package pinned as the step holds it (constraints on them
    dropped: each is pinned), env vars as applied."""
    chosen = chosen_packages(ends, folded.applied)
    pinned_names = set(ends.packages_a) | set(ends.packages_b)
    env_vars = dict(ends.a.lock.env_vars)
    for change in ends.changes:
        if change.kind == "env_var" and change.key in folded.applied:
            if change.b is None:
                env_vars.pop(change.name, None)
            else:
                env_vars[change.name] = change.b
    body = spec_a.model_dump(mode="json")
    body["description"] = (
        f"bisect-env step between {ends.describe('a')} and {ends.describe('b')}:"
        f" {len(folded.applied)} of {len(ends.changes)} change(s) applied"
    )
    body["requirements"] = [f"{name}=={chosen[name].version}" for name in sorted(chosen)]
    body["constraints"] = [c for c in spec_a.constraints if split_pin(c)[0] not in pinned_names]
    spec_b = _spec_beside(ends.b)
    extra = spec_b.find_links_only if spec_b is not None else []
    body["find_links_only"] = sorted({*spec_a.find_links_only, *extra})
    body["env"] = env_vars
    return EnvSpec.model_validate(body)


def _spec_beside(found: FoundLock) -> EnvSpec | None:
    import tomllib

    if not found.env_toml:
        return None
    try:
        return EnvSpec.model_validate(tomllib.loads(found.env_toml))
    except (tomllib.TOMLDecodeError, ValueError):
        return None


def _copy_source_files(spec: EnvSpec, source: Path, folder: Path) -> None:
    for build in spec.sources:
        for name in build.files:
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source / name, folder / name)


def _resolve(folder: Path, ends: Ends, folded: Folded, lock_a: Lock, store: Store) -> Lock:
    """lock_env from the ends' files alone, then each artifact's index named as the end that
    holds it names it (find-links here: a folder of the store). Every runtime package is pinned,
    so uv takes exactly the step's versions or fails; a package the pins did not name (a
    requirement the fold could not read) is refused, as is any other file than the step's."""
    house = store.wheelhouse(_files_of(ends), folder.parent.parent / "wheels")
    config = FetchConfig(store=store.root, find_links=[house], no_index=True)
    try:
        lock = lock_env(folder, config, BASES_DIR)
    except LockError as exc:
        raise CannotBisect(
            f"uv cannot resolve the step holding {', '.join(sorted(folded.applied))}"
            f" between {ends.describe('a')} and {ends.describe('b')}: {exc}",
            hint="these changes do not make a consistent environment on their own",
        ) from None
    wanted = {name: p.artifact.sha256 for name, p in chosen_packages(ends, folded.applied).items()}
    got = {canonicalize_name(p.name): p.artifact.sha256 for p in lock.runtime_packages()}
    if got != wanted:
        odd = sorted(set(got.items()) ^ set(wanted.items()))
        raise CannotBisect(
            f"uv resolved the step holding {', '.join(sorted(folded.applied))} to other files"
            f" than its pins: {', '.join(name for name, _ in odd)}",
            hint="both ends must hold each package as one file name per version",
        )
    return _with_indexes(lock, ends)


def _files_of(ends: Ends) -> list[Artifact]:
    """Every file either end installs or builds with: what a step may be resolved from."""
    files: list[Artifact] = []
    for found in (ends.a, ends.b):
        files += [p.artifact for p in found.lock.packages]
        for source in found.lock.sources:
            files += [p.artifact for p in source.build_requires]
            files += [source.sdist] if source.sdist is not None else []
    return files


def _with_indexes(lock: Lock, ends: Ends) -> Lock:
    index = {p.artifact.sha256: p.index for found in (ends.a, ends.b) for p in found.lock.packages}
    body = lock.closure_body()
    for package in body["packages"]:
        package["index"] = index.get(package["artifact"]["sha256"], package["index"])
    return seal(body)


def write_env_toml(folder: Path, spec: EnvSpec) -> Path:
    """env.toml of `spec`, checked to read back as the same spec (its hash is the lock's
    spec_sha256, which every runtime compares)."""
    path = replace_text(folder / "env.toml", toml_text(spec.model_dump(mode="json")))
    if load_spec(folder).canonical_sha256() != spec.canonical_sha256():
        raise CannotBisect(f"{path} does not read back as the spec it was written from")
    return path


def toml_text(data: Mapping[str, Any]) -> str:
    """TOML of a JSON-like mapping (strings, numbers, booleans, lists, tables; None left out),
    every table inline: enough for an env.toml, which the project never writes otherwise."""
    header = "# Written by `envaudit bisect-env`: one step of a bisection (not for locks/).\n"
    lines = [f"{_key(k)} = {_value(v)}" for k, v in data.items() if v is not None]
    return header + "\n".join(lines) + "\n"


def _key(key: str) -> str:
    return key if BARE_KEY.match(key) else json.dumps(key, ensure_ascii=False)


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value if v is not None) + "]"
    if isinstance(value, dict):
        inner = ", ".join(f"{_key(k)} = {_value(v)}" for k, v in value.items() if v is not None)
        return "{" + inner + "}" if inner else "{}"
    raise TypeError(f"no TOML for {value!r}")
