"""A busy machine is named as the cause of a window the reported time does not fit, when the
kernel's count of the solution's thread's waits for a CPU explains the gap; a gap it does not
explain stays the judge's plain "clock read" flag. Both keep the figure out of every ranking."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from envaudit.harness.witness import ModeWitness, cpu_wait_ns


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


def test_the_kernel_counts_a_thread_s_waits_for_a_cpu() -> None:
    """Our own process's count grows while more busy processes than cores compete with it."""
    before = cpu_wait_ns(os.getpid())
    if before is None:
        return  # a kernel without schedstat: the witness then names no cause
    hogs = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"])
        for _ in range((os.cpu_count() or 1) * 2)
    ]
    try:
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            pass
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    after = cpu_wait_ns(os.getpid())
    assert after is not None and after > before, (before, after)
    assert cpu_wait_ns(2**22 + 12345) is None  # no such process
