"""The environment record carried by every result line.

What ran where: device, GPU identity and state (UUID, driver, clocks, throttle reasons through
NVML when `pynvml` is importable), compute capability, torch/CUDA/Triton versions, and a
fingerprint over every installed distribution's name and version. The full distribution list
is returned separately so a run can store it once rather than on every line.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import torch

from envaudit.harness import HARNESS_VERSION
from envaudit.schema.harness import harness_hash

SitePaths = tuple[tuple[str, int], ...]
_scanned: tuple[SitePaths, dict[str, str]] | None = None


def site_paths() -> SitePaths:
    """Every folder on sys.path with its modification time. Installing, removing or upgrading a
    distribution adds, removes or renames its metadata folder in one of them, which changes it."""
    state = []
    for entry in sys.path:
        try:
            state.append((entry, os.stat(entry or ".").st_mtime_ns))
        except OSError:
            state.append((entry, -1))
    return tuple(state)


def distributions() -> dict[str, str]:
    """name -> version of every installed distribution, sorted by name. The scan is kept while
    no folder on sys.path has changed: the fork server scans once before forking, and each
    worker it forks checks the folders' times (cheap) instead of reading every metadata file
    again (the record of a job on the H200 machine took 0.14-0.26 s)."""
    global _scanned
    paths = site_paths()
    if _scanned is None or _scanned[0] != paths:
        found: dict[str, str] = {}
        for dist in importlib.metadata.distributions():
            name = dist.metadata["Name"]
            if name:
                found[name.lower()] = dist.version
        _scanned = (paths, dict(sorted(found.items())))
    return dict(_scanned[1])


def fingerprint(dists: dict[str, str]) -> str:
    text = "\n".join(f"{name}=={version}" for name, version in dists.items())
    return hashlib.sha256(text.encode()).hexdigest()


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _nvml_state(uuid: str | None) -> dict[str, Any]:
    """Driver, clocks, throttle reasons of the GPU with this UUID, from NVML; empty when NVML
    is unavailable. Looked up by UUID: NVML numbers GPUs ignoring CUDA_VISIBLE_DEVICES."""
    try:
        import pynvml  # type: ignore[import-not-found,import-untyped,unused-ignore]
    except ImportError:
        return {}
    try:
        pynvml.nvmlInit()
        try:
            handle = _nvml_handle(pynvml, uuid)
            return {
                "driver": _text(pynvml.nvmlSystemGetDriverVersion()),
                "gpu_uuid": _text(pynvml.nvmlDeviceGetUUID(handle)),
                "sm_clock_mhz": pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
                "mem_clock_mhz": pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_MEM),
                "max_sm_clock_mhz": pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM),
                "temperature_c": pynvml.nvmlDeviceGetTemperature(
                    handle, pynvml.NVML_TEMPERATURE_GPU
                ),
                "power_w": pynvml.nvmlDeviceGetPowerUsage(handle) / 1000.0,
                "throttle_reasons": _throttle_names(
                    pynvml, pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle)
                ),
            }
        finally:
            pynvml.nvmlShutdown()
    except Exception as exc:  # NVML is optional: record why it gave nothing
        return {"nvml_error": f"{type(exc).__name__}: {exc}"}


def _nvml_handle(pynvml: Any, uuid: str | None) -> Any:
    """The NVML handle of the GPU with this UUID (the first GPU when the UUID is unknown)."""
    return pynvml.nvmlDeviceGetHandleByUUID(uuid) if uuid else pynvml.nvmlDeviceGetHandleByIndex(0)


def _device_uuid(device: torch.device) -> str | None:
    return _format_uuid(getattr(torch.cuda.get_device_properties(device), "uuid", None))


def clock_state(device: torch.device) -> dict[str, Any]:
    """SM clock, temperature, power and throttle reasons now (recorded after each timing)."""
    if device.type != "cuda":
        return {}
    uuid = _device_uuid(device)
    keep = ("sm_clock_mhz", "temperature_c", "power_w", "throttle_reasons", "nvml_error")
    return {k: v for k, v in _nvml_state(uuid).items() if k in keep}


# NVML's clock event reasons that mean the clock is held below what the kernel would get:
# software power cap, hardware slowdown, software and hardware thermal slowdown, power brake.
LIMITING_REASONS = 0x4 | 0x8 | 0x20 | 0x40 | 0x80
NVML_FI_POWER_INSTANT = 186
"""NVML_FI_DEV_POWER_INSTANT: the board's power now, in mW (nvmlDeviceGetPowerUsage averages
over about a second, so it trails a kernel's heat-up by that long)."""
POWER_SAMPLES_KEPT = 8


class SmClock:
    """The SM clock of one GPU, read through NVML many times a second while a warm-up runs (so
    timing starts once the clock has settled). NVML is opened once and kept; `read` gives None
    when NVML or the GPU's handle is unavailable, and then no decision waits on the clock.
    Each read also asks why the clock is where it is, and counts the reads that found it held
    down by a power or thermal limit (`limited_reads`), and reads the board's instantaneous
    power. NVML refreshes these figures only every ~100 ms on the H200 (the clock, the reasons
    and the power all step together; s58 in docs/lab/audit-throughput.md), so a run of equal
    readings says nothing about a kernel that began less than a refresh ago: `power_samples` keeps
    when the power figure last changed and to what (each change is a refresh), so the warm-up can
    tell a fresh figure from a stale one."""

    def __init__(self, device: torch.device) -> None:
        self._nvml: Any = None
        self._handle: Any = None
        self._reasons: Any = None
        self.limited_reads = 0
        self.power_limit_w: float | None = None
        """The enforced board power limit (None: NVML does not say)."""
        self.power_samples: list[tuple[float, float]] = []
        """(perf_counter, watts) at the last POWER_SAMPLES_KEPT refreshes of the power figure."""
        self._last_power_mw: int | None = None
        if device.type != "cuda":
            return
        try:
            import pynvml  # type: ignore[import-not-found,import-untyped,unused-ignore]

            pynvml.nvmlInit()
            self._handle = _nvml_handle(pynvml, _device_uuid(device))
            self._nvml = pynvml
            self._reasons = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or (
                getattr(pynvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None)
            )
        except Exception:
            self._nvml = None
            return
        with contextlib.suppress(Exception):
            self.power_limit_w = pynvml.nvmlDeviceGetEnforcedPowerLimit(self._handle) / 1e3

    def read(self) -> int | None:
        if self._nvml is None:
            return None
        try:
            mhz = int(self._nvml.nvmlDeviceGetClockInfo(self._handle, self._nvml.NVML_CLOCK_SM))
        except Exception:
            return None
        with contextlib.suppress(Exception):
            if self._reasons is not None and int(self._reasons(self._handle)) & LIMITING_REASONS:
                self.limited_reads += 1
        self._read_power()
        return mhz

    def _read_power(self) -> None:
        try:
            field = self._nvml.nvmlDeviceGetFieldValues(self._handle, [NVML_FI_POWER_INSTANT])[0]
            if field.nvmlReturn != 0:
                return
            mw = int(field.value.uiVal)
        except Exception:
            return
        if self._last_power_mw is not None and mw != self._last_power_mw:
            self.power_samples = [*self.power_samples, (time.perf_counter(), mw / 1e3)]
            del self.power_samples[:-POWER_SAMPLES_KEPT]
        self._last_power_mw = mw

    @property
    def reads_power(self) -> bool:
        """Whether the instantaneous power and the limit can both be read."""
        return self._last_power_mw is not None and bool(self.power_limit_w)

    def power_after(self, since: float) -> list[float]:
        """The power figures (W) NVML refreshed after perf_counter time `since`, oldest first."""
        return [w for at, w in self.power_samples if at >= since]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _throttle_names(pynvml: Any, mask: int) -> list[str]:
    names = []
    for attr in dir(pynvml):
        if attr.startswith("nvmlClocksThrottleReason") and attr not in (
            "nvmlClocksThrottleReasonAll",
            "nvmlClocksThrottleReasonNone",
        ):
            bit = getattr(pynvml, attr)
            if isinstance(bit, int) and bit and mask & bit:
                names.append(attr.removeprefix("nvmlClocksThrottleReason"))
    return sorted(names)


def _driver_from_proc() -> str | None:
    try:
        text = Path("/proc/driver/nvidia/version").read_text()
    except OSError:
        return None
    for word in text.split():
        if word.count(".") >= 1 and word.replace(".", "").isdigit():
            return word
    return None


def _format_uuid(raw: Any) -> str | None:
    if raw is None:
        return None
    text = str(raw)
    return text if text.startswith("GPU-") else f"GPU-{text}"


def gpu_record(device: torch.device) -> dict[str, Any]:
    props = torch.cuda.get_device_properties(device)
    uuid = _format_uuid(getattr(props, "uuid", None))
    record: dict[str, Any] = {
        "gpu_name": props.name,
        "gpu_uuid": uuid,
        "compute_capability": f"{props.major}.{props.minor}",
        "sm_count": props.multi_processor_count,
        "memory_bytes": props.total_memory,
        "l2_cache_bytes": getattr(props, "L2_cache_size", None),
        "driver": _driver_from_proc(),
    }
    record.update({k: v for k, v in _nvml_state(uuid).items() if v is not None})
    return record


def environment_record(device: torch.device) -> tuple[dict[str, Any], dict[str, str]]:
    """(record for every line, full distribution list)."""
    dists = distributions()
    record: dict[str, Any] = {
        "device_type": device.type,
        "python": platform.python_version(),
        "platform": f"{sys.platform}-{platform.machine()}",
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "triton": _version("triton"),
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "distributions_fingerprint": fingerprint(dists),
        "distributions_count": len(dists),
        "harness_version": HARNESS_VERSION,
        "harness_hash": harness_hash(),
    }
    if device.type == "cuda":
        record.update(gpu_record(device))
    else:
        record["cpu"] = platform.processor() or platform.machine()
    return record, dists
