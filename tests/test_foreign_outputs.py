"""Nothing envaudit writes replaces or writes through what is not its own: every output path is
a regular file or absent, a FIFO, a device node or a planted symbolic link is refused (exit 2,
naming it) and left as it was. Each command with an output is run against each foreign kind."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envaudit.cli import app
from envaudit.errors import EnvauditError
from envaudit.runtime.supervision.supervisor import unique_log
from envaudit.schema.paths import NotOurs, open_for_append, write_bytes_atomically
from envaudit.schema.results import append_line
from tests.conftest import REPO

LINES = REPO / "docs" / "results" / "h200" / "flashmla" / "flashmla-13.1.jsonl"
FOREIGN = b"a stranger's file\n"


def fifo(path: Path) -> Callable[[], bool]:
    os.mkfifo(path)
    return lambda: stat.S_ISFIFO(os.lstat(path).st_mode)


def device(path: Path) -> Callable[[], bool]:
    """A /dev/null twin (root only; skipped elsewhere or on a nodev file system)."""
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("making a device node needs root")
    return lambda: stat.S_ISCHR(os.lstat(path).st_mode)


def link(path: Path) -> Callable[[], bool]:
    """A link to a stranger's file beside the folder: it must stay a link, the file as it was."""
    target = path.parent.parent / f"stranger-{path.name}"
    target.write_bytes(FOREIGN)
    path.symlink_to(target)
    return lambda: path.is_symlink() and target.read_bytes() == FOREIGN


KINDS = {"fifo": fifo, "device": device, "link": link}


@pytest.fixture(params=sorted(KINDS))
def foreign(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[Path], Callable[[], bool]]:
    """Plant the kind at a path; the returned check says it is still there, untouched."""
    (tmp_path / "out").mkdir()
    return KINDS[request.param]


def refused(args: list[str], name: str) -> None:
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert name in result.output and "nothing was written" in result.output, result.output


def test_compare_junit(tmp_path: Path, foreign: Callable[..., Callable[[], bool]]) -> None:
    target = tmp_path / "out" / "compare.xml"
    intact = foreign(target)
    refused(["compare", str(LINES), str(LINES), "--junit", str(target)], "compare.xml")
    assert intact()


def test_upstreams_out(tmp_path: Path, foreign: Callable[..., Callable[[], bool]]) -> None:
    target = tmp_path / "out" / "upstreams.json"
    intact = foreign(target)
    refused(["upstreams", "--offline", "--out", str(target)], "upstreams.json")
    assert intact()


@pytest.mark.parametrize("name", ["performance.md", "results.jsonl", "summary.json"])
def test_merge_into_a_report_folder(
    tmp_path: Path, foreign: Callable[..., Callable[[], bool]], name: str
) -> None:
    out = tmp_path / "out"
    intact = foreign(out / name)
    refused(["merge", str(LINES), "--out", str(out)], name)
    assert intact()


def test_a_run_report_that_is_a_link_is_refused_before_any_work(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    target = tmp_path / "out" / "results.jsonl"
    intact = link(target)
    result = CliRunner().invoke(
        app,
        [
            "run",
            "--solution",
            "gemm_bf16_n6144_k4096-torch",
            "--device",
            "cpu",
            "--report",
            str(target),
        ],
    )
    assert result.exit_code == 2 and "symbolic link" in result.output, result.output
    assert intact()


# ---------------------------------------------------------------- the writers underneath


def test_the_atomic_writer_and_the_appender(
    tmp_path: Path, foreign: Callable[..., Callable[[], bool]]
) -> None:
    target = tmp_path / "out" / "file"
    intact = foreign(target)
    with pytest.raises(NotOurs):
        write_bytes_atomically(target, b"x")
    with pytest.raises(NotOurs):
        os.close(open_for_append(target))
    with pytest.raises(EnvauditError, match="nothing was written"):
        append_line(target, {"a": 1})
    assert intact()
    assert sorted(p.name for p in target.parent.iterdir()) == ["file"]  # no temporary left


def test_worker_logs_never_go_through_a_planted_folder_link(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    logs = tmp_path / "results.logs"
    logs.mkdir()
    (logs / "my-solution").symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(EnvauditError, match="symbolic link"):
        unique_log(logs / "my-solution", 1)
    assert list(elsewhere.iterdir()) == []
    logs.rename(tmp_path / "moved")
    logs.symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(EnvauditError, match="symbolic link"):
        unique_log(logs / "other", 1)
    assert list(elsewhere.iterdir()) == []


def test_a_regular_file_is_still_replaced_and_appended(tmp_path: Path) -> None:
    target = tmp_path / "file"
    target.write_bytes(b"old")
    write_bytes_atomically(target, b"new")
    append_line(target, {"a": 1})
    assert target.read_bytes() == b"new\n" + b'{"a": 1}\n'
