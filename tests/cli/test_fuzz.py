"""Every command with generated bad arguments: no traceback, never exit 0, exit 1 or 2.

Each command has a base of good arguments (a toy TraceSet root, a correct solution, the shipped
locks) and slots; every slot is filled in turn with each bad value of its kind, the rest staying
good, so each case reaches the code that reads that argument. Bad values are of four kinds:
paths (missing, a folder where a file is expected, a binary file, a file where a folder is
expected, a place under a file), numbers (-1, 0, nan, inf, huge, text), names (unknown, with
slashes or '..') and devices. Cases stay cheap: no network (--offline where a command has it),
no build (--dry-run), no workload run (each is refused before any work).

Then hostile files and data, each case in its own process with a time limit: devices
(/dev/zero, /dev/full, /dev/null), a FIFO, the empty path, JSON nested 100,000 deep, binary
bytes, and names in data that climb out of their folder (a definition's op_type, a result
line's definition). Each is refused (exit 2) or reported (exit 1) in bounded time.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envaudit.cli import app
from tests.conftest import REPO, UUID_BLOB, write_toy_root
from tests.harness.test_faults import write_solution

# Placeholders filled in per test from the `places` fixture.
MISSING = "{missing}"  # nothing there
FOLDER = "{folder}"  # an existing folder
BINARY = "{binary}"  # a file of bytes that are not UTF-8
TEXT = "{text}"  # a UTF-8 file that is not what any command reads
UNDER_FILE = "{under_file}"  # a place whose parent is a file
EMPTY = "{empty}"  # an empty file

FILE_INPUTS = [MISSING, FOLDER, BINARY, TEXT, EMPTY, UNDER_FILE]
# Beside a good input, `merge` takes a text or empty file with a warning naming it (by design,
# report/merge.py: every readable line is accounted for); only unreadable ones stop it.
UNREADABLE = [MISSING, FOLDER, BINARY, UNDER_FILE]
FOLDER_INPUTS = [MISSING, BINARY, TEXT, UNDER_FILE]
FILE_OUTPUTS = [FOLDER, UNDER_FILE]
REPORT_OUTPUTS = [FOLDER, UNDER_FILE, BINARY, TEXT]  # a report appends: existing bytes matter
FOLDER_OUTPUTS = [BINARY, UNDER_FILE]
NUMBERS = ["-1", "0", "-0", "nan", "inf", "-inf", "1e400", "abc", ""]
NAMES = ["nosuch", "../nosuch", "a/b", "..", ".", "/", "", "-", "x" * 300, "nosuch\u00e9"]
ENV_NAMES = [*NAMES, "../locks/torch-cpu", "torch-cpu/"]
SOLUTION_NAMES = [*NAMES, BINARY, TEXT, FOLDER]
# Environments under the fuzz's copy of locks/ that are broken one way each (made by `places`).
BROKEN_ENVS = ["binary-toml", "bad-toml", "empty-toml", "no-lock", "binary-lock", "list-lock"]
GPUS = ["GPU-00000000-0000-0000-0000-000000000000", "GPU-", "0", "cuda:0", "MIG-x", ""]
DEVICES = ["gpu", "cuda", "cuda:0", "CPU", "", "nosuch"]


@dataclass(frozen=True)
class Slot:
    """Where in a command's good argv the bad values go (`{bad}`), and which values."""

    command: str
    argv: tuple[str, ...]
    values: tuple[str, ...]


RUN = ("run", "--solution", "correct", "--runtime", "host", "--device", "cpu")
RUN_PLACES = ("--data-root", "{root}", "--solutions-root", "{solutions}")
RUN_OUT = ("--report", "{report}", "--reference-cache", "{refcache}")
AUDIT = ("audit", "--runtime", "host", "--device", "cpu", "--solution", "correct")
AUDIT_PLACES = (*RUN_PLACES, "--out", "{out}")
LOCKS = ("--locks-dir", "{locks}")
STORE = ("--store", "{store}")


def _slots() -> list[Slot]:
    def slot(command: str, values: list[str], *argv: str) -> Slot:
        return Slot(command, argv, tuple(values))

    bad = "{bad}"
    run_good = (*RUN_PLACES, *RUN_OUT)
    local = ("--runtime", "local", "--env", bad)
    torch = "torch-cpu"
    return [
        slot("check-inputs", FOLDER_INPUTS, "check-inputs", "--data-root", bad),
        slot("check-inputs", NAMES, "check-inputs", "--data-root", "{root}", "--definition", bad),
        slot("doctor", FOLDER_INPUTS, "doctor", "--locks-dir", bad),
        slot("lock", ENV_NAMES, "lock", bad, "--check", *LOCKS),
        slot("lock", ENV_NAMES, "lock", bad, "--no-build", *LOCKS),
        slot("lock", FOLDER_INPUTS, "lock", torch, "--check", "--locks-dir", bad),
        slot("lock", BROKEN_ENVS, "lock", bad, "--check", *LOCKS),
        slot("fetch", BROKEN_ENVS, "fetch", bad, "--offline", *STORE, *LOCKS),
        slot("verify-env", BROKEN_ENVS, "verify-env", bad, *LOCKS, *STORE),
        slot("build", BROKEN_ENVS, "build", "--env", bad, "--dry-run", *LOCKS),
        slot("lock", FOLDER_INPUTS, "lock", "--all", "--check", "--locks-dir", bad),
        slot("fetch", ENV_NAMES, "fetch", bad, "--offline", *STORE, *LOCKS),
        slot("fetch", FOLDER_OUTPUTS, "fetch", torch, "--offline", "--store", bad, *LOCKS),
        slot("fetch", FOLDER_INPUTS, "fetch", torch, "--offline", *STORE, "--locks-dir", bad),
        slot("verify-env", ENV_NAMES, "verify-env", bad, *LOCKS, *STORE),
        slot("verify-env", FILE_INPUTS, "verify-env", torch, "--python", bad, *LOCKS),
        slot("verify-env", FOLDER_INPUTS, "verify-env", torch, "--locks-dir", bad),
        slot("base build", NAMES, "base", "build", bad),
        slot("build", ENV_NAMES, "build", "--env", bad, "--dry-run", *LOCKS),
        slot("build", SOLUTION_NAMES, "build", "--solution", bad, "--dry-run", *LOCKS),
        slot("build", FOLDER_INPUTS, "build", "--env", torch, "--dry-run", "--locks-dir", bad),
        slot("run", SOLUTION_NAMES, "run", "--solution", bad, *RUN[3:], *run_good),
        slot("run", NAMES, *RUN, "--workload", bad, *run_good),
        slot("run", NAMES, *RUN, "--suite", bad, *run_good),
        slot("run", NAMES, *RUN[:3], "--runtime", bad, "--device", "cpu", *run_good),
        slot("run", ENV_NAMES, *RUN[:3], *local, *RUN[5:], *run_good),
        slot("run", GPUS, *RUN[:5], "--gpu", bad, *run_good),
        slot("run", DEVICES, *RUN[:5], "--device", bad, *run_good),
        slot("run", NUMBERS, *RUN, "--timeout", bad, *run_good),
        slot("run", FOLDER_INPUTS, *RUN, "--data-root", bad, *RUN_PLACES[2:], *RUN_OUT),
        slot("run", FOLDER_INPUTS, *RUN, *RUN_PLACES[:2], "--solutions-root", bad, *RUN_OUT),
        slot("run", REPORT_OUTPUTS, *RUN, *RUN_PLACES, "--report", bad, *RUN_OUT[2:]),
        slot("run", REPORT_OUTPUTS, *RUN, "--resume", *RUN_PLACES, "--report", bad),
        slot("run", FOLDER_OUTPUTS, *RUN, *RUN_PLACES, *RUN_OUT[:2], "--reference-cache", bad),
        slot("audit", SOLUTION_NAMES, *AUDIT[:6], "--solution", bad, *AUDIT_PLACES),
        slot("audit", NAMES, *AUDIT, "--suite", bad, *AUDIT_PLACES),
        slot("audit", NAMES, *AUDIT[:1], "--runtime", bad, *AUDIT[3:], *AUDIT_PLACES),
        slot("audit", ENV_NAMES, *AUDIT[:1], *local, *AUDIT[3:], *AUDIT_PLACES),
        slot("audit", GPUS, *AUDIT[:3], "--gpu", bad, *AUDIT[5:], *AUDIT_PLACES),
        slot("audit", DEVICES, *AUDIT[:3], "--device", bad, *AUDIT[5:], *AUDIT_PLACES),
        slot("audit", NAMES, *AUDIT, "--executor", bad, *AUDIT_PLACES),
        slot("audit", NUMBERS, *AUDIT, "--timeout", bad, *AUDIT_PLACES),
        slot("audit", FOLDER_INPUTS, *AUDIT, "--data-root", bad, *AUDIT_PLACES[2:]),
        slot("audit", FOLDER_INPUTS, *AUDIT, *AUDIT_PLACES[:2], "--solutions-root", bad,
             *AUDIT_PLACES[4:]),
        slot("audit", FOLDER_OUTPUTS, *AUDIT, *AUDIT_PLACES[:4], "--out", bad),
        slot("merge", FILE_INPUTS, "merge", bad, "--out", "{out}"),
        slot("merge", UNREADABLE, "merge", "{results}", bad, "--out", "{out}"),
        slot("merge", FOLDER_OUTPUTS, "merge", "{results}", "--out", bad),
        slot("merge", FOLDER_INPUTS, "merge", "{results}", "--out", "{out}", "--data-root", bad),
        slot("upstreams", FOLDER_INPUTS, "upstreams", "--offline", "--locks-dir", bad,
             "--out", "{upstreams}"),
        slot("upstreams", FILE_OUTPUTS, "upstreams", "--offline", *LOCKS, "--out", bad),
        slot("compare", FILE_INPUTS, "compare", bad, "{results}"),
        slot("compare", UNREADABLE, "compare", "{results}", bad),
        slot("compare", [n for n in NUMBERS if n not in ("0", "-0")], "compare", "{results}",
             "{results}", "--threshold", bad),
        slot("compare", FILE_OUTPUTS, "compare", "{results}", "{results}", "--junit", bad),
    ]  # fmt: skip


# Faults this test found in code outside this change's reach, left to its owner: command ->
# what is wrong. Strict, so a fix shows up as an unexpected pass.
OPEN: dict[str, str] = {}


def _cases() -> list[object]:
    cases = []
    for slot in _slots():
        at = slot.argv.index("{bad}")
        option = slot.argv[at - 1] if at and slot.argv[at - 1].startswith("--") else "arg"
        for value in slot.values:
            argv = tuple(value if a == "{bad}" else a for a in slot.argv)
            name = f"{slot.command} {option}={value[:20]!r}"
            reason = OPEN.get(slot.command)
            marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
            cases.append(pytest.param(argv, id=name, marks=marks))
    return cases


@pytest.fixture(scope="module")
def places(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    base = tmp_path_factory.mktemp("fuzz")
    shutil.copytree(REPO / "locks", base / "locks")  # a command that gets through writes here
    spec = (REPO / "locks" / "torch-cpu" / "env.toml").read_bytes()
    broken = {
        "binary-toml": {"env.toml": b"\xff\xfe\x00toml"},
        "bad-toml": {"env.toml": b"python = ["},
        "empty-toml": {"env.toml": b""},
        "no-lock": {"env.toml": spec},
        "binary-lock": {"env.toml": spec, "lock.json": b"\x89\xff\x00"},
        "list-lock": {"env.toml": spec, "lock.json": b"[]"},
    }
    for env, files in broken.items():
        (base / "locks" / env).mkdir()
        for name, data in files.items():
            (base / "locks" / env / name).write_bytes(data)
    root = write_toy_root(base / "data")
    write_solution(base / "solutions", "correct")
    (base / "folder").mkdir()
    (base / "binary").write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff\xfe\xfa" * 8)
    (base / "text").write_text("# some notes\nnot what any command reads\n")
    (base / "empty").write_text("")
    line = {
        "schema_version": 1,
        "definition": "toy_scale",
        "solution": "correct",
        "workload": {"uuid": UUID_BLOB},
        "status": "PASSED",
        "context": {"device_id": "cpu"},
        "timestamp": "2026-01-01T00:00:00+00:00",
    }
    (base / "results.jsonl").write_text(json.dumps(line) + "\n")
    return {
        "{root}": str(root),
        "{solutions}": str(base / "solutions"),
        "{locks}": str(base / "locks"),
        "{store}": str(base / "store"),
        "{report}": str(base / "out" / "r.jsonl"),
        "{refcache}": str(base / "refcache"),
        "{out}": str(base / "out" / "report"),
        "{results}": str(base / "results.jsonl"),
        "{upstreams}": str(base / "out" / "upstreams.json"),
        MISSING: str(base / "missing"),
        FOLDER: str(base / "folder"),
        BINARY: str(base / "binary"),
        TEXT: str(base / "text"),
        EMPTY: str(base / "empty"),
        UNDER_FILE: str(base / "text" / "below"),
        "{cache}": str(base / "cache"),
    }


@pytest.mark.parametrize("argv", _cases())
def test_bad_arguments_are_refused_without_a_traceback(
    argv: tuple[str, ...], places: dict[str, str]
) -> None:
    filled = [places.get(a, a) for a in argv]
    variables = {"ENVAUDIT_CACHE": places["{cache}"], "ENVAUDIT_STORE": places["{store}"]}
    result = CliRunner().invoke(app, filled, env=variables)
    shown = f"envaudit {' '.join(filled)}\n{result.output}"
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        shown,
        result.exception,
    )
    assert "Traceback" not in result.output, shown
    assert result.exit_code in (1, 2), shown


# ---------------------------------------------------------------- hostile files and data
# Each in its own process with a time limit: before they were refused, a device was read to
# the end (memory) and a FIFO blocked forever, which in-process would hang the suite.

HOSTILE = "{hostile}"
DEEP = "[" * 100_000 + "]" * 100_000
ESCAPING = "../../../../escaped"


def _hostile_cases() -> list[object]:
    """(argv with {hostile}, the hostile values, the exit code expected)."""
    out = ("--out", "{out}")
    run = (*RUN, *RUN_PLACES, "--validation-only")
    table = [
        (("merge", HOSTILE, *out), ["/dev/zero", "/dev/null", "{fifo}", ""], 2),
        (("merge", "{deep}", *out), [""], 2),  # a finding per line; no usable line, as compare
        ((*run, "--report", HOSTILE), ["/dev/full", "/dev/null", "{fifo}", ""], 2),
        (("reproduce", HOSTILE), ["/dev/zero:1", "{fifo}:1", "{deep}:1", "{binary}:1"], 2),
        (("diff-env", HOSTILE, "torch-cpu", *LOCKS), ["{deep}", "{binary}"], 2),
        (("export-solutions", "--out", HOSTILE, "--data-root", "{root}"), [""], 2),
        (("check-inputs", "--data-root", HOSTILE), ["{deep_root}", "{escaping_root}"], 1),
        # outputs that are not envaudit's to replace: refused, left as they are
        (("compare", "{results}", "{results}", "--junit", HOSTILE), ["{fifo}", "{link}"], 2),
        (("upstreams", "--offline", *LOCKS, "--out", HOSTILE), ["{fifo}", "{link}"], 2),
        ((*run, "--report", HOSTILE), ["{link}"], 2),
        # a line longer than any result line, on every reader of result files
        ((*run, "--report", HOSTILE), ["{big}"], 2),
        ((*run, "--resume", "--report", HOSTILE), ["{big}"], 2),
        (("compare", HOSTILE, "{results}"), ["{big}"], 2),
        (("merge", HOSTILE, *out), ["{big}"], 2),
        (
            (
                "audit",
                "--runtime",
                "host",
                "--device",
                "cpu",
                "--solution",
                "correct",
                *RUN_PLACES,
                "--out",
                HOSTILE,
            ),
            ["{big_out}"],
            2,
        ),
    ]
    cases = []
    for argv, values, code in table:
        for value in values:
            name = f"{argv[0]} {value[:24]!r}"
            cases.append(pytest.param(argv, value, code, id=name))
    return cases


@pytest.fixture(scope="module")
def hostile(places: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    base = tmp_path_factory.mktemp("hostile")
    os.mkfifo(base / "fifo")
    (base / "deep.jsonl").write_text(DEEP + "\n")
    deep_root = write_toy_root(base / "deep-root")
    (deep_root / "definitions" / "toy" / "deep.json").write_text(DEEP)
    escaping_root = write_toy_root(base / "escaping-root")
    definition = escaping_root / "definitions" / "toy" / "toy_scale.json"
    definition.write_text(json.dumps({**json.loads(definition.read_text()), "op_type": ESCAPING}))
    stranger = base / "stranger.txt"
    stranger.write_text("a stranger's file\n")
    (base / "link").symlink_to(stranger)
    big = "x" * (64 * 1024 * 1024 + 16) + "\n"
    (base / "big.jsonl").write_text(big)
    (base / "big-out").mkdir()
    (base / "big-out" / "results.jsonl").write_text(big)
    return {
        **places,
        "{link}": str(base / "link"),
        "{big}": str(base / "big.jsonl"),
        "{big_out}": str(base / "big-out"),
        "{fifo}": str(base / "fifo"),
        "{deep}": str(base / "deep.jsonl"),
        "{deep_root}": str(deep_root),
        "{escaping_root}": str(escaping_root),
    }


def _fill(text: str, places: dict[str, str]) -> str:
    for key, value in places.items():
        if key.startswith("{"):
            text = text.replace(key, value)
    return text


@pytest.mark.parametrize(("argv", "value", "code"), _hostile_cases())
def test_hostile_files_are_refused_in_bounded_time(
    argv: tuple[str, ...], value: str, code: int, hostile: dict[str, str]
) -> None:
    filled = [_fill(value if a == HOSTILE else a, hostile) for a in argv]
    variables = {**os.environ, "ENVAUDIT_CACHE": hostile["{cache}"]}
    done = subprocess.run(
        [sys.executable, "-m", "envaudit", *filled],
        capture_output=True, text=True, timeout=120, cwd=REPO, env=variables,
    )  # fmt: skip
    shown = f"envaudit {' '.join(filled)}\n{done.stdout}{done.stderr}"
    assert done.returncode == code, shown
    assert "Traceback" not in done.stderr, shown
    assert "error" in (done.stdout + done.stderr).lower(), shown  # said, not only exited


def test_a_result_line_cannot_write_outside_out(places: dict[str, str], tmp_path: Path) -> None:
    """A result line's definition is a path component of traces/: one that climbs is skipped
    with a warning naming it, and nothing lands outside --out."""
    line = json.loads(Path(places["{results}"]).read_text())
    bad = {**line, "definition": ESCAPING, "workload": {"uuid": "w-escaping"}}
    results = tmp_path / "results.jsonl"
    results.write_text(json.dumps(line) + "\n" + json.dumps(bad) + "\n")
    out = tmp_path / "a" / "b" / "c" / "out"
    argv = ["merge", str(results), "--out", str(out), *RUN_PLACES]
    result = CliRunner().invoke(app, [places.get(a, a) for a in argv])
    assert result.exit_code == 0, result.output
    assert repr(ESCAPING) in result.output, result.output
    written = [p for p in tmp_path.rglob("*") if p.is_file() and not p.is_relative_to(out)]
    assert written == [results], written


# ---------------------------------------------------------------- a full file system
# Every command that writes, pointed at a tmpfs with no page left: exit 2, no traceback, the
# message gives the free space (tests/schema/test_full_disk.py checks what each one keeps).

FULL = "{full}"
FULL_WRITERS = [
    (*RUN, *RUN_PLACES, "--report", f"{FULL}/r.jsonl", "--reference-cache", "{refcache}"),
    ("merge", "{results}", "--out", f"{FULL}/report"),
    (
        "export-solutions",
        "--solutions-root",
        "{solutions}",
        "--data-root",
        "{root}",
        "--out",
        f"{FULL}/fib",
    ),
    ("lock", "torch-cpu", "--locks-dir", f"{FULL}/locks", "--no-build"),
]


@pytest.mark.parametrize("argv", FULL_WRITERS, ids=[a[0] for a in FULL_WRITERS])
def test_a_full_file_system_is_exit_2_naming_the_free_space(
    argv: tuple[str, ...], places: dict[str, str], tmp_path: Path
) -> None:
    from tests.schema.test_full_disk import fill, small_tmpfs

    with small_tmpfs(tmp_path / "full") as full:
        if argv[0] == "lock":
            shutil.copytree(REPO / "locks" / "torch-cpu", full / "locks" / "torch-cpu")
            (full / "locks" / "torch-cpu" / "lock.json").unlink()
        fill(full)
        filled = [_fill(a, places).replace(FULL, str(full)) for a in argv]
        variables = {"ENVAUDIT_CACHE": places["{cache}"], "ENVAUDIT_STORE": places["{store}"]}
        result = CliRunner().invoke(app, filled, env=variables)
        shown = f"envaudit {' '.join(filled)}\n{result.output}"
        assert result.exception is None or isinstance(result.exception, SystemExit), shown
        assert "Traceback" not in result.output, shown
        assert result.exit_code == 2, shown
        assert "free" in result.output, shown


def test_a_full_cache_is_exit_2_naming_the_cache_and_its_free_space(
    places: dict[str, str], tmp_path: Path
) -> None:
    """ENVAUDIT_CACHE on a full file system: the job folder cannot be written, and the message
    names where, with the free space (not a bare "No space left on device")."""
    from tests.schema.test_full_disk import fill, small_tmpfs

    with small_tmpfs(tmp_path / "full") as full:
        (full / "cache").mkdir()
        fill(full)
        argv = [*RUN, *RUN_PLACES, "--report", str(tmp_path / "r.jsonl")]
        filled = [_fill(a, places) for a in argv]
        variables = {"ENVAUDIT_CACHE": str(full / "cache"), "ENVAUDIT_STORE": places["{store}"]}
        result = CliRunner().invoke(app, filled, env=variables)
        shown = f"envaudit {' '.join(filled)}\n{result.output}"
        assert result.exit_code == 2 and "Traceback" not in result.output, shown
        assert str(full / "cache") in result.output and "free" in result.output, shown
