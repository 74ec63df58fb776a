"""env.toml -> lock.json: uv resolves (PEP 751 pylock.toml as the intermediate), we keep the
closure without URLs and seal it with its closure hash."""

from __future__ import annotations

import os
import subprocess
import tempfile
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import parse_wheel_filename

from envaudit.errors import EXIT_FAILED
from envaudit.lock.config import FetchConfig, uv_binary
from envaudit.lock.files import LockError, load_lock, load_spec, lock_command, lock_path
from envaudit.lock.registry import tag_digest
from envaudit.schema.locks import (
    Artifact,
    EnvSpec,
    Lock,
    LockedBase,
    LockedCuda,
    LockedPackage,
    LockedSource,
    LockedSubstitute,
    Role,
    SourceSpec,
    base_text,
    digested_reference,
    normalize_name,
    seal,
    split_pin,
    tagged_reference,
)
from envaudit.schema.paths import sha256_file
from envaudit.settings import OFFLINE, value

BASES_DIR = Path("containers/bases")


def lock_env(
    folder: Path, config: FetchConfig, bases_dir: Path = BASES_DIR, substitute: str | None = None
) -> Lock:
    """Resolve folder/env.toml into a sealed Lock (not yet written): the run closure and, on
    its own, the CUDA toolchain (role "cuda"), so that a name may be locked once per role.
    With `substitute`, the closure of that declared substitute base: the same declarations
    resolved for its base and Python, recording what it stands in for."""
    spec = load_spec(folder, substitute)
    base = _locked_base(spec, bases_dir)  # first: a tag the registry lacks stops here
    previous = _previous(folder, substitute)
    sdist_names = [split_pin(s.sdist)[0] for s in spec.sources if s.sdist]
    requirements = [*spec.requirements, *(s.sdist for s in spec.sources if s.sdist)]
    constraints = [*spec.constraints, *declared_pins(folder, spec, substitute)]
    pylock = resolve_pylock(
        requirements, constraints, spec.python, spec.platform, config, no_binary=sdist_names
    )
    packages, sdists = _packages(pylock, spec, "runtime")
    toolchain = resolve_toolchain(spec, config)
    sources = [
        _locked_source(source, spec, config, sdists, _Earlier(previous, toolchain), folder)
        for source in spec.sources
    ]
    declared = {s.name for s in sources}
    for name, (version, artifact) in sorted(sdists.items()):
        if name not in declared:  # sdist-only dependency: built like a declared sdist source
            sources.append(
                _carry_wheel(
                    LockedSource(
                        name=name,
                        kind="sdist",
                        version=version,
                        sdist=artifact,
                        note="no wheel on the index for this platform",
                    ),
                    _Earlier(previous, toolchain),
                )
            )
    body: dict[str, Any] = {
        "env": folder.name,
        "spec_sha256": spec.canonical_sha256(),
        "python": spec.python,
        "platform": spec.platform,
        "base": base.model_dump(mode="json"),
        "cuda": LockedCuda(
            version=spec.cuda.version,
            home=spec.cuda.home,
            build_only=spec.cuda.build_only,
            build_only_components=sorted(
                normalize_name(n) for n in spec.cuda.build_only_components or ()
            )
            or None,
        ).model_dump()
        if spec.cuda
        else None,
        "packages": [p.model_dump(mode="json") for p in sorted_packages([*packages, *toolchain])],
        "sources": [s.model_dump(mode="json") for s in sources],
        "env_vars": dict(spec.env),
        "resolver": uv_version(),
        "substitute": _locked_substitute(folder, substitute),
    }
    return seal(body)


def declared_pins(folder: Path, spec: EnvSpec, substitute: str | None) -> list[str]:
    """For a substitute over the declared Python, the declared closure's run versions as
    constraints (`name==version`, those env.toml does not pin itself): the substitute's wheels
    are then the declared closure's files, whenever either is locked, rather than what the
    index offers on the day (uv's picks of unpinned dependencies move). None for the declared
    closure, for a substitute of another Python (resolved for its own wheels) and while the
    declared lock is missing or stale (`envaudit lock ENV` locks it first)."""
    if substitute is None or not lock_path(folder).is_file():
        return []
    declared_spec = load_spec(folder)
    if declared_spec.python != spec.python:
        return []
    try:
        declared = load_lock(folder)
    except LockError:
        return []
    if declared.spec_sha256 != declared_spec.canonical_sha256():
        return []
    own = {split_pin(p)[0] for p in [*spec.requirements, *spec.constraints]}
    pins = {(p.name, p.version) for p in declared.packages if p.role == "runtime"}
    pins |= {(s.name, s.version) for s in declared.sources if s.kind == "sdist" and s.version}
    return sorted(f"{n}=={v}" for n, v in pins if normalize_name(n) not in own and v)


def _locked_substitute(folder: Path, substitute: str | None) -> dict[str, Any] | None:
    """What a substitute's closure records of the declared base it stands in for."""
    if substitute is None:
        return None
    declared = load_spec(folder)
    found = declared.substitute(substitute)
    assert found is not None  # load_spec(folder, substitute) refused an undeclared one
    return LockedSubstitute(
        name=substitute,
        declared_base=base_text(declared.base),
        declared_python=declared.python,
        note=found.note,
    ).model_dump(mode="json")


def resolve_toolchain(spec: EnvSpec, config: FetchConfig) -> list[LockedPackage]:
    """The CUDA toolchain as a build-only closure, resolved apart from the run closure: nvcc
    needs the runtime headers of its own release (nvidia-cuda-runtime 13.3.29 for nvcc 13.3.73)
    while torch pins the cudart the process loads (13.0.96), and one resolution cannot hold
    both. The env's constraints still apply, except those naming a component, so that what the
    components pull in (nvidia-cusparse's nvjitlink) matches the run closure."""
    if spec.cuda is None:
        return []
    names = {split_pin(c)[0] for c in spec.cuda.components}
    constraints = [c for c in spec.constraints if split_pin(c)[0] not in names]
    pylock = resolve_pylock(spec.cuda.components, constraints, spec.python, spec.platform, config)
    packages, sdists = _packages(pylock, spec, "cuda")
    if sdists:
        raise LockError(
            f"CUDA toolchain: no wheel for {spec.platform} of {', '.join(sorted(sdists))};"
            " toolchain components are installed from wheels only",
            exit_code=EXIT_FAILED,
        )
    return packages


def sorted_packages(packages: Iterable[LockedPackage]) -> list[LockedPackage]:
    """lock.json's order: by name, then role (a name may be locked once per role)."""
    return sorted(packages, key=lambda p: (p.name, p.role))


def current_lock(folder: Path, bases_dir: Path = BASES_DIR, substitute: str | None = None) -> Lock:
    """lock.json (or the declared substitute base's closure), refused (exit 1) when edited by
    hand or stale against env.toml: what fetch and environment builders start from."""
    lock = load_lock(folder, substitute)
    reasons = stale_reasons(folder, bases_dir, lock, ask_registry=False, substitute=substitute)
    if reasons:
        raise LockError(
            f"{lock_path(folder, substitute)} is stale: " + "; ".join(reasons),
            exit_code=EXIT_FAILED,
            hint=f"run `{lock_command(folder, substitute)}`",
        )
    return lock


def stale_reasons(
    folder: Path,
    bases_dir: Path = BASES_DIR,
    lock: Lock | None = None,
    ask_registry: bool = True,
    substitute: str | None = None,
) -> list[str]:
    """Why lock.json no longer describes env.toml; empty when it is current. Offline, except
    that with `ask_registry` (what `lock --check` does) a base.registry tag is asked for again
    and a tag that now points elsewhere is a reason, both digests named; ENVAUDIT_OFFLINE=1
    leaves that question out. Builds never ask: they use the locked digest. `substitute`: that
    substitute base's closure, against what env.toml declares for it."""
    spec = load_spec(folder, substitute)
    lock = lock or load_lock(folder, substitute)
    reasons = []
    if substitute is not None:
        recorded = _locked_substitute(folder, substitute)
        if lock.substitute is None or lock.substitute.model_dump(mode="json") != recorded:
            reasons.append(
                f"substitute {substitute}: env.toml's declared base or its note changed since"
                " the substitute's closure was made"
            )
    if lock.spec_sha256 != spec.canonical_sha256():
        reasons.append(
            f"env.toml changed since the lock was made (declared {spec.canonical_sha256()},"
            f" locked {lock.spec_sha256})"
        )
    reasons += _base_reasons(spec, lock, bases_dir, ask_registry and not value(OFFLINE))
    for source in lock.sources:
        try:
            current = source_file_hashes(folder, source.name, source.files)
        except LockError as exc:
            reasons.append(str(exc))
            continue
        if current != source.files:
            reasons.append(f"source {source.name}: a declared build file changed")
        if source.status == "built" and source.wheel is None:
            reasons.append(f"source {source.name} is marked built but records no wheel")
    return reasons


def resolve_pylock(
    requirements: Iterable[str],
    constraints: Iterable[str],
    python: str,
    platform: str,
    config: FetchConfig,
    no_binary: Iterable[str] = (),
) -> dict[str, Any]:
    """Run `uv pip compile` for the target python/platform; the parsed pylock.toml."""
    with tempfile.TemporaryDirectory(prefix="envaudit-lock-") as tmp:
        req = Path(tmp, "requirements.in")
        req.write_text("\n".join(requirements) + "\n")
        out = Path(tmp, "pylock.toml")
        argv = [uv_binary(), "pip", "compile", str(req), "--generate-hashes", "--quiet"]
        argv += ["--python-version", python, "--python-platform", platform]
        argv += ["--format", "pylock.toml", "-o", str(out), "--no-header"]
        constraints = list(constraints)
        if constraints:
            cons = Path(tmp, "constraints.txt")
            cons.write_text("\n".join(constraints) + "\n")
            argv += ["-c", str(cons)]
        for name in no_binary:
            argv += ["--no-binary", name]
        argv += config.uv_source_args()
        env = {**os.environ, "UV_PYTHON_DOWNLOADS": "never"}
        done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
        if done.returncode != 0:
            raise LockError(
                "uv could not resolve the requirements:\n" + done.stderr.strip()[-3000:],
                exit_code=EXIT_FAILED,
            )
        return tomllib.loads(out.read_text())


def uv_version() -> str:
    done = subprocess.run([uv_binary(), "--version"], capture_output=True, text=True, check=False)
    return done.stdout.strip() or "uv (unknown version)"


def artifact_from_pylock(entry: Mapping[str, Any]) -> tuple[Artifact, str]:
    """(artifact, index name) from a pylock.toml wheel or sdist entry; the URL is dropped."""
    location = entry.get("url") or entry.get("path") or ""
    filename = entry.get("name") or unquote(Path(urlparse(location).path).name)
    sha256 = (entry.get("hashes") or {}).get("sha256")
    if not sha256:
        raise LockError(f"uv gave no sha256 for {filename}: refusing an unhashed artifact", 1)
    size = entry.get("size")
    local = location.startswith("file:") or "path" in entry
    if size is None and local:  # uv gives no size for find-links files: read it
        size = Path(unquote(urlparse(location).path) if location.startswith("file:") else location)
        size = size.stat().st_size if size.is_file() else None
    if size is None:
        raise LockError(f"uv gave no size for {filename}", 1)
    return Artifact(filename=filename, size=int(size), sha256=sha256), (
        "find-links" if local else "default"
    )


def target_tags(python: str, platform: str) -> list[Tag]:
    """Wheel tags installable on the target, most specific first."""
    major, minor = (int(x) for x in python.split("."))
    arch, _, family = platform.partition("-")
    platforms = [f"{family}_{arch}"] if family else [arch]
    if family.startswith("manylinux_2_"):
        glibc_minor = int(family.rsplit("_", 1)[1])
        # every older glibc baseline is installable too, legacy aliases included (PEP 600)
        platforms = [f"manylinux_2_{m}_{arch}" for m in range(glibc_minor, 4, -1)]
        platforms += [f"manylinux{alias}_{arch}" for alias in ("2014", "2010", "1")]
        platforms.append(f"linux_{arch}")
    version = (major, minor)
    return [
        *cpython_tags(python_version=version, platforms=platforms),
        *compatible_tags(python_version=version, platforms=platforms),
    ]


def _best_wheel(wheels: list[Mapping[str, Any]], tags: list[Tag]) -> Mapping[str, Any] | None:
    rank = {tag: i for i, tag in enumerate(tags)}
    best: tuple[int, Mapping[str, Any]] | None = None
    for wheel in wheels:
        filename = wheel.get("name") or unquote(Path(urlparse(wheel.get("url", "")).path).name)
        scores = [rank[t] for t in parse_wheel_filename(filename)[3] if t in rank]
        if scores and (best is None or min(scores) < best[0]):
            best = (min(scores), wheel)
    return best[1] if best else None


def _packages(
    pylock: Mapping[str, Any], spec: EnvSpec, role: Role
) -> tuple[list[LockedPackage], dict[str, tuple[str, Artifact]]]:
    tags = target_tags(spec.python, spec.platform)
    only_local = {normalize_name(n) for n in spec.find_links_only}
    packages: list[LockedPackage] = []
    sdists: dict[str, tuple[str, Artifact]] = {}
    for entry in pylock.get("packages", []):
        name, version = normalize_name(entry["name"]), str(entry["version"])
        wheel = _best_wheel(entry.get("wheels") or [], tags)
        if wheel is None:
            if "sdist" not in entry:
                raise LockError(f"{name}=={version}: no wheel for {spec.platform} and no sdist", 1)
            sdists[name] = (version, artifact_from_pylock(entry["sdist"])[0])
            continue
        artifact, index = artifact_from_pylock(wheel)
        if name in only_local and index != "find-links":
            raise LockError(
                f"{name}=={version} must come from the configured find-links"
                f" (find_links_only), but uv took it from the index",
                hint="set ENVAUDIT_FIND_LINKS (or UV_FIND_LINKS) to the folder holding it",
            )
        packages.append(
            LockedPackage(name=name, version=version, index=index, role=role, artifact=artifact)
        )
    return sorted(packages, key=lambda p: p.name), sdists


def _locked_source(
    source: SourceSpec,
    spec: EnvSpec,
    config: FetchConfig,
    sdists: Mapping[str, tuple[str, Artifact]],
    earlier: _Earlier,
    folder: Path,
) -> LockedSource:
    build_requires: list[LockedPackage] = []
    if source.build_requires:
        pylock = resolve_pylock(
            source.build_requires, spec.constraints, spec.python, spec.platform, config
        )
        build_requires = _packages(pylock, spec, "build")[0]
    fields: dict[str, Any] = {
        "name": source.name,
        "kind": source.kind,
        "build_requires": build_requires,
        "build_env": dict(source.build_env),
        "jobs_env": list(source.jobs_env),
        "cuda_arch_list": list(source.cuda_arch_list),
        "files": source_file_hashes(folder, source.name, source.files),
        "historical": source.historical,
        "built_in": source.built_in,
        "note": source.note,
    }
    if source.kind == "git":
        fields.update(
            rev=source.rev, rev_unresolved=source.rev_unresolved, submodules=dict(source.submodules)
        )
    else:
        name = split_pin(source.sdist or "")[0]
        if name not in sdists:
            raise LockError(
                f"source {source.name}: uv did not return an sdist for {source.sdist}", 1
            )
        fields.update(version=sdists[name][0], sdist=sdists[name][1])
    return _carry_wheel(LockedSource(**fields), earlier)


def source_file_hashes(folder: Path, source: str, names: Iterable[str]) -> dict[str, str]:
    """sha256 of each declared build file: its content is a build input like the commit."""
    hashes = {}
    for name in names:
        path = folder / name
        if not path.is_file():
            raise LockError(
                f"{folder / 'env.toml'}: source {source} names file {name}, which is not in"
                f" {folder}",
                exit_code=EXIT_FAILED,
            )
        hashes[name] = sha256_file(path)
    return hashes


@dataclass(frozen=True)
class _Earlier:
    """What a wheel built earlier may be carried from: the previous lock, and the toolchain
    this resolution gives (a wheel compiled by another toolchain is not carried)."""

    lock: Lock | None
    toolchain: list[LockedPackage]


def _carry_wheel(source: LockedSource, earlier: _Earlier) -> LockedSource:
    """Keep a wheel built earlier when nothing that went into the build changed: the source's
    inputs and the CUDA toolchain. A git source's version is read from its built wheel, and the
    files its repository lacked were found by that build (or by a survey without one): outputs,
    carried with the wheel. Historical pins are a record, not a build input."""
    previous = earlier.lock
    if previous is None or previous.toolchain_packages() != earlier.toolchain:
        return source
    outputs = {"wheel", "status", "note", "historical", "absent_files", "built_in"}
    if source.kind == "git":
        outputs.add("version")
    for old in previous.sources:
        if old.name != source.name:
            continue
        if old.model_dump(exclude=outputs) != source.model_dump(exclude=outputs):
            continue
        if old.wheel is None:  # a tree surveyed without building (build.survey_sources)
            return source.model_copy(
                update={"absent_files": old.absent_files, "status": old.status}
            )
        if source.built_in == "image":  # its wheel is made by the image build only
            return source
        update = {"wheel": old.wheel, "status": "built", "absent_files": old.absent_files}
        if source.kind == "git":
            update["version"] = old.version
        return source.model_copy(update=update)
    return source


def _base_reasons(spec: EnvSpec, lock: Lock, bases_dir: Path, ask_registry: bool) -> list[str]:
    """Why the locked base is not env.toml's: another base; for a registry tag, offline, another
    tag or a name the digest does not belong to, and, asked, a tag that has moved."""
    if spec.base.registry is None:
        base = _locked_base(spec, bases_dir)
        if base != lock.base:
            return [f"base changed: env.toml gives {base}, lock.json has {lock.base}"]
        return []
    name, _ = tagged_reference(spec.base.registry, "base.registry")
    pinned = digested_reference(lock.base.image or "")
    if lock.base.registry != spec.base.registry or pinned is None or pinned[0] != name:
        return [
            f"base changed: env.toml names the tag {spec.base.registry}, lock.json has"
            f" {lock.base.registry or lock.base.recipe or '-'} ({lock.base.image or 'no image'})"
        ]
    if not ask_registry:
        return []
    now = tag_digest(spec.base.registry)
    if now == pinned[1]:
        return []
    return [
        f"base tag {spec.base.registry} now points to {now}; lock.json has {pinned[1]} (builds"
        f" keep using the locked digest until `envaudit lock {lock.env}` takes the new one)"
    ]


def _locked_base(spec: EnvSpec, bases_dir: Path) -> LockedBase:
    """The base as lock.json records it; a registry tag is resolved to its digest now."""
    if spec.base.image is not None:
        return LockedBase(image=spec.base.image)
    if spec.base.registry is not None:
        name, _ = tagged_reference(spec.base.registry, "base.registry")
        digest = tag_digest(spec.base.registry)
        return LockedBase(image=f"{name}@{digest}", registry=spec.base.registry)
    recipe = bases_dir / f"{spec.base.recipe}.toml"
    if not recipe.is_file():
        known = sorted(p.stem for p in bases_dir.glob("*.toml"))
        raise LockError(
            f"base recipe {spec.base.recipe!r}: {recipe} does not exist",
            exit_code=EXIT_FAILED,
            hint=f"known recipes: {', '.join(known) or 'none'}",
        )
    try:
        declared = tomllib.loads(recipe.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise LockError(f"{recipe}: not valid TOML: {exc}", exit_code=EXIT_FAILED) from exc
    provides = declared.get("python")
    if provides is not None and str(provides) != spec.python:
        raise LockError(
            f"base recipe {spec.base.recipe!r} provides Python {provides}, but env.toml asks"
            f" for {spec.python}",
            exit_code=EXIT_FAILED,
            hint="choose a base whose Python is the env's (containers/bases/*.toml)",
        )
    return LockedBase(recipe=spec.base.recipe, recipe_sha256=sha256_file(recipe))


def _previous(folder: Path, substitute: str | None = None) -> Lock | None:
    if not lock_path(folder, substitute).is_file():
        return None
    try:
        return load_lock(folder, substitute)
    except LockError:
        return None
