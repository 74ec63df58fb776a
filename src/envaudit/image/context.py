"""Stage a hermetic build context: the Dockerfile, every wheel by hash out of the store, each
layer's requirements with hashes, source trees at their locked commits, and declared env files.

A build context does not follow symlinks, so files are hard-linked out of the store where the
file system allows and copied where it does not; nothing is downloaded here or in the build.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from envaudit.errors import EXIT_USAGE, EnvauditError
from envaudit.image.dockerfile import render_dockerfile
from envaudit.image.plan import ImagePlan, SourceStage
from envaudit.lock.config import FetchConfig
from envaudit.lock.sources import SourceUnavailable, git_checkout
from envaudit.lock.store import Store
from envaudit.settings import cache_root


@dataclass(frozen=True)
class StagedFile:
    path: str
    size: int | None
    what: str


def planned_files(plan: ImagePlan) -> list[StagedFile]:
    """What `stage_context` puts into the context, without touching anything (--dry-run)."""
    files = [StagedFile("Dockerfile", None, "rendered from lock.json")]
    for layer in plan.all_layers():
        files.append(StagedFile(f"{layer.folder}/requirements.txt", None, "pins with hashes"))
        for name, version, artifact in layer.own():
            files.append(
                StagedFile(
                    f"{layer.folder}/{artifact.filename}", artifact.size, f"{name}=={version}"
                )
            )
    for source in plan.sources:
        if source.kind == "git":
            pins = [f"{source.rev}", *(f"{p} {r}" for p, r in source.submodules)]
            what = f"git checkout of {source.name} at " + ", ".join(pins)
        else:
            what = f"sdist of {source.name}"
        files.append(StagedFile(source.archive, None, what))
        for name in source.files:
            files.append(StagedFile(f"{source.files_folder}/{name}", None, "declared env file"))
    return files


def stage_context(
    plan: ImagePlan,
    store: Store,
    config: FetchConfig,
    dest: Path,
    env_dir: Path,
    git_sources: dict[str, str],
) -> list[StagedFile]:
    """Fill `dest` (an empty folder) with the build context of this plan."""
    absent = [a for _, a in plan.staged_artifacts() if not store.has(a)]
    if absent:
        names = ", ".join(a.filename for a in absent[:5]) + (" ..." if len(absent) > 5 else "")
        raise EnvauditError(
            f"{len(absent)} artifact(s) of {plan.env} are not in the store {store.root}: {names}",
            EXIT_USAGE,
            hint=f"run `envaudit fetch {plan.env}` first",
        )
    (dest / "Dockerfile").write_text(render_dockerfile(plan))
    for layer in plan.all_layers():
        folder = dest / layer.folder
        folder.mkdir(parents=True)
        (folder / "requirements.txt").write_text(layer.requirements())
        for _, _, artifact in layer.own():  # a borrowed wheel is in an earlier layer's folder
            _link_or_copy(store.path_of(artifact), folder / artifact.filename)
    for source in plan.sources:
        _stage_source(source, store, config, dest, git_sources.get(source.name), plan.env)
        for name in source.files:
            target = dest / source.files_folder / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(env_dir / name, target)
    return [
        StagedFile(p.relative_to(dest).as_posix(), p.stat().st_size, "")
        for p in sorted(dest.rglob("*"))
        if p.is_file()
    ]


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


def _stage_source(
    source: SourceStage, store: Store, config: FetchConfig, dest: Path, git: str | None, env: str
) -> None:
    archive = dest / source.archive
    archive.parent.mkdir(parents=True, exist_ok=True)
    if source.sdist is not None:
        # ADD unpacks a local tar archive; an sdist is one (a .zip sdist is refused below).
        if not source.sdist.filename.endswith(".tar.gz"):
            raise EnvauditError(
                f"source {source.name}: sdist {source.sdist.filename} is not a .tar.gz archive"
            )
        _link_or_copy(store.path_of(source.sdist), archive)
        return
    if git is None or source.rev is None:
        raise EnvauditError(f"source {source.name}: no git repository or rev in the lock")
    _link_or_copy(_tree_archive(source, source.rev, config, git, env), archive)


SOURCE_EPOCH = 315532800
"""The mtime every member of a source archive gets (SOURCE_DATE_EPOCH of the source builds)."""


def _tree_archive(source: SourceStage, rev: str, config: FetchConfig, git: str, env: str) -> Path:
    """The source's tree as a tar, made once per (commit, submodule commits, files absent) on
    this machine and kept in the cache. The engine's cache key for ADD is the archive's bytes: a
    tar made afresh (new mtimes, a new git index) would compile the source stage again on every
    build. Members are sorted, owned by root, dated SOURCE_EPOCH."""
    identity = json.dumps([rev, list(source.submodules), list(source.absent_files)])
    kept = cache_root() / "source-trees" / f"{hashlib.sha256(identity.encode()).hexdigest()}.tar"
    if kept.is_file():
        return kept
    remotes = config.git_remotes(git)
    if not remotes:
        raise EnvauditError(
            f"source {source.name}: cannot reach {git} at {source.rev}: no git base is"
            " configured (ENVAUDIT_GIT_BASES is empty)",
            hint="set ENVAUDIT_GIT_BASES to a git host or a folder of owner/name mirrors"
            + source.wheel_instead(env),
        )
    kept.parent.mkdir(parents=True, exist_ok=True)
    errors = []
    with tempfile.TemporaryDirectory(prefix="envaudit-source-") as tmp:
        for remote in remotes:
            tree = Path(tmp) / "tree"
            shutil.rmtree(tree, ignore_errors=True)
            try:
                checkout = git_checkout(
                    source.name, remote, rev, dict(source.submodules), tree, config.git_bases
                )
            except SourceUnavailable as exc:
                errors.append(str(exc))
                continue
            _check_absent(source, remote, tuple(sorted(checkout.absent)), env)
            partial = kept.with_name(f"{kept.name}.{os.getpid()}.partial")
            with tarfile.open(partial, "w") as tar:
                tar.add(tree, arcname=".", filter=_normalized)
            os.replace(partial, kept)
            return kept
    raise EnvauditError(
        f"source {source.name}: cannot reach {git} at {source.rev}: " + "; ".join(errors),
        hint="check ENVAUDIT_GIT_BASES (a git host or a folder of owner/name mirrors)",
    )


def _normalized(member: tarfile.TarInfo) -> tarfile.TarInfo:
    member.mtime = SOURCE_EPOCH
    member.uid = member.gid = 0
    member.uname = member.gname = ""
    return member


def _check_absent(source: SourceStage, remote: str, absent: tuple[str, ...], env: str) -> None:
    """The tree must lack exactly the files the lock records as lacking (a mirror missing a
    blob, surveyed when the lock was made): another tree would build another wheel."""
    if absent == source.absent_files:
        return
    lacks = ", ".join(absent[:3]) + (" ..." if len(absent) > 3 else "") if absent else "nothing"
    recorded = ", ".join(source.absent_files[:3]) if source.absent_files else "nothing"
    raise EnvauditError(
        f"source {source.name}: {remote} lacks {lacks} of {source.rev}, where the lock"
        f" records {recorded} ({len(absent)} vs {len(source.absent_files)} file(s)); an image"
        " builds only from the tree its lock describes",
        hint=f"`envaudit lock {env} --no-build` with ENVAUDIT_GIT_BASES set records what this"
        " repository lacks" + source.wheel_instead(env),
    )
