"""The progress file's seal: a supervisor with the job's key takes only the lines the judge
wrote, in the order it wrote them. The solution's process can write the job folder, so every
other line (made up, altered, or a sealed line copied and appended again) reads as FORGED."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from envaudit.schema.progress import (
    FORGED,
    PROGRESS_FILE,
    ProgressReader,
    ProgressWriter,
    Seal,
    take_seal,
    touch_heartbeat,
)


def _written(tmp_path: Path, key: str) -> Path:
    touch_heartbeat(tmp_path)
    writer = ProgressWriter(tmp_path, key)
    writer.send("begin", uuid="w1")
    line = {"status": "INCORRECT_NUMERICAL", "x": float("nan"), "big": 2**70, "s": "é"}
    writer.send("result", uuid="w1", line=line)
    return tmp_path / PROGRESS_FILE


def test_sealed_lines_are_events_in_order(tmp_path: Path) -> None:
    _written(tmp_path, "k" * 64)
    events = ProgressReader(tmp_path, "k" * 64).events()
    assert [e["event"] for e in events] == ["begin", "result"]
    assert events[1]["line"]["big"] == 2**70


@pytest.mark.parametrize("how", ["made_up", "altered", "replayed", "other_key"])
def test_any_other_line_is_forged(tmp_path: Path, how: str) -> None:
    path = _written(tmp_path, "k" * 64)
    lines = path.read_text().splitlines()
    if how == "made_up":
        extra = json.dumps({"event": "result", "uuid": "w1", "line": {"status": "PASSED"}})
    elif how == "altered":
        extra = lines[1].replace("INCORRECT_NUMERICAL", "PASSED")
        path.write_text(lines[0] + "\n")
    elif how == "replayed":
        extra = lines[0]
    else:
        other = tmp_path / "other"
        other.mkdir()
        extra = _written(other, "j" * 64).read_text().splitlines()[0]
    with path.open("a") as handle:
        handle.write(extra + "\n")
    assert ProgressReader(tmp_path, "k" * 64).events()[-1] == {"event": FORGED}


def test_the_seal_is_gone_once_taken(tmp_path: Path) -> None:
    Seal.fresh("c" * 64).write(tmp_path)
    taken = take_seal(tmp_path)
    assert taken is not None and taken.cache_key == "c" * 64
    assert take_seal(tmp_path) is None


def test_racing_supervisors_share_one_cache_key(tmp_path: Path) -> None:
    """An audit starts jobs on several threads at once: each asks for the cache's key, and
    all must get the same one, none failing (they once shared one temporary file name)."""
    import threading

    from envaudit.schema.progress import reference_cache_key

    keys: list[str] = []
    errors: list[BaseException] = []

    def ask() -> None:
        try:
            keys.append(reference_cache_key(tmp_path / "cache"))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and len(keys) == 8 and len(set(keys)) == 1, (errors, set(keys))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache.key"]
