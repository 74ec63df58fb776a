"""How a container gets its GPU (runtime/gpu_access.py): NVIDIA's runtime when the engine lists
it, a CDI device when the engine reads CDI specs and one declares nvidia.com/gpu, else device
nodes; `doctor` says which and why. The specs here are real files in the form `nvidia-ctk cdi
generate` writes; the engine check runs against this machine's real engine, which (Docker 20.10,
Debian bookworm's) resolves no CDI device: that refusal is what is tested, with its hint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from envaudit.errors import EnvauditError
from envaudit.runtime.gpu_access import (
    CAPABILITIES,
    CDI,
    DEVICE_NODES,
    NVIDIA_RUNTIME,
    cdi_device,
    choose_gpu_access,
)

UUID = "GPU-00000000-1111-2222-3333-444444444444"


def write_spec(
    folder: Path, name: str, kind: str, devices: list[str], as_json: bool = False
) -> Path:
    """A spec as nvidia-ctk writes one: a device per index and UUID, and `all`."""
    folder.mkdir(parents=True, exist_ok=True)
    spec = {
        "cdiVersion": "0.5.0",
        "kind": kind,
        "devices": [
            {"name": d, "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"}]}}
            for d in devices
        ],
        "containerEdits": {"deviceNodes": [{"path": "/dev/nvidiactl"}]},
    }
    path = folder / (f"{name}.json" if as_json else f"{name}.yaml")
    path.write_text(json.dumps(spec) if as_json else yaml.safe_dump(spec))
    return path


def test_the_nvidia_runtime_comes_first() -> None:
    access = choose_gpu_access({"Runtimes": {"runc": {}, "nvidia": {}}})
    assert access.mode == NVIDIA_RUNTIME and "NVIDIA Container Toolkit" in access.reason
    assert CAPABILITIES == ["gpu", "utility", "compute"]


def test_a_cdi_spec_for_nvidia_gpus_is_used_by_uuid_else_by_index(tmp_path: Path) -> None:
    folder = tmp_path / "cdi"
    write_spec(folder, "other", "vendor.example/fpga", ["0"])
    spec_path = write_spec(folder, "nvidia", "nvidia.com/gpu", ["0", UUID, "all"])
    access = choose_gpu_access({"Runtimes": {"runc": {}}, "CDISpecDirs": [str(folder)]})
    assert access.mode == CDI and str(spec_path) in access.reason
    assert access.spec is not None and access.spec.devices == ("0", UUID, "all")
    assert cdi_device(access.spec, UUID, 0) == f"nvidia.com/gpu={UUID}"
    by_index = write_spec(tmp_path / "idx", "nvidia", "nvidia.com/gpu", ["0", "1"], as_json=True)
    indexed = choose_gpu_access({"CDISpecDirs": [str(by_index.parent)]})
    assert cdi_device(indexed.spec, "GPU-elsewhere", 1) == "nvidia.com/gpu=1"
    with pytest.raises(EnvauditError) as refused:
        cdi_device(indexed.spec, "GPU-elsewhere", 5)
    assert refused.value.exit_code == 2
    assert str(by_index) in str(refused.value) and "declares: 0, 1" in str(refused.value)


def test_device_nodes_are_the_last_resort_and_the_reason_says_why(tmp_path: Path) -> None:
    none = choose_gpu_access({"Runtimes": {"runc": {}}})
    assert none.mode == DEVICE_NODES and "reads no CDI specs" in none.reason
    folder = tmp_path / "cdi"
    write_spec(folder, "other", "vendor.example/fpga", ["0"])
    (folder / "broken.yaml").write_text("kind: [unclosed\n")
    empty = choose_gpu_access({"CDISpecDirs": [str(folder), str(tmp_path / "absent")]})
    assert empty.mode == DEVICE_NODES and "hold no nvidia.com/gpu spec" in empty.reason
    assert len(empty.problems) == 1 and "broken.yaml" in empty.problems[0]
    forced = choose_gpu_access({"Runtimes": {"nvidia": {}}}, "device-nodes")
    assert forced.mode == DEVICE_NODES and "ENVAUDIT_GPU_ACCESS" in forced.reason


def test_an_engine_without_cdi_refuses_a_cdi_device_with_the_hint(tmp_path: Path) -> None:
    """This machine's engine has no CDI: the device request is refused by the engine itself,
    and the message says what to set instead."""
    docker = pytest.importorskip("docker")
    from envaudit.image.engine import Engine, EngineError
    from envaudit.runtime.runtimes.docker import GpuPassing, _start_error

    try:
        engine = Engine.connect()
    except EngineError:
        pytest.skip("no engine answers")
    if engine.info().get("CDISpecDirs"):
        pytest.skip("this engine reads CDI specs: the refusal cannot be shown here")
    images = engine.client.images.list()
    if not images:
        pytest.skip("no image to start")
    request = docker.types.DeviceRequest(driver="cdi", device_ids=[f"nvidia.com/gpu={UUID}"])
    container = engine.client.containers.create(images[0].id, ["true"], device_requests=[request])
    try:
        with pytest.raises(docker.errors.APIError) as refused:
            container.start()  # the engine picks the device driver as it starts it
    finally:
        container.remove(force=True)
    error = _start_error(refused.value, GpuPassing(CDI))
    assert error.exit_code == 2 and "does not resolve CDI devices" in (error.hint or "")
