"""The GPUs of this machine, by UUID, as the NVIDIA driver reports them (nvidia-smi).

Checked before any job starts: a GPU that does not exist here is a usage error (exit 2), never
a solution's RUNTIME_ERROR.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from envaudit.errors import EXIT_USAGE, EnvauditError

SMI_TIMEOUT_S = 60


@dataclass(frozen=True)
class Gpu:
    uuid: str
    name: str
    index: int
    minor: int | None
    driver: str


def _smi(argv: list[str]) -> str | None:
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        done = subprocess.run(
            ["nvidia-smi", *argv], capture_output=True, text=True, timeout=SMI_TIMEOUT_S
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


_LISTED: list[tuple[float, list[Gpu] | None]] = []
LISTING_TTL_S = 60.0


def gpus() -> list[Gpu] | None:
    """Every GPU here, or None when there is no NVIDIA driver to ask. Asked at most once a
    minute: `nvidia-smi -q` takes about a second on a large GPU, and an audit asks per job."""
    if _LISTED and time.monotonic() - _LISTED[0][0] < LISTING_TTL_S:
        return _LISTED[0][1]
    found = _ask_driver()
    _LISTED[:] = [(time.monotonic(), found)]
    return found


def _ask_driver() -> list[Gpu] | None:
    out = _smi(["--query-gpu=uuid,name,index,driver_version", "--format=csv,noheader"])
    if out is None:
        return None
    found = []
    minors = _minor_numbers()
    for line in out.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 4:
            uuid, name, index, driver = parts
            found.append(Gpu(uuid, name, int(index), minors.get(uuid), driver))
    return found


def _minor_numbers() -> dict[str, int]:
    """UUID -> minor number of /dev/nvidiaN (from `nvidia-smi -q`)."""
    out = _smi(["-q"]) or ""
    found: dict[str, int] = {}
    uuid = None
    for line in out.splitlines():
        key, _, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if key == "GPU UUID":
            uuid = value
        elif key == "Minor Number" and uuid and value.isdigit():
            found[uuid] = int(value)
    return found


def require_gpu(uuid: str) -> Gpu:
    """The GPU with this UUID, or an EnvauditError (exit 2) saying which GPUs exist."""
    found = gpus()
    if found is None:
        raise EnvauditError(
            f"--gpu {uuid}: there is no NVIDIA driver on this machine (nvidia-smi is missing or"
            " fails)",
            EXIT_USAGE,
            hint="run on a GPU machine, or use --device cpu",
        )
    for gpu in found:
        if gpu.uuid == uuid:
            return gpu
    listed = ", ".join(f"{g.uuid} ({g.name})" for g in found) or "none"
    raise EnvauditError(
        f"--gpu {uuid}: no such GPU here", EXIT_USAGE, hint=f"GPUs on this machine: {listed}"
    )


def device_nodes(gpu: Gpu) -> list[str]:
    """The device nodes a container needs for this GPU: its own node, control and UVM."""
    nodes = [f"/dev/nvidia{gpu.minor}"] if gpu.minor is not None else []
    nodes += ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]
    return [n for n in nodes if Path(n).exists()]
