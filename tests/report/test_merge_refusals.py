"""`envaudit merge` never replaces a report with less than it had: bad inputs and bad --out
folders are refused before anything is written, and a merge with no usable line writes nothing."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from envaudit.cli import app
from tests.conftest import REPO

RESULTS = REPO / "docs" / "results" / "h100" / "dev-a.jsonl"
SENTINEL = "the committed report, not to be lost\n"
REPORT_FILES = ("results.jsonl", "summary.json", "performance.md", "preferred-solutions.json")


def merge(*argv: str) -> Result:
    return CliRunner().invoke(
        app,
        [
            "merge",
            *argv,
            "--data-root",
            str(REPO / "workloads"),
            "--solutions-root",
            str(REPO / "solutions"),
        ],
    )


@pytest.fixture
def report(tmp_path: Path) -> Path:
    """An --out folder holding a report (stand-in bytes) that a bad merge must leave alone."""
    out = tmp_path / "docs"
    (out / "plots").mkdir(parents=True)
    for name in REPORT_FILES:
        (out / name).write_text(SENTINEL)
    return out


def untouched(out: Path) -> bool:
    names = sorted(p.name for p in out.iterdir())
    return names == sorted([*REPORT_FILES, "plots"]) and all(
        (out / name).read_text() == SENTINEL for name in REPORT_FILES
    )


def refused(result: Result, code: int, *words: str) -> None:
    assert result.exit_code == code, result.output
    assert isinstance(result.exception, SystemExit), result.exception  # no traceback
    assert "Traceback" not in result.output
    assert "error: " in result.output
    for word in words:
        assert word in result.output, result.output


def test_misspelt_input_is_refused_before_anything_is_written(report: Path, tmp_path: Path) -> None:
    good = shutil.copyfile(RESULTS, tmp_path / "good.jsonl")
    result = merge(str(good), str(tmp_path / "nope.jsonl"), "--out", str(report))
    refused(result, 2, "nope.jsonl")
    assert untouched(report)


def test_folder_given_as_input_is_refused(report: Path, tmp_path: Path) -> None:
    refused(merge(str(tmp_path), "--out", str(report)), 2, str(tmp_path))
    assert untouched(report)


def test_unreadable_input_is_refused(report: Path, tmp_path: Path) -> None:
    locked = shutil.copyfile(RESULTS, tmp_path / "locked.jsonl")
    with _unreadable(locked):
        refused(merge(str(locked), "--out", str(report)), 2, "locked.jsonl")
    assert untouched(report)


def test_binary_input_is_refused_without_a_traceback(report: Path, tmp_path: Path) -> None:
    binary = tmp_path / "results.parquet"
    binary.write_bytes(b"PAR1\x15\x04\xff\xfe\x00\x81" * 50)
    refused(merge(str(binary), "--out", str(report)), 2, "results.parquet", "not UTF-8 JSON lines")
    assert untouched(report)


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("empty.jsonl", ""),
        ("blank.jsonl", "\n\n"),
        ("list.jsonl", "[1, 2]\n"),
        ("distributions-only.jsonl", '{"fingerprint": "f", "distributions": {"torch": "2"}}\n'),
    ],
)
def test_no_usable_line_leaves_the_existing_report_alone(
    report: Path, tmp_path: Path, name: str, text: str
) -> None:
    (tmp_path / name).write_text(text)
    result = merge(str(tmp_path / name), "--out", str(report))
    refused(result, 2, name, "no usable result line", str(report))  # as compare: unusable input
    assert untouched(report)


def test_no_usable_line_writes_no_empty_report(tmp_path: Path) -> None:
    (tmp_path / "empty.jsonl").write_text("")
    out = tmp_path / "new-report"
    refused(merge(str(tmp_path / "empty.jsonl"), "--out", str(out)), 2, "no usable result line")
    assert not out.exists()


def test_out_naming_a_file_is_refused_before_any_work(tmp_path: Path) -> None:
    target = tmp_path / "summary.json"
    target.write_text(SENTINEL)
    # The input is missing too: --out is checked first, and names the file.
    refused(merge(str(tmp_path / "nope.jsonl"), "--out", str(target)), 2, str(target))
    assert target.read_text() == SENTINEL
    refused(merge(str(RESULTS), "--out", str(target / "report")), 2, str(target))
    assert target.read_text() == SENTINEL


def test_read_only_out_folder_is_refused_before_any_work(report: Path) -> None:
    with _read_only(report):
        refused(merge(str(RESULTS), "--out", str(report)), 2, str(report), "not writable")
        refused(merge(str(RESULTS), "--out", str(report / "sub")), 2, str(report))
    assert untouched(report)


def test_a_good_merge_replaces_the_report(report: Path) -> None:
    result = merge(str(RESULTS), "--out", str(report))
    assert result.exit_code == 0, result.output
    assert (report / "results.jsonl").read_text().count("\n") == 34
    assert not list(report.rglob(".*.tmp"))


@contextmanager
def _unreadable(path: Path) -> Iterator[None]:
    """A file this process cannot open: mode 000, or for root (which reads any mode) a dangling
    symlink."""
    if os.geteuid() != 0:
        path.chmod(0)
        try:
            yield
        finally:
            path.chmod(0o644)
        return
    path.unlink()
    path.symlink_to(path.with_name("gone"))
    yield


@contextmanager
def _read_only(folder: Path) -> Iterator[None]:
    """A folder this process cannot write to: mode 555, or for root (which ignores modes) the
    immutable attribute."""
    if os.geteuid() != 0:
        folder.chmod(0o555)
        try:
            yield
        finally:
            folder.chmod(0o755)
        return
    if shutil.which("chattr") is None:
        pytest.skip("running as root without chattr: no way to make a folder read-only")
    made = subprocess.run(["chattr", "+i", str(folder)], capture_output=True, check=False)
    if made.returncode != 0:
        pytest.skip(f"chattr +i is not supported here: {made.stderr.decode().strip()}")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(folder)], check=True)
