"""`envaudit upstreams`: every pinned version and commit of the locks beside what the index
and the git remotes have now (lock/upstreams.py), written to a JSON report."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envaudit.lock.config import FetchConfig
from envaudit.lock.upstreams import check_upstreams, render, write_upstreams

ShowAnswers = Callable[[], AbstractContextManager[Callable[[int, int], None] | None]]
"""Opens the caller's display of the answers awaited for as long as they are asked for (the
command line's progress bar, console.progress_bar); it yields the callback fed (done, total)."""


@dataclass(frozen=True)
class UpstreamsRequest:
    locks_dir: Path = Path("locks")
    out: Path = Path("results/upstreams.json")
    offline: bool = False
    """Ask nothing; list every pin as not checked."""


@dataclass(frozen=True)
class UpstreamsResult:
    report: dict[str, Any]
    """As written to `written`: one record per pin per env, and counts by status."""
    written: Path

    def text(self) -> str:
        """A short table; a pin shared by several envs is one row listing them."""
        return render(self.report)


def check_pins(request: UpstreamsRequest, show: ShowAnswers | None = None) -> UpstreamsResult:
    """Ask the index and remotes about every pin (shown while they answer), then write the
    report; an offline report never replaces one that holds answers (LockError, exit 2)."""
    config = FetchConfig.from_environment(offline=request.offline)
    with show() if show is not None else nullcontext(None) as progress:
        report = check_upstreams(request.locks_dir, config, request.offline, progress)
    write_upstreams(report, request.out)
    return UpstreamsResult(report, request.out)
