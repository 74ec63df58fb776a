"""Source trees for builds: a git checkout at the locked commit (submodules checked against the
declared commits) or an sdist from the store, unpacked.

A mirror that lacks some file of a pinned commit (a snapshot that left out a large media blob)
still gives that commit: the tree is checked out without exactly those files (a sparse
checkout), which the checkout names, so the lock records them beside the built wheel.

Two kinds of failure are kept apart. A wrong declaration (a submodule at another commit, a rev
the repository lacks) is the lock's fault: LockError, exit 1. An input that cannot be had from
here (remote unreachable, artifact nowhere) is the machine's: SourceUnavailable, which leaves the
source unbuilt without failing the whole lock, so `fetch` later names it as missing.
"""

from __future__ import annotations

import os
import re
import subprocess
import tarfile
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from envaudit.errors import EXIT_FAILED
from envaudit.lock.config import FetchConfig
from envaudit.lock.fetch import fetch_artifact
from envaudit.lock.files import LockError
from envaudit.lock.store import Store
from envaudit.schema.locks import Artifact

URL_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
SCP_LIKE = re.compile(r"^[^/:]+:")  # user@host:path
# owner/name at the end of a remote URL (https://host/owner/name.git, git@host:owner/name)
OWNER_NAME = re.compile(r"[:/]([A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+?)(?:\.git)?/?$")


class SourceUnavailable(Exception):
    """An input of a build cannot be obtained here; the message says exactly what failed."""


@dataclass(frozen=True)
class Checkout:
    path: Path
    absent: tuple[str, ...] = ()
    """Files of the pinned commits that the repository lacks, left out of the tree (paths from
    the top of the checkout)."""


def is_local(url: str) -> bool:
    return url.startswith("file://") or not (URL_SCHEME.match(url) or SCP_LIKE.match(url))


def git_environment(*urls: str) -> dict[str, str]:
    """No prompts (an unreachable remote must fail, not wait), English messages, and, when one
    of the repositories is local, the file transport for submodules: git blocks it by default
    since 2.38.1 (CVE-2022-39253); here every commit it brings is pinned and checked."""
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"}
    if any(is_local(url) for url in urls):
        count = int(env.get("GIT_CONFIG_COUNT", "0") or "0")
        env.update(
            {
                "GIT_CONFIG_COUNT": str(count + 1),
                f"GIT_CONFIG_KEY_{count}": "protocol.file.allow",
                f"GIT_CONFIG_VALUE_{count}": "always",
            }
        )
    return env


GIT_TIMEOUT_S = 900  # a clone of a large repository with submodules, not a silent hang


def _git(argv: list[str], env: dict[str, str], cwd: Path | None = None) -> tuple[int, str]:
    try:
        done = subprocess.run(
            ["git", *argv],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            check=False,
            timeout=GIT_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return 124, f"git {argv[0]} gave no result within {GIT_TIMEOUT_S} s"
    return done.returncode, (done.stdout if done.returncode == 0 else done.stderr).strip()


def _last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "(git printed nothing)"


def git_checkout(
    name: str,
    url: str,
    rev: str,
    submodules: dict[str, str],
    dest: Path,
    bases: Sequence[str] = (),
) -> Checkout:
    """Clone url into dest at rev with its submodules; every declared submodule is checked.
    With `bases` (ENVAUDIT_GIT_BASES), a submodule whose .gitmodules URL ends in owner/name is
    cloned from `<base>/owner/name` as the superproject is (the first base that holds it), so
    mirrors serve submodules too; the commit, checked below, identifies it either way."""
    env = git_environment(url)
    code, out = _git(["clone", "--quiet", "--no-checkout", url, str(dest)], env)
    if code != 0:
        raise SourceUnavailable(f"git clone {url} failed: {_last_line(out)}")
    _ensure_commit(name, url, rev, dest, env)
    code, out = _git(["checkout", "--quiet", "--detach", rev], env, dest)
    if code != 0:
        raise LockError(f"source {name}: git checkout {rev} failed: {_last_line(out)}", 1)
    _check_submodules(name, rev, submodules, dest, env, checked_out=False)
    redirected = _redirect_submodules(dest, bases, env)
    env = git_environment(url, *redirected)
    update = ["submodule", "update", "--init", "--recursive", "--quiet"]
    code, out = _git(update, env, dest)
    absent: list[str] = []
    if code != 0:
        absent = _check_out_without_missing_files(dest, submodules, env)
        if absent:
            code, out = _git(update, env, dest)
    if code != 0:
        raise SourceUnavailable(f"git submodule update at {rev} failed: {_last_line(out)}")
    _check_submodules(name, rev, submodules, dest, env, checked_out=True)
    return Checkout(dest, tuple(absent))


def _check_out_without_missing_files(
    dest: Path, submodules: dict[str, str], env: dict[str, str]
) -> list[str]:
    """For each declared submodule whose repository lacks blobs of its pinned commit: a sparse
    checkout of that commit without exactly those files. The files left out (empty when no
    blob was missing: then the failure has another cause)."""
    absent = []
    for path, commit in sorted(submodules.items()):
        repo = dest / path
        if not (repo / ".git").exists():
            continue
        missing = missing_blobs(repo, commit, env)
        if not missing:
            continue
        patterns = ["/*", *(f"!/{_glob_escaped(m)}" for m in missing)]
        _git(["sparse-checkout", "set", "--no-cone", *patterns], env, repo)
        code, out = _git(["checkout", "--quiet", "--detach", commit], env, repo)
        if code != 0:
            raise SourceUnavailable(f"git checkout {commit} in {path} failed: {_last_line(out)}")
        absent += [f"{path}/{m}" for m in missing]
    return absent


def missing_blobs(repo: Path, commit: str, env: dict[str, str]) -> list[str]:
    """Paths of the files of `commit` whose blobs the repository does not have."""
    code, out = _git(["ls-tree", "-r", "-z", commit], env, repo)
    if code != 0:
        return []
    entries = []
    for record in out.split("\0"):
        meta, _, path = record.partition("\t")
        parts = meta.split()
        if len(parts) == 3 and parts[1] == "blob":
            entries.append((parts[2], path))
    done = subprocess.run(
        ["git", "cat-file", "--batch-check"],
        cwd=repo,
        env=env,
        input="".join(f"{sha}\n" for sha, _ in entries),
        capture_output=True,
        text=True,
        check=False,
        timeout=GIT_TIMEOUT_S,
    )
    gone = {line.split()[0] for line in done.stdout.splitlines() if line.endswith(" missing")}
    return [path for sha, path in entries if sha in gone]


def _glob_escaped(path: str) -> str:
    return re.sub(r"([\\*?\[\]!#])", r"\\\1", path)


def _redirect_submodules(repo: Path, bases: Sequence[str], env: dict[str, str]) -> list[str]:
    """Point each top-level submodule named owner/name by its URL at the first base holding it
    (a folder base must have the repository; a host base is taken as it is). `submodule update
    --init` keeps a URL already in the repository's config. The remotes chosen."""
    if not bases:
        return []
    code, out = _git(["config", "-f", ".gitmodules", "--get-regexp", r"\.url$"], env, repo)
    chosen = []
    for line in out.splitlines() if code == 0 else []:
        key, _, url = line.strip().partition(" ")
        found = OWNER_NAME.search(url) if URL_SCHEME.match(url) or SCP_LIKE.match(url) else None
        if found is None:
            continue  # a path or relative URL: as the repository says
        for base in bases:
            remote = f"{base.rstrip('/')}/{found.group(1)}"
            if not is_local(remote) or Path(remote.removeprefix("file://")).exists():
                _git(["config", key, remote], env, repo)
                chosen.append(remote)
                break
    return chosen


def _ensure_commit(name: str, url: str, rev: str, dest: Path, env: dict[str, str]) -> None:
    """A commit no branch reaches is not cloned; ask the remote for it by hash before refusing."""
    if _git(["cat-file", "-e", f"{rev}^{{commit}}"], env, dest)[0] == 0:
        return
    _git(["fetch", "--quiet", "origin", rev], env, dest)
    if _git(["cat-file", "-e", f"{rev}^{{commit}}"], env, dest)[0] != 0:
        raise LockError(f"source {name}: commit {rev} is not in {url}", exit_code=EXIT_FAILED)


def _check_submodules(
    name: str,
    rev: str,
    declared: dict[str, str],
    repo: Path,
    env: dict[str, str],
    checked_out: bool,
) -> None:
    """Compare each declared commit with the one the superproject records (and, once checked
    out, with the submodule's HEAD, which also covers submodules nested in submodules)."""
    for path, want in sorted(declared.items()):
        have = _recorded_commit(repo, path, env)
        if checked_out and (repo / path / ".git").exists():
            have = _git(["rev-parse", "HEAD"], env, repo / path)[1]
        if have is None:
            if not checked_out:
                continue  # perhaps nested in a submodule: decided after the update
            raise LockError(
                f"source {name}: declared submodule {path!r} does not exist at {rev}",
                exit_code=EXIT_FAILED,
                hint="remove it from submodules in env.toml, or fix its path",
            )
        if have != want:
            raise LockError(
                f"source {name}: submodule {path!r} is at {have} at {rev}, but env.toml declares"
                f" {want}; refused",
                exit_code=EXIT_FAILED,
                hint=f"declare {have}, or choose the rev that records {want}",
            )


def _recorded_commit(repo: Path, path: str, env: dict[str, str]) -> str | None:
    """The gitlink the superproject records at path (None when path is no submodule there)."""
    code, out = _git(["ls-tree", "HEAD", "--", path], env, repo)
    fields = out.split() if code == 0 else []
    return fields[2] if len(fields) >= 3 and fields[1] == "commit" else None


def ensure_in_store(
    store: Store, artifact: Artifact, what: str, package: str, config: FetchConfig
) -> None:
    """Fetch a build input into the store. A wrong file (hash mismatch) is the lock's fault and
    raises; an input that cannot be had from here is SourceUnavailable."""
    if store.has(artifact):
        return
    try:
        origin = fetch_artifact(store, artifact, what, package, config)
    except LockError as exc:
        if exc.exit_code == EXIT_FAILED:
            raise
        raise SourceUnavailable(str(exc)) from exc
    if origin is None:
        raise SourceUnavailable(
            f"{what}: {artifact.filename} (sha256 {artifact.sha256}) is not in the store,"
            " find-links, mirrors or index"
        )


def sdist_tree(
    store: Store, artifact: Artifact, package: str, config: FetchConfig, dest: Path
) -> Path:
    """The unpacked sdist (fetched into the store first when absent); its project folder."""
    ensure_in_store(store, artifact, f"{package} sdist", package, config)
    _unpack(store.path_of(artifact), artifact.filename, dest)
    folders = [p for p in dest.iterdir() if p.is_dir()]
    if len(folders) != 1:
        raise LockError(f"{artifact.filename}: expected one top-level folder in the sdist", 1)
    return folders[0]


def _unpack(archive: Path, filename: str, dest: Path) -> None:
    """Unpack without letting any member land outside dest (tar's 'data' filter; zip checked)."""
    dest.mkdir(parents=True, exist_ok=True)
    if filename.endswith(".zip"):
        with zipfile.ZipFile(archive) as bundle:
            for member in bundle.namelist():
                if not (dest / member).resolve().is_relative_to(dest.resolve()):
                    raise LockError(f"{filename}: member {member!r} escapes the archive", 1)
            bundle.extractall(dest)
        return
    with tarfile.open(archive) as bundle:
        bundle.extractall(dest, filter="data")
