"""Pinned versions and commits vs what the configured index and the git remotes have now.

Locks pin on purpose; this report says how far each pin has drifted from upstream so that
bumping is a decision, not a surprise. A source we cannot reach is reported, never an error:
machines without network access still get a complete list of what is pinned. The written file
names neither the index URL nor any git remote (committed files must not name hosts).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

from envaudit.lock.config import DEFAULT_INDEX, FetchConfig
from envaudit.lock.files import LockError, load_lock, load_spec
from envaudit.schema.locks import EnvSpec, HistoricalPin, normalize_name, split_pin
from envaudit.schema.writes import replace_text

INDEX_TIMEOUT_S = 10.0
GIT_TIMEOUT_S = 15.0
WORKERS = 8
SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"
MAX_REPORT_BYTES = 64 << 20

CURRENT, BEHIND, AHEAD = "current", "behind", "ahead"
UNREACHABLE, NOT_FOUND = "unreachable", "not found"
OFFLINE, NOT_CHECKED = "not checked (offline)", "not checked"

Progress = Callable[[int, int], None]  # (answers so far, answers awaited)


@dataclass(frozen=True)
class Pin:
    """One pinned thing of one environment. `target` is what is asked (a normalised registry
    name or a git remote); it is used for the question and never written to the report."""

    env: str
    kind: str  # "registry" | "cuda" | "git" | "historical" (recorded, never asked)
    name: str
    pinned: str
    target: str | None
    note: str | None = None


@dataclass(frozen=True)
class IndexAnswer:
    """What the index said about one name: newest final and newest overall, or why not."""

    latest: str | None = None
    latest_prerelease: str | None = None
    versions: frozenset[str] = frozenset()
    yanked: frozenset[str] = frozenset()
    status: str | None = None  # UNREACHABLE or NOT_FOUND when the question failed
    error: str | None = None


@dataclass(frozen=True)
class GitAnswer:
    head: str | None = None
    status: str | None = None
    error: str | None = None


@dataclass
class _Answers:
    index: dict[str, IndexAnswer] = field(default_factory=dict)
    git: dict[str, GitAnswer] = field(default_factory=dict)


# --- collecting pins ------------------------------------------------------------------------


def collect_pins(locks_dir: Path) -> list[Pin]:
    """Every pin of every lock dir (a folder holding env.toml), sorted for a stable report."""
    folders = sorted(p.parent for p in locks_dir.glob("*/env.toml"))
    if not folders:
        raise LockError(
            f"no env.toml under {locks_dir}", hint="pass --locks-dir pointing at locks/"
        )
    pins = [pin for folder in folders for pin in _env_pins(folder)]
    return sorted(pins, key=lambda p: (p.env, p.kind, p.name, p.pinned))


def _env_pins(folder: Path) -> list[Pin]:
    spec = load_spec(folder)
    env = folder.name
    from_find_links = {normalize_name(n) for n in spec.find_links_only}
    pins = [_registry_pin(env, "registry", r, from_find_links) for r in spec.requirements]
    if spec.cuda is not None:
        pins += [_registry_pin(env, "cuda", c, set()) for c in spec.cuda.components]
    pins += _source_pins(env, spec)
    pins += _lock_only_sdists(folder, spec)
    return pins


def _registry_pin(env: str, kind: str, requirement: str, find_links: set[str]) -> Pin:
    name, version = split_pin(requirement)
    note = "taken from the configured find-links" if name in find_links else None
    return Pin(env, kind, name, version, name, note)


def _source_pins(env: str, spec: EnvSpec) -> list[Pin]:
    pins: list[Pin] = []
    for source in spec.sources:
        if source.sdist is not None:
            name, version = split_pin(source.sdist)
            pins.append(Pin(env, "registry", name, version, name, f"sdist of source {source.name}"))
            continue
        assert source.git is not None and source.rev is not None  # EnvSpec validated this
        pins.append(Pin(env, "git", source.name, source.rev, source.git))
        for path, rev in sorted(source.submodules.items()):
            note = "submodule: its remote is named only inside the repository"
            pins.append(Pin(env, "git", f"{source.name}/{path}", rev, None, note))
        pins += _historical_pins(env, source.name, source.rev, source.historical)
    return pins


def _historical_pins(env: str, name: str, rev: str, historical: HistoricalPin | None) -> list[Pin]:
    """A source's original pins, which cannot be reached (that is why they are historical):
    listed so the report says what the built rev stands in for, never asked of a remote."""
    if historical is None:
        return []
    note = f"historical pin, not built: {rev[:12]} stands in for it ({historical.note})"
    pins = [Pin(env, "historical", name, historical.rev, None, note)]
    for path, commit in sorted(historical.submodules.items()):
        pins.append(Pin(env, "historical", f"{name}/{path}", commit, None, note))
    return pins


def _lock_only_sdists(folder: Path, spec: EnvSpec) -> list[Pin]:
    """Sdist-only dependencies that `lock` found (not declared in env.toml). A missing or
    stale lock.json is `lock --check`'s business, so it adds nothing here."""
    if not (folder / "lock.json").is_file():
        return []
    try:
        lock = load_lock(folder)
    except LockError:
        return []
    declared = {s.name for s in spec.sources}
    return [
        Pin(
            folder.name,
            "registry",
            normalize_name(s.name),
            s.version,
            normalize_name(s.name),
            "sdist-only dependency (lock.json)",
        )
        for s in lock.sources
        if s.kind == "sdist" and s.version and s.name not in declared
    ]


# --- asking the index -----------------------------------------------------------------------


def query_index(name: str, index_url: str, timeout: float = INDEX_TIMEOUT_S) -> IndexAnswer:
    """One PEP 691 JSON request; every failure becomes an answer, never an exception."""
    request = urllib.request.Request(
        f"{index_url.rstrip('/')}/{name}/", headers={"Accept": SIMPLE_JSON}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            payload = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        status = NOT_FOUND if exc.code == 404 else UNREACHABLE
        return IndexAnswer(status=status, error=f"HTTP {exc.code}")
    except (OSError, ValueError) as exc:  # URLError, timeouts, non-JSON (an HTML-only index)
        return IndexAnswer(status=UNREACHABLE, error=_scrub(str(exc), index_url))
    if not isinstance(payload, dict):
        return IndexAnswer(status=UNREACHABLE, error="the index did not answer PEP 691 JSON")
    return summarize_index(payload)


def summarize_index(payload: dict[str, Any]) -> IndexAnswer:
    """Newest final release and newest overall, leaving out versions whose files are all
    yanked (installers skip those too)."""
    by_version = _file_versions(payload.get("files") or [])
    listed = payload.get("versions")
    names = [str(v) for v in listed] if isinstance(listed, list) else list(by_version)
    yanked = {v for v, flags in by_version.items() if flags and all(flags)}
    parsed = [(_version(v), v) for v in names if v not in yanked]
    known = sorted((pv, v) for pv, v in parsed if pv is not None)
    finals = [v for pv, v in known if not pv.is_prerelease]
    return IndexAnswer(
        latest=finals[-1] if finals else None,
        latest_prerelease=known[-1][1] if known else None,
        versions=frozenset(names),
        yanked=frozenset(yanked),
    )


def _file_versions(files: Iterable[Any]) -> dict[str, list[bool]]:
    """version -> yanked flag of each of its files (PEP 691 `yanked` is false or a reason)."""
    found: dict[str, list[bool]] = {}
    for entry in files:
        if not isinstance(entry, dict):
            continue
        version = _filename_version(str(entry.get("filename", "")))
        if version is not None:
            found.setdefault(version, []).append(bool(entry.get("yanked")))
    return found


def _filename_version(filename: str) -> str | None:
    try:
        if filename.endswith(".whl"):
            return str(parse_wheel_filename(filename)[1])
        return str(parse_sdist_filename(filename)[1])
    except (InvalidWheelFilename, InvalidSdistFilename, InvalidVersion):
        return None


def _version(text: str) -> Version | None:
    try:
        return Version(text)
    except InvalidVersion:
        return None


# --- asking git remotes ---------------------------------------------------------------------


def remote_head(url: str, timeout: float = GIT_TIMEOUT_S) -> GitAnswer:
    """`git ls-remote URL HEAD`, without ever prompting for credentials."""
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0"}
    command = ["git", "ls-remote", url, "HEAD"]
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, env=env, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return GitAnswer(status=UNREACHABLE, error=_scrub(_last_line(str(exc)), url))
    if done.returncode != 0:
        return GitAnswer(status=UNREACHABLE, error=_scrub(_last_line(done.stderr), url))
    for line in done.stdout.splitlines():
        commit, _, ref = line.partition("\t")
        if ref.strip() == "HEAD":
            return GitAnswer(head=commit.strip())
    return GitAnswer(status=NOT_FOUND, error="the remote has no HEAD")


def _last_line(text: str) -> str:
    """The line that says what went wrong: git ends with advice, so prefer its last fatal."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    fatal = [line for line in lines if line.startswith(("fatal:", "error:"))]
    return (fatal or lines or ["no output"])[-1]


HOST = re.compile(r"\b(?:[a-z0-9-]+\.)+[a-z]{2,}\b(?::\d+)?", re.IGNORECASE)
URL = re.compile(r"\b[a-z][a-z0-9+.-]*://\S+", re.IGNORECASE)
ADDRESS = re.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b")


def _scrub(text: str, secret: str) -> str:
    """Error text without the URL that was asked, any URL, host name or address."""
    text = text.replace(secret, "<remote>")
    text = URL.sub("<url>", text)
    return ADDRESS.sub("<address>", HOST.sub("<host>", text))


# --- the report -----------------------------------------------------------------------------


def check_upstreams(
    locks_dir: Path, config: FetchConfig, offline: bool, progress: Progress | None = None
) -> dict[str, Any]:
    """The report: one record per pin per environment, and counts by status."""
    pins = [_with_remote(pin, config) for pin in collect_pins(locks_dir)]
    answers = _Answers() if offline else _ask(pins, config.index_url, progress)
    records = [_record(pin, answers, offline) for pin in pins]
    return {
        "checked_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "index": "default" if config.index_url.rstrip("/") == DEFAULT_INDEX else "configured",
        "offline": offline,
        "pins": records,
        "summary": dict(sorted(Counter(r["status"] for r in records).items())),
    }


def _with_remote(pin: Pin, config: FetchConfig) -> Pin:
    """A git pin's target becomes the first configured remote of its repository name."""
    if pin.kind != "git" or pin.target is None:
        return pin
    remotes = config.git_remotes(pin.target)
    if not remotes:
        note = "no git base configured (ENVAUDIT_GIT_BASES)"
        return Pin(pin.env, pin.kind, pin.name, pin.pinned, None, note)
    return Pin(pin.env, pin.kind, pin.name, pin.pinned, remotes[0], pin.note)


def _ask(pins: list[Pin], index_url: str, progress: Progress | None) -> _Answers:
    """Each registry name and each remote once, however many environments share it."""
    names = sorted({p.target for p in pins if p.kind != "git" and p.target})
    remotes = sorted({p.target for p in pins if p.kind == "git" and p.target})
    answers = _Answers()
    total = len(names) + len(remotes)
    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        index_jobs = {n: pool.submit(query_index, n, index_url) for n in names}
        git_jobs = {r: pool.submit(remote_head, r) for r in remotes}
        for name, job in index_jobs.items():
            answers.index[name] = job.result()
            _tell(progress, len(answers.index), total)
        for remote, git_job in git_jobs.items():
            answers.git[remote] = git_job.result()
            _tell(progress, len(answers.index) + len(answers.git), total)
    return answers


def _tell(progress: Progress | None, done: int, total: int) -> None:
    if progress is not None:
        progress(done, total)


def _record(pin: Pin, answers: _Answers, offline: bool) -> dict[str, Any]:
    record: dict[str, Any] = {
        "env": pin.env,
        "kind": pin.kind,
        "name": pin.name,
        "pinned": pin.pinned,
        "latest": None,
        "latest_prerelease": None,
        "status": NOT_CHECKED,
        "detail": pin.note,
    }
    if offline:
        record["status"] = OFFLINE
    elif pin.target is None:
        pass
    elif pin.kind == "git":
        record.update(_git_fields(pin, answers.git[pin.target]))
    else:
        record.update(_registry_fields(pin, answers.index[pin.target]))
    return record


def _git_fields(pin: Pin, answer: GitAnswer) -> dict[str, Any]:
    if answer.head is None:
        return {"status": answer.status, "detail": _join(pin.note, answer.error)}
    if answer.head == pin.pinned:
        return {"latest": answer.head, "status": CURRENT}
    note = _join(pin.note, "pinned rev is not the remote HEAD")
    return {"latest": answer.head, "status": BEHIND, "detail": note}


def _registry_fields(pin: Pin, answer: IndexAnswer) -> dict[str, Any]:
    if answer.status is not None:
        return {"status": answer.status, "detail": _join(pin.note, answer.error)}
    fields: dict[str, Any] = {
        "latest": answer.latest,
        "latest_prerelease": answer.latest_prerelease,
        "status": _compare(pin.pinned, answer),
    }
    notes = [pin.note]
    if pin.pinned in answer.yanked:
        notes.append("pinned version is yanked")
    elif pin.pinned not in answer.versions and "+" not in pin.pinned:
        notes.append("pinned version is not on the index")
    fields["detail"] = _join(*notes)
    return fields


def _compare(pinned: str, answer: IndexAnswer) -> str:
    """Against the newest final release, or the newest pre-release when the pin is one.
    A local label (+cpu) is left out: the index never carries local versions."""
    mine = _version(pinned)
    if mine is None:
        return NOT_CHECKED
    mine = Version(mine.public)
    newest = answer.latest_prerelease if mine.is_prerelease else answer.latest
    newest = newest or answer.latest_prerelease
    if newest is None:
        return NOT_FOUND
    theirs = Version(newest)
    return CURRENT if mine == theirs else BEHIND if mine < theirs else AHEAD


def _join(*parts: str | None) -> str | None:
    kept = [p for p in parts if p]
    return "; ".join(kept) if kept else None


def write_upstreams(report: dict[str, Any], path: Path) -> Path:
    """Atomically replace the report file (temp file in the same folder, then rename). An
    offline report, which asked nothing, never replaces one that holds answers (the committed
    docs/report/upstreams.json): that is refused, exit 2, and the file is left as it was."""
    if report.get("offline") and _holds_checked_results(path):
        raise LockError(
            f"{path} holds checked results (offline: false); --offline asked nothing and is"
            " refused rather than overwrite them (the file is left as it was)",
            hint=f"give --offline another file (--out {path.with_suffix('.offline.json').name}),"
            " or run without --offline where the index and remotes can be reached",
        )
    text = json.dumps(report, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    return replace_text(path, text)


def _holds_checked_results(path: Path) -> bool:
    """Whether `path` is an upstreams report made online (its `offline` is false). Only a
    regular file is read (a FIFO would block), and only its first MAX_REPORT_BYTES."""
    if not path.is_file():
        return False
    try:
        with path.open("rb") as handle:
            found = json.loads(handle.read(MAX_REPORT_BYTES))
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(found, dict) and found.get("offline") is False


def render(report: dict[str, Any]) -> str:
    """A short table; a pin shared by several environments is one row listing them."""
    rows: dict[tuple[str, ...], list[str]] = {}
    for pin in report["pins"]:
        key = (pin["name"], pin["pinned"], pin["latest"] or "-", pin["status"])
        rows.setdefault(key, []).append(pin["env"])
    table = [("name", "env(s)", "pinned", "latest", "status")]
    for (name, pinned, latest, status), envs in sorted(rows.items()):
        table.append((name, ",".join(envs), _short(pinned), _short(latest), status))
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in table
    ]
    counts = ", ".join(f"{n} {status}" for status, n in report["summary"].items())
    return "\n".join([*lines, f"{len(report['pins'])} pins: {counts}"])


def _short(value: str) -> str:
    """Commits are shown as 12 hex digits, as git does."""
    return value[:12] if re.fullmatch(r"[0-9a-f]{40}", value) else value
