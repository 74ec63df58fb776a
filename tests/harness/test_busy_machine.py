"""A busy machine is named as the cause of a window the reported time does not fit, when the
kernel's count of the solution's thread's waits for a CPU explains the gap; a gap it does not
explain stays the judge's plain "clock read" flag. Both keep the figure out of every ranking."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable

from envaudit.harness.witness import ModeWitness, cpu_waits_ns, longest_wait_ns


def witness(window_ms: float, waited_ms: float | None, samples_ms: list[float]) -> ModeWitness:
    record = ModeWitness("eager", {}, None, allowance_step_ms=0.5, device_kind="cpu")
    record.windows_ms = [window_ms]
    record.waited_ms = [] if waited_ms is None else [waited_ms]
    record.samples_ms = samples_ms
    record.steps = [len(samples_ms)]
    return record


def test_a_gap_the_waits_explain_is_a_busy_machine() -> None:
    samples = [5.0] * 40 + [20.0] * 10  # preempted steps: a heavy tail above the median
    summary = witness(420.0, 200.0, samples).summary()
    assert summary["consistent"] is False and summary["contended"] is True, summary
    assert summary["waited_ms"] == 200.0


def test_a_gap_the_waits_do_not_explain_stays_suspect() -> None:
    summary = witness(420.0, 10.0, [5.0] * 50).summary()
    assert summary["consistent"] is False and summary["contended"] is False, summary
    assert "contended" not in witness(420.0, None, [5.0] * 50).summary()


def _spin(seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        pass


def _while_busy(work: Callable[[], None]) -> None:
    """Runs `work` while more busy processes than cores compete with this one."""
    hogs = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"])
        for _ in range((os.cpu_count() or 1) * 2)
    ]
    try:
        work()
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


def test_the_kernel_counts_a_thread_s_waits_for_a_cpu() -> None:
    """Our own process's count grows while more busy processes than cores compete with it."""
    before = cpu_waits_ns(os.getpid())
    if before is None:
        return  # a kernel without schedstat: the witness then names no cause
    _while_busy(lambda: _spin(1.0))
    after = cpu_waits_ns(os.getpid())
    assert after is not None and longest_wait_ns(before, after) > 0, (before, after)
    assert cpu_waits_ns(2**22 + 12345) is None  # no such process


def test_a_helper_thread_s_waits_count() -> None:
    """A call whose work runs on another thread (a pool's, which lives on) while the calling
    one sleeps waits as long as its helper is kept from a CPU: that thread's wait counts."""
    before = cpu_waits_ns(os.getpid())
    if before is None:
        return
    main = threading.get_native_id()
    spun, release = threading.Event(), threading.Event()

    def helper() -> None:
        _spin(1.0)
        spun.set()
        release.wait()

    pool_thread = threading.Thread(target=helper)
    pool_thread.start()
    try:
        _while_busy(lambda: spun.wait())  # the calling thread sleeps: it waits for no CPU
        after = cpu_waits_ns(os.getpid())
    finally:
        release.set()
        pool_thread.join()
    assert after is not None
    longest = longest_wait_ns(before, after)
    main_only = after[main] - before[main]
    assert longest > 50e6 and longest > 5 * main_only, (longest, main_only)
