"""How a worker's container is granted its GPU, chosen the way users' machines grant one.

Three paths, tried in this order unless ENVAUDIT_GPU_ACCESS names one:

- `nvidia-runtime`: the engine lists NVIDIA's runtime (the NVIDIA Container Toolkit configured
  in daemon.json). The container asks for the GPU by UUID through a device request with the
  capabilities `gpu,utility,compute`, and the toolkit mounts the driver's libraries and tools.
- `cdi`: the engine reads Container Device Interface specs (Docker 25 and later report the
  folders as `CDISpecDirs`) and one of them declares `nvidia.com/gpu` devices (`nvidia-ctk cdi
  generate`). The container asks for `nvidia.com/gpu=<UUID>` (or the GPU's index, where the
  spec names devices by index) and gets exactly the nodes, mounts and variables the spec lists.
- `device-nodes`: the last resort. The GPU's own node, nvidiactl and UVM, with the driver's
  library folder mounted read-only (ENVAUDIT_NVIDIA_DRIVER_DIR).

`doctor` prints the choice and its reason; the docker runtime passes the GPU accordingly.

podman's Docker-compatible API (4.3.1, Debian bookworm's) starts a container whose device
request it cannot honour without a word: a `cdi` request and an NVIDIA one alike leave the
container without the device (tests/runtime/test_cdi_podman.py; its own CLI applies the same
CDI spec). On podman only the device nodes are passed, and forcing another path is refused.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from envaudit.errors import EXIT_USAGE, EnvauditError

NVIDIA_RUNTIME = "nvidia-runtime"
CDI = "cdi"
DEVICE_NODES = "device-nodes"
CDI_GPU_KIND = "nvidia.com/gpu"
CAPABILITIES = ["gpu", "utility", "compute"]
"""What the NVIDIA runtime is asked for: the device (gpu), nvidia-smi and NVML (utility), and
CUDA (compute)."""
SPEC_SUFFIXES = (".json", ".yaml", ".yml")


@dataclass(frozen=True)
class CdiSpec:
    """One CDI spec file's devices of one kind (`nvidia.com/gpu`)."""

    path: Path
    kind: str
    devices: tuple[str, ...]


@dataclass(frozen=True)
class GpuAccess:
    """The path chosen, why, and for CDI the spec that makes it possible."""

    mode: str
    reason: str
    spec: CdiSpec | None = None
    problems: list[str] = field(default_factory=list)
    """Spec files that could not be read (named in doctor, never fatal)."""


def cdi_specs(
    folders: Sequence[str | Path], kind: str = CDI_GPU_KIND
) -> tuple[list[CdiSpec], list[str]]:
    """Every spec of `kind` in the engine's CDI folders (JSON or YAML, as the CDI specification
    allows), and the files that could not be read, each with its reason."""
    found: list[CdiSpec] = []
    problems: list[str] = []
    for folder in folders:
        root = Path(folder)
        if not root.is_dir():
            continue
        for path in sorted(p for p in root.iterdir() if p.suffix in SPEC_SUFFIXES):
            try:
                spec = _load_spec(path)
            except (OSError, ValueError, yaml.YAMLError) as exc:
                problems.append(f"{path}: {exc}"[:300])
                continue
            if spec.get("kind") == kind:
                names = tuple(str(d.get("name")) for d in spec.get("devices") or [] if d)
                found.append(CdiSpec(path, kind, names))
    return found, problems


def _load_spec(path: Path) -> Mapping[str, Any]:
    text = path.read_text(encoding="utf-8")
    data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    if not isinstance(data, dict):
        raise ValueError("not a CDI spec (no mapping at its top)")
    return data


PODMAN_DROPS_REQUESTS = (
    "podman's Docker-compatible API drops device requests (CDI or NVIDIA's) without a word:"
    " the container would start without its GPU"
)


def choose_gpu_access(
    info: Mapping[str, Any], setting: str | None = None, podman: bool = False
) -> GpuAccess:
    """The path for an engine whose `docker info` is `info` (ENVAUDIT_GPU_ACCESS's `setting`
    first), with the reason in words."""
    folders = list(info.get("CDISpecDirs") or [])
    specs, problems = cdi_specs(folders)
    spec = specs[0] if specs else None
    if podman:
        if setting not in (None, "", DEVICE_NODES):
            raise EnvauditError(
                f"ENVAUDIT_GPU_ACCESS={setting} cannot work through podman:"
                f" {PODMAN_DROPS_REQUESTS}",
                EXIT_USAGE,
                hint="set ENVAUDIT_GPU_ACCESS=device-nodes (or leave it unset), or use Docker",
            )
        reason = f"{PODMAN_DROPS_REQUESTS}; the GPU's device nodes"
        return GpuAccess(DEVICE_NODES, reason, spec, problems)
    if setting:
        return GpuAccess(setting, "ENVAUDIT_GPU_ACCESS says so", spec, problems)
    if "nvidia" in (info.get("Runtimes") or {}):
        reason = "the engine lists NVIDIA's runtime (the NVIDIA Container Toolkit)"
        return GpuAccess(NVIDIA_RUNTIME, reason, spec, problems)
    if spec is not None:
        reason = (
            f"the engine reads CDI specs ({', '.join(folders)}) and {spec.path} declares"
            f" {CDI_GPU_KIND} devices ({', '.join(spec.devices) or 'none'})"
        )
        return GpuAccess(CDI, reason, spec, problems)
    if folders:
        why = f"its CDI folders ({', '.join(folders)}) hold no {CDI_GPU_KIND} spec"
    else:
        why = "this engine reads no CDI specs (Docker 25 or later does)"
    reason = f"no NVIDIA runtime in the engine and {why}: the GPU's device nodes, the last resort"
    return GpuAccess(DEVICE_NODES, reason, spec, problems)


def cdi_device(spec: CdiSpec | None, uuid: str, index: int) -> str:
    """The fully qualified CDI name of one GPU (`nvidia.com/gpu=GPU-...`): by UUID where the
    spec names it so, else by its index; exit 2 naming the spec and its devices otherwise."""
    if spec is None:
        raise EnvauditError(
            f"no CDI spec declares {CDI_GPU_KIND} devices for this engine",
            EXIT_USAGE,
            hint="generate one (nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml), or set"
            " ENVAUDIT_GPU_ACCESS to nvidia-runtime or device-nodes",
        )
    for name in (uuid, str(index)):
        if name in spec.devices:
            return f"{spec.kind}={name}"
    raise EnvauditError(
        f"{spec.path} declares no {spec.kind} device {uuid} (nor index {index}); it declares:"
        f" {', '.join(spec.devices) or 'none'}",
        EXIT_USAGE,
        hint="regenerate the spec on this machine (nvidia-ctk cdi generate)",
    )
