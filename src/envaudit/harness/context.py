"""The worker's CUDA context, made by the driver on a thread of its own while the worker's main
thread imports what its solution will need (envaudit.harness.preload).

torch makes the context at its first CUDA call and holds the interpreter lock throughout
(0.23-0.36 s on the H200 machine), so nothing else in the process runs meanwhile. The driver's
own calls through ctypes release the lock: a thread that asks the driver for the device's
primary context (the one torch then uses, as every CUDA runtime does) lets the imports run beside
it, and torch's initialisation afterwards takes 0.02 s (benchmarks/context_beside.py; s45 in
docs/lab/audit-throughput.md). Where the driver cannot be loaded or refuses, nothing is made here
and torch's own initialisation makes the context, or says why it cannot.
"""

from __future__ import annotations

import contextlib
import ctypes
import threading

import torch

DRIVER_LIBRARY = "libcuda.so.1"


def make_primary_context(ordinal: int) -> bool:
    """Initialise the driver and retain the primary context of the device at `ordinal` (as
    CUDA_VISIBLE_DEVICES numbers them); whether it was made. The context is kept for the
    process's life, as torch keeps it."""
    try:
        driver = ctypes.CDLL(DRIVER_LIBRARY)
    except OSError:
        return False
    if driver.cuInit(0) != 0:
        return False
    device = ctypes.c_int()
    if driver.cuDeviceGet(ctypes.byref(device), ordinal) != 0:
        return False
    context = ctypes.c_void_p()
    return bool(driver.cuDevicePrimaryCtxRetain(ctypes.byref(context), device) == 0)


def context_beside(device: torch.device) -> threading.Thread | None:
    """Start making `device`'s context on a daemon thread (join it before torch's first CUDA
    call); None for a device that is not a CUDA GPU."""
    if device.type != "cuda":
        return None
    ordinal = device.index if device.index is not None else 0

    def make() -> None:
        with contextlib.suppress(Exception):
            make_primary_context(ordinal)

    thread = threading.Thread(target=make, name="envaudit-context", daemon=True)
    thread.start()
    return thread
