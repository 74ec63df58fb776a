"""The worker's CUDA context made by the driver on a thread (envaudit.harness.context).

Each check runs in a fresh interpreter: this process's own CUDA state must not be the one
looked at."""

from __future__ import annotations

import ctypes.util
import json
import os
import subprocess
import sys

import pytest
import torch

from tests.conftest import REPO

GPU = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA build and GPU")

# The primary context's state as the driver reports it, before torch is asked for anything,
# then torch's first kernel.
MADE_BESIDE = """
import ctypes, json, threading
import torch
from envaudit.harness.context import context_beside
making = context_beside(torch.device("cuda:0"))
assert isinstance(making, threading.Thread)
making.join()
driver = ctypes.CDLL("libcuda.so.1")
device, flags, active = ctypes.c_int(), ctypes.c_uint(), ctypes.c_int()
assert driver.cuDeviceGet(ctypes.byref(device), 0) == 0
assert driver.cuDevicePrimaryCtxGetState(device, ctypes.byref(flags), ctypes.byref(active)) == 0
initialised_before = torch.cuda.is_initialized()
torch.cuda.set_device(0)
value = torch.ones(4, device="cuda").add_(1).sum().item()
print(json.dumps({"active": active.value, "torch_before": initialised_before, "value": value}))
"""


def run_child(code: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), *sys.path])},
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@GPU
def test_the_thread_makes_the_primary_context_torch_then_uses() -> None:
    seen = run_child(MADE_BESIDE)
    # made by the driver while torch had not been initialised, and used by torch afterwards
    assert seen == {"active": 1, "torch_before": False, "value": 8.0}


def test_a_device_that_is_not_a_gpu_gets_no_thread() -> None:
    from envaudit.harness.context import context_beside

    assert context_beside(torch.device("cpu")) is None


@pytest.mark.skipif(ctypes.util.find_library("cuda") is not None, reason="a CUDA driver is here")
def test_without_a_driver_nothing_is_made_and_nothing_raises() -> None:
    from envaudit.harness.context import make_primary_context

    assert make_primary_context(0) is False
