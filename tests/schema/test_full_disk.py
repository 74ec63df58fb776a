"""A full disk never passes for success: on a real, small tmpfs, an append that does not fit
leaves the file as it was and ends the command with exit 2, naming the file and the free space.

Mounting needs root (or CAP_SYS_ADMIN); where it is refused, these tests skip.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from envaudit.errors import EXIT_USAGE, EnvauditError
from envaudit.schema.results import append_line, read_lines

PAGE = 4096


@contextlib.contextmanager
def small_tmpfs(folder: Path, size: str = "64k") -> Iterator[Path]:
    """A real tmpfs of `size` mounted on `folder` (skips the test where mounting is refused)."""
    folder.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


@pytest.fixture
def tiny(tmp_path: Path) -> Iterator[Path]:
    with small_tmpfs(tmp_path / "tiny") as folder:
        yield folder


def fill(folder: Path) -> None:
    """Take every free page of the file system holding `folder` (a filler file)."""
    with (folder / "filler").open("wb", buffering=0) as handle:
        while True:
            try:
                handle.write(b"\0" * PAGE)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
                return


def big_line(name: str, size: int = 3400) -> dict[str, object]:
    """A result-like line of about `size` bytes."""
    line: dict[str, object] = {"solution": name, "workload": {"uuid": str(uuid.uuid4())}}
    line["context"] = {"pad": "x" * (size - len(json.dumps(line)) - 20)}
    return line


def tighten(report: Path, slack: int = 256) -> None:
    """Pad `report` with a JSON line so that its last page keeps at most `slack` bytes free: a
    result line (about 2 KB) then never fits in it, whatever the exact size of the lines."""
    free = -report.stat().st_size % PAGE
    if free > slack:
        with report.open("a") as handle:
            handle.write(json.dumps({"pad": "x" * (free - slack)}) + "\n")


def nearly_full_with(report: Path, line: dict[str, object]) -> bytes:
    """`report` holds `line` (so its page has ~700 bytes of slack), every other page is taken."""
    append_line(report, line)
    fill(report.parent)
    return report.read_bytes()


def test_an_append_that_does_not_fit_leaves_the_file_as_it_was(tiny: Path) -> None:
    report = tiny / "r.jsonl"
    before = nearly_full_with(report, big_line("old"))
    with pytest.raises(EnvauditError) as caught:
        append_line(report, big_line("new"))
    assert caught.value.exit_code == EXIT_USAGE
    message = str(caught.value)
    assert str(report) in message and "bytes free" in message, message
    assert "No space left" in message, message
    assert caught.value.hint and "--resume" in caught.value.hint
    assert report.read_bytes() == before, "a partial line was left in the report"
    assert [line["solution"] for _, line in read_lines(report) if line] == ["old"]


def test_an_append_that_fits_after_space_is_freed(tiny: Path) -> None:
    report = tiny / "r.jsonl"
    nearly_full_with(report, big_line("old"))
    with pytest.raises(EnvauditError):
        append_line(report, big_line("new"))
    os.unlink(tiny / "filler")
    append_line(report, big_line("new"))
    assert [line["solution"] for _, line in read_lines(report) if line] == ["old", "new"]


def toy_scene(base: Path) -> tuple[list[str], list[str]]:
    """argv heads of `run` and `audit` on the host runtime and the CPU over a toy root."""
    from tests.conftest import write_toy_root
    from tests.harness.test_faults import write_solution

    root = write_toy_root(base / "data")
    write_solution(base / "solutions", "correct")
    common = ["--runtime", "host", "--device", "cpu", "--data-root", str(root)]
    common += ["--solutions-root", str(base / "solutions")]
    run = ["run", "--solution", "correct", *common, "--reference-cache", str(base / "ref")]
    return run, ["audit", "--solution", "correct", *common]


def invoke(argv: list[str]) -> tuple[int, str]:
    from typer.testing import CliRunner

    from envaudit.cli import app

    result = CliRunner().invoke(app, argv)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert "Traceback" not in result.output
    return result.exit_code, result.output


def test_run_on_a_full_disk_exits_2_and_keeps_the_report(tiny: Path, tmp_path: Path) -> None:
    run, _ = toy_scene(tmp_path)
    report = tiny / "r.jsonl"
    code, out = invoke([*run, "--report", str(report)])
    assert code == 0, out
    tighten(report)
    fill(tiny)
    before = report.read_bytes()
    code, out = invoke([*run, "--report", str(report)])
    assert code == EXIT_USAGE, out
    assert str(report) in out and "bytes free" in out, out
    assert "PASSED" not in out, out
    assert report.read_bytes() == before


def test_audit_on_a_full_disk_does_not_count_the_old_line(tiny: Path, tmp_path: Path) -> None:
    _, audit = toy_scene(tmp_path)
    code, out = invoke([*audit, "--out", str(tiny)])
    assert code == 0 and "1 PASSED" in out, out
    report = tiny / "results.jsonl"
    fill(tiny)
    before = report.read_bytes()
    code, out = invoke([*audit, "--out", str(tiny)])
    assert code == EXIT_USAGE, out
    assert str(report) in out and "bytes free" in out, out
    assert "1 PASSED" not in out, out
    assert report.read_bytes() == before


def test_a_lock_written_on_a_full_disk_names_the_file(tmp_path: Path) -> None:
    from envaudit.lock.files import load_lock, write_lock
    from tests.conftest import REPO

    lock = load_lock(REPO / "locks" / "torch-cpu")
    with small_tmpfs(tmp_path / "tiny", "1m") as tiny:
        written = write_lock(tiny / "env", lock)
        before = written.read_bytes()
        fill(tiny)
        with pytest.raises(EnvauditError) as caught:
            write_lock(tiny / "env", lock)
        assert caught.value.exit_code == EXIT_USAGE
        assert str(written) in str(caught.value) and "bytes free" in str(caught.value)
        assert written.read_bytes() == before
        assert sorted(p.name for p in written.parent.iterdir()) == ["lock.json"], "a temp file"


def test_merge_into_a_full_disk_names_the_file(tiny: Path, tmp_path: Path) -> None:
    run, _ = toy_scene(tmp_path)
    report = tmp_path / "r.jsonl"
    code, out = invoke([*run, "--report", str(report)])
    assert code == 0, out
    fill(tiny)
    merge = ["merge", str(report), "--out", str(tiny / "out"), "--data-root"]
    code, out = invoke(
        [*merge, str(tmp_path / "data"), "--solutions-root", str(tmp_path / "solutions")]
    )
    assert code == EXIT_USAGE, out
    assert str(tiny / "out") in out and "bytes free" in out, out


def test_export_into_a_full_disk_names_the_file(tiny: Path, tmp_path: Path) -> None:
    toy_scene(tmp_path)
    fill(tiny)
    argv = ["export-solutions", "--solutions-root", str(tmp_path / "solutions")]
    code, out = invoke([*argv, "--data-root", str(tmp_path / "data"), "--out", str(tiny / "fib")])
    assert code == EXIT_USAGE, out
    assert str(tiny / "fib") in out and "bytes free" in out, out
