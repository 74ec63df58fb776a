"""One job per GPU per host: a second process asking for a GPU another holds is refused with
the holder named (exit 2), gets it when it waits long enough, and a killed holder frees it."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from envaudit.runtime.scheduling.gpu_lock import GpuBusy, holding_gpu

UUID = "GPU-11111111-2222-3333-4444-555555555555"
HOLDER = """
import sys, time
from envaudit.runtime.scheduling.gpu_lock import holding_gpu
with holding_gpu(sys.argv[1]):
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
"""


def hold(seconds: float, cache: Path) -> subprocess.Popen[str]:
    env = {"ENVAUDIT_CACHE": str(cache), "PATH": "/usr/bin:/bin"}
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, UUID, str(seconds)],
        stdout=subprocess.PIPE,
        text=True,
        env={**env, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")},
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    return holder


def test_a_held_gpu_is_refused_then_waited_for_then_freed_by_a_kill(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENVAUDIT_CACHE", str(tmp_path))
    holder = hold(3.0, tmp_path)
    refused = rf"GPU {UUID} is in use: held by pid {holder.pid}"
    with pytest.raises(GpuBusy, match=refused) as busy, holding_gpu(UUID):
        pass
    assert busy.value.exit_code == 2
    start = time.monotonic()
    with holding_gpu(UUID, wait_s=30):  # the holder lets go after 3 s
        waited = time.monotonic() - start
    assert 0.5 < waited < 20
    holder.wait()
    killed = hold(60.0, tmp_path)
    killed.kill()
    killed.wait()
    with holding_gpu(UUID):  # the kernel released a killed holder's lock
        pass
