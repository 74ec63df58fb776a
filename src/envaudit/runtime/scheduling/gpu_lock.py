"""One job per GPU on a host: a lock file per GPU UUID, held for the whole of a job on it.

Two audits (or an audit and a `run`) started on one machine would otherwise time their kernels
on the same GPU at once, and both would publish figures of a shared card. The lock is an flock
on $ENVAUDIT_CACHE/gpu-locks/<uuid>.lock: released by the kernel when its holder exits, however
it exits, so a killed audit never leaves a GPU locked. The holder writes its PID and start time
into the file, so a refused job can say who has the GPU.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from envaudit.errors import EXIT_USAGE, EnvauditError
from envaudit.settings import cache_root

WAIT_POLL_S = 2.0


class GpuBusy(EnvauditError):
    def __init__(self, message: str) -> None:
        super().__init__(
            message,
            EXIT_USAGE,
            hint="wait for it to finish (or pass --gpu-wait SECONDS), or choose another --gpu",
        )


def lock_path(uuid: str) -> Path:
    safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in uuid)
    return cache_root() / "gpu-locks" / f"{safe}.lock"


@contextmanager
def holding_gpu(uuid: str, wait_s: float = 0.0) -> Iterator[None]:
    """Hold `uuid`'s lock for the block; GpuBusy (exit 2) when another process holds it for
    longer than `wait_s` seconds."""
    path = lock_path(uuid)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise GpuBusy(f"GPU {uuid} is in use: {_holder(path)}") from None
                time.sleep(WAIT_POLL_S)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} since {time.strftime('%H:%M:%S')}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the flock


def _holder(path: Path) -> str:
    try:
        text = path.read_text().strip()
    except OSError:
        text = ""
    return f"held by {text}" if text else "held by another process"
