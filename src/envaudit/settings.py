"""Every ENVAUDIT_* environment variable, declared once: name, type, default, meaning, and what
kind of variable it is (SETTINGS; docs/settings.md is generated from it).

Kinds: `user` settings configure envaudit on a machine; `experiment` knobs change how an audit
is carried out, for benchmarks and tests (no user needs them); `internal` variables are set by
envaudit for its own processes; `test` variables are read by the test suite and scripts/, never
by envaudit.

Values are read when asked for (`read`, `value`), never at import, so a test or a caller may set
a variable at any time before its use. A bad value is a usage error (exit 2) naming the variable.
An empty value counts as unset.

The harness (envaudit/harness/) imports only its declared files (schema/harness.py), and this
module is not one of them: the variables it reads (`harness=True` below) are declared here and
read there under the same name, which tests/test_settings.py checks.

`python -m envaudit.settings docs/settings.md` writes the variables' documentation (`make
settings`); `--check` exits 1 when the file differs from what it would write.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Literal, TypeVar

from envaudit.errors import EXIT_USAGE, EnvauditError, shown

T = TypeVar("T")
Kind = Literal["user", "experiment", "internal", "test"]
PREFIX = "ENVAUDIT_"
DOCS_PATH = "docs/settings.md"


@dataclass(frozen=True)
class Setting(Generic[T]):
    """One environment variable. `parse` turns a non-empty value into T or raises ValueError;
    `expected` says in words what a good value is (the error message reads "NAME='x' is not
    <expected>"). `fallback`, when given, is the value used while the variable is unset (parsed
    as if it were set); without one, the caller decides, as `default` says."""

    name: str
    kind: Kind
    expected: str
    default: str
    meaning: str
    parse: Callable[[str], T]
    fallback: str | None = None
    harness: bool = False


def _text(raw: str) -> str:
    return raw


def _path(raw: str) -> Path:
    return Path(os.path.expanduser(raw))


def _entries(raw: str) -> tuple[str, ...]:
    """Entries separated by spaces or commas (as pip and uv read theirs): not by ':', which
    http mirrors contain."""
    return tuple(part for part in re.split(r"[\s,]+", raw) if part)


def _switch(raw: str) -> bool:
    if raw.strip() not in ("0", "1"):
        raise ValueError(raw)
    return raw.strip() == "1"


def _whole(low: int, high: int | None = None) -> Callable[[str], int]:
    def parse(raw: str) -> int:
        text = raw.strip()
        if not text.isascii() or not text.isdigit():
            raise ValueError(raw)
        number = int(text)
        if number < low or (high is not None and number > high):
            raise ValueError(raw)
        return number

    return parse


def _seconds(raw: str) -> float:
    number = float(raw.strip())  # ValueError for what is not a number
    if not 0 <= number < float("inf"):
        raise ValueError(raw)
    return number


def _choice(*options: str) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        if raw.strip() not in options:
            raise ValueError(raw)
        return raw.strip()

    return parse


def _size(raw: str) -> str:
    if re.fullmatch(r"[0-9]+[kKmMgG%]?", raw.strip()) is None:
        raise ValueError(raw)
    return raw.strip()


MAX_STAGE_AHEAD = 4
PRELOAD_MODES = ("beside", "on-demand")
GPU_ACCESS_MODES = ("nvidia-runtime", "cdi", "device-nodes")
SWITCH = "0 or 1"
PATH = "a path"
URL = "a URL"
ENTRIES = "entries separated by spaces or commas"

# User settings: how envaudit is configured on this machine.
CACHE = Setting(
    "ENVAUDIT_CACHE",
    "user",
    PATH,
    "",
    "What envaudit makes on this machine: environments, staged harness copies, job folders,"
    " build contexts and logs, GPU locks, JIT and bytecode caches.",
    _path,
    fallback="~/.cache/envaudit",
)
STORE = Setting(
    "ENVAUDIT_STORE",
    "user",
    PATH,
    "",
    "The content-addressed store of artifacts, by sha256 (`--store` overrides it).",
    _path,
    fallback="~/.cache/envaudit/store",
)
FIND_LINKS = Setting(
    "ENVAUDIT_FIND_LINKS",
    "user",
    ENTRIES,
    "`UV_FIND_LINKS`, then `PIP_FIND_LINKS`; else none",
    "Folders of artifacts (wheels, sdists) to take packages from (`--find-links` adds to them).",
    _entries,
)
MIRRORS = Setting(
    "ENVAUDIT_MIRRORS",
    "user",
    ENTRIES,
    "none",
    "Folders or http(s) bases holding artifacts as `<base>/<filename>` or `<base>/sha256/<hash>`.",
    _entries,
)
GIT_BASES = Setting(
    "ENVAUDIT_GIT_BASES",
    "user",
    ENTRIES,
    "none: a source given as `owner/name` cannot be cloned",
    "Git hosts or folders of mirrors: a source's `owner/name` is cloned from"
    " `<base>/owner/name`, trying each base in order.",
    _entries,
)
INDEX_URL = Setting(
    "ENVAUDIT_INDEX_URL",
    "user",
    URL,
    "`UV_DEFAULT_INDEX`, `UV_INDEX_URL`, then `PIP_INDEX_URL`; else https://pypi.org/simple",
    "A PEP 691 simple index to resolve and fetch from.",
    _text,
)
OFFLINE = Setting(
    "ENVAUDIT_OFFLINE",
    "user",
    SWITCH,
    "",
    "1: use only the store, never download (what `--offline` does).",
    _switch,
    fallback="0",
)
BUILD_JOBS = Setting(
    "ENVAUDIT_BUILD_JOBS",
    "user",
    "a positive whole number",
    "the CPUs this process may use",
    "Parallel jobs of a source build: a lock's `jobs_env` variables are set to it.",
    _whole(1),
)
ENGINE_HOST = Setting(
    "ENVAUDIT_ENGINE_HOST",
    "user",
    URL,
    "`DOCKER_HOST` (podman: `CONTAINER_HOST`, then podman's usual sockets)",
    "Where the container engine listens, e.g. `unix:///run/docker.sock`.",
    _text,
)
GPU_ACCESS = Setting(
    "ENVAUDIT_GPU_ACCESS",
    "user",
    "one of " + ", ".join(GPU_ACCESS_MODES),
    "nvidia-runtime when the engine has NVIDIA's runtime, else cdi when a CDI spec declares"
    " nvidia.com/gpu devices, else device-nodes",
    "How a worker's container gets its GPU: by UUID through NVIDIA's runtime, as the CDI"
    " device nvidia.com/gpu=<UUID>, or as device nodes with the driver's libraries mounted"
    " (`ENVAUDIT_NVIDIA_DRIVER_DIR`). `envaudit doctor` says which and why.",
    _choice(*GPU_ACCESS_MODES),
)
NVIDIA_DRIVER_DIR = Setting(
    "ENVAUDIT_NVIDIA_DRIVER_DIR",
    "user",
    PATH,
    "",
    "The NVIDIA driver's folder (holding `lib64/` or `lib/`), mounted read-only into containers"
    " that get their GPU as device nodes.",
    _path,
    fallback="/usr/local/nvidia",
)
CONTAINER_MEMORY_BYTES = Setting(
    "ENVAUDIT_CONTAINER_MEMORY_BYTES",
    "user",
    "a positive whole number",
    "90% of this machine's memory",
    "Memory limit of a worker's container, in bytes.",
    _whole(1),
)
CONTAINER_TMPFS = Setting(
    "ENVAUDIT_CONTAINER_TMPFS",
    "user",
    "a tmpfs size (a whole number of bytes, or with k, m, g or %)",
    "",
    "Size of the tmpfs on `/tmp` of a worker's container (its only writable scratch).",
    _size,
    fallback="8g",
)
DEBIAN_MIRROR = Setting(
    "ENVAUDIT_DEBIAN_MIRROR",
    "user",
    URL,
    "debootstrap's own (Debian's archive)",
    "The Debian archive `envaudit base build` bootstraps Debian bases from.",
    _text,
)
UBUNTU_MIRROR = Setting(
    "ENVAUDIT_UBUNTU_MIRROR",
    "user",
    URL,
    "none: Ubuntu bases cannot be built",
    "The Ubuntu archive `envaudit base build` bootstraps Ubuntu bases from.",
    _text,
)
SERVER_IDLE_S = Setting(
    "ENVAUDIT_SERVER_IDLE_S",
    "user",
    "a number of seconds (0 or more)",
    "",
    "Seconds a fork server of the host and local runtimes lingers after its audit's last job;"
    " the next audit with the same interpreter, environment and folder forks its workers from"
    " it instead of importing torch again (an edit-audit loop). 0 ends it with its audit.",
    _seconds,
    fallback="0",
)

# Experiment knobs: for benchmarks and tests; no user needs them.
STAGE_NEXT = Setting(
    "ENVAUDIT_STAGE_NEXT",
    "experiment",
    f"a number of jobs from 0 to {MAX_STAGE_AHEAD}",
    "the runtime's `stage_ahead` (containers 2, others 1; at least 2 when a solution imports"
    " a library before its own code)",
    "How many jobs ahead an audit starts workers on a GPU; 0 starts each job's worker only"
    " after the previous job has sent its last line.",
    _whole(0, MAX_STAGE_AHEAD),
)
FORKSERVER = Setting(
    "ENVAUDIT_FORKSERVER",
    "experiment",
    SWITCH,
    "",
    "0 starts every worker of the host and local runtimes as a fresh interpreter instead of"
    " forking it from a server.",
    _switch,
    fallback="1",
)
PRELOAD = Setting(
    "ENVAUDIT_PRELOAD",
    "experiment",
    "one of " + ", ".join(PRELOAD_MODES),
    "beside where at least 4 CPUs are usable, else on-demand",
    "When the fork server preloads the compiler: beside the first job, or when a job that"
    " wants it arrives (which then waits for it).",
    _choice(*PRELOAD_MODES),
    harness=True,
)
TIMELINE = Setting(
    "ENVAUDIT_TIMELINE",
    "experiment",
    PATH,
    "none",
    "A file the supervisor appends one JSON line per mark of an audit to, for"
    " `benchmarks/audit_profile.py`.",
    _path,
)

# Internal: set by envaudit for its own processes.
BYTECODE_CACHE = Setting(
    "ENVAUDIT_BYTECODE_CACHE",
    "internal",
    PATH,
    "set by the supervisor",
    "The folder a fork server or fresh worker keeps its imports' bytecode in; the worker stops"
    " writing bytecode before it loads the solution.",
    _path,
    harness=True,
)

# Read by the test suite and scripts/, never by envaudit.
REQUIRE_ENGINE = Setting(
    "ENVAUDIT_REQUIRE_ENGINE",
    "test",
    SWITCH,
    "",
    "1 (CI): the container tests fail instead of skipping where no engine answers.",
    _switch,
    fallback="0",
)
REQUIRE_SLURM = Setting(
    "ENVAUDIT_REQUIRE_SLURM",
    "test",
    SWITCH,
    "",
    "1 (CI): the Slurm tests run even where no Slurm answers, instead of skipping.",
    _switch,
    fallback="0",
)
REQUIRE_CHROMIUM = Setting(
    "ENVAUDIT_REQUIRE_CHROMIUM",
    "test",
    SWITCH,
    "",
    "1 (CI): the report.html tests fail instead of skipping where no chromium is installed.",
    _switch,
    fallback="0",
)
REQUIRE_PODMAN = Setting(
    "ENVAUDIT_REQUIRE_PODMAN",
    "test",
    SWITCH,
    "",
    "1 (CI): the podman runtime's tests fail instead of skipping where podman is not installed.",
    _switch,
    fallback="0",
)
REQUIRE_CUDA_BUILD = Setting(
    "ENVAUDIT_REQUIRE_CUDA_BUILD",
    "test",
    SWITCH,
    "",
    "1 (CI): the test that compiles a cuda solution for sm_90a without a GPU (the local"
    " environment of torch-2.11-cu130-nvcc) fails instead of skipping where Python 3.12 is"
    " not found.",
    _switch,
    fallback="0",
)
UPDATE_GOLDEN = Setting(
    "ENVAUDIT_UPDATE_GOLDEN",
    "test",
    SWITCH,
    "",
    "1: `tests/image/test_dockerfile.py` rewrites its golden Dockerfiles.",
    _switch,
    fallback="0",
)
GPU_FAULTS = Setting(
    "ENVAUDIT_GPU_FAULTS",
    "test",
    ENTRIES,
    "all",
    "The fault solutions `tests/harness/test_gpu_faults.py` runs.",
    _entries,
)
TEST_OUT = Setting(
    "ENVAUDIT_TEST_OUT",
    "test",
    PATH,
    "none",
    "A folder `tests/harness/test_gpu_faults.py` keeps its result lines in.",
    _path,
)
SRC = Setting(
    "ENVAUDIT_SRC",
    "test",
    PATH,
    "none",
    "A mounted copy of `src/` that `scripts/gpu/container_smoke.py` imports envaudit from (it"
    " reads the variable itself: envaudit is not importable before).",
    _path,
)

SETTINGS: tuple[Setting[Any], ...] = (
    CACHE,
    STORE,
    FIND_LINKS,
    MIRRORS,
    GIT_BASES,
    INDEX_URL,
    OFFLINE,
    BUILD_JOBS,
    ENGINE_HOST,
    GPU_ACCESS,
    NVIDIA_DRIVER_DIR,
    CONTAINER_MEMORY_BYTES,
    CONTAINER_TMPFS,
    DEBIAN_MIRROR,
    UBUNTU_MIRROR,
    SERVER_IDLE_S,
    STAGE_NEXT,
    FORKSERVER,
    PRELOAD,
    TIMELINE,
    BYTECODE_CACHE,
    REQUIRE_ENGINE,
    REQUIRE_SLURM,
    REQUIRE_CHROMIUM,
    REQUIRE_PODMAN,
    REQUIRE_CUDA_BUILD,
    UPDATE_GOLDEN,
    GPU_FAULTS,
    TEST_OUT,
    SRC,
)
BY_NAME = {s.name: s for s in SETTINGS}


def _parsed(setting: Setting[T], raw: str) -> T:
    try:
        return setting.parse(raw)
    except ValueError:
        default = setting.fallback if setting.fallback is not None else setting.default
        raise EnvauditError(
            f"{setting.name}={shown(raw)} is not {setting.expected}",
            EXIT_USAGE,
            hint=f"set {setting.name} to {setting.expected}, or unset it (default: {default});"
            f" every variable: {DOCS_PATH}",
        ) from None


def read(setting: Setting[T]) -> T | None:
    """The variable's value now, parsed; its fallback while unset or empty, else None (the
    caller's default). EnvauditError (exit 2) naming the variable for a bad value."""
    raw = os.environ.get(setting.name, "")
    if raw.strip():
        return _parsed(setting, raw)
    return None if setting.fallback is None else setting.parse(setting.fallback)


def value(setting: Setting[T]) -> T:
    """`read` for a setting with a fallback, which is never None."""
    if setting.fallback is None:
        raise TypeError(f"{setting.name} has no fallback: read() it")
    found = read(setting)
    assert found is not None
    return found


def cache_root() -> Path:
    return value(CACHE)


def set_variables(environ: dict[str, str] | None = None) -> list[tuple[str, str]]:
    """The ENVAUDIT_* variables set (non-empty) in `environ` (default: this process's), sorted."""
    env = os.environ if environ is None else environ
    return sorted((k, v) for k, v in env.items() if k.startswith(PREFIX) and v.strip())


KIND_TITLES: dict[Kind, str] = {
    "user": "User settings",
    "experiment": "Experiment knobs (no user needs them)",
    "internal": "Internal (set by envaudit for its own processes)",
    "test": "Test suite and scripts (never read by envaudit)",
}


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render_docs() -> str:
    """docs/settings.md: every variable, by kind, in declared order."""
    lines = [
        "# Environment variables",
        "",
        "<!-- Generated from src/envaudit/settings.py by `make settings`; do not edit. -->",
        "",
        "envaudit reads these variables when it uses them (never at import). An empty value"
        " counts as unset; a bad value is a usage error (exit 2) naming the variable."
        " `envaudit doctor` lists the ones set in its environment and flags unknown"
        " `ENVAUDIT_*` names (a typo).",
    ]
    for kind, title in KIND_TITLES.items():
        lines += ["", f"## {title}", "", "| Variable | Value | Default | Meaning |"]
        lines.append("|---|---|---|---|")
        for setting in SETTINGS:
            if setting.kind != kind:
                continue
            default = f"`{setting.fallback}`" if setting.fallback is not None else ""
            default = "; ".join(part for part in (default, setting.default) if part)
            meaning = setting.meaning
            if setting.harness:
                meaning += " Read by the harness, in the solution's environment."
            cells = (f"`{setting.name}`", setting.expected, default, meaning)
            lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    check = "--check" in argv[1:]
    paths = [a for a in argv[1:] if a != "--check"]
    out = Path(paths[0] if paths else DOCS_PATH)
    text = render_docs()
    if check:
        if not out.is_file() or out.read_text() != text:
            print(f"{out} is out of date: run `make settings`", file=sys.stderr)
            return 1
        return 0
    out.write_text(text)
    print(f"wrote {len(SETTINGS)} variables to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
