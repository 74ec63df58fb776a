"""The CDI path against a real engine, with a stand-in device: a spec in podman's CDI folder
declares `nvidia.com/gpu=<UUID>` as /dev/null under another name, a driver folder mounted
read-only and a variable. envaudit reads the spec as podman does (runtime/gpu_access.py), and
podman's own CLI gives a container exactly the node, the mount and the variable it names.

podman's Docker-compatible API, which envaudit's podman runtime speaks, drops the same request
without a word (podman 4.3.1, Debian bookworm's): the container starts with no device. So on
podman envaudit passes device nodes and refuses to be forced onto another path. Docker 25 and
later read CDI specs through the API (`CDISpecDirs`); this machine's Docker (20.10) does not:
tests/runtime/test_gpu_access.py has its refusal."""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import pytest

from envaudit import settings
from envaudit.errors import EnvauditError
from envaudit.image.engine import Engine
from envaudit.runtime.gpu_access import (
    CDI,
    DEVICE_NODES,
    NVIDIA_RUNTIME,
    cdi_device,
    cdi_specs,
    choose_gpu_access,
)
from tests.conftest import skip_unless_ready
from tests.runtime.test_podman import _wait_for

UUID = "GPU-00000000-0000-0000-0000-5ad0c0ffee00"
SPEC_FOLDER = Path("/var/run/cdi")  # one of the two folders podman reads specs from
IMAGE = "localhost/envaudit-test/cdi-shell:1"
LIMITS = ["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=4096:4096"]  # test_podman.py: why
PROBE = (
    "[ -c /dev/nvidia-standin ] && echo node;"
    " read line < /usr/local/nvidia/lib64/libstandin.so && echo $line;"
    " echo variable=$CDI_STANDIN"
)


def _why_skip() -> str | None:
    if shutil.which("podman") is None:
        return "podman is not installed"
    if os.geteuid() != 0:
        return f"writing a CDI spec to {SPEC_FOLDER} needs root"
    return None


REASON = _why_skip()
pytestmark = skip_unless_ready(REASON, settings.REQUIRE_PODMAN)


def _podman(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["podman", *argv], capture_output=True, text=True, timeout=120, check=check
    )


@pytest.fixture(scope="module")
def shell_image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The smallest image that runs the probe: dash and the C library it loads."""
    root = tmp_path_factory.mktemp("cdi-image")
    dash = Path(shutil.which("dash") or "/bin/dash").resolve()
    listed = subprocess.run(["ldd", str(dash)], capture_output=True, text=True, check=True)
    needed = [Path(w) for line in listed.stdout.splitlines() for w in line.split() if w[0] == "/"]
    with tarfile.open(root / "rootfs.tar", "w") as tar:
        tar.add(dash, arcname="bin/sh")
        for library in needed:
            tar.add(library.resolve(), arcname=str(library).lstrip("/"))
    _podman("import", str(root / "rootfs.tar"), IMAGE)
    yield IMAGE
    _podman("rmi", "--force", IMAGE, check=False)


@pytest.fixture(scope="module")
def standin_spec(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A spec of kind nvidia.com/gpu naming one GPU by UUID: /dev/null as its node, a driver
    folder with one file, one variable for the whole kind."""
    driver = tmp_path_factory.mktemp("cdi-driver")
    (driver / "lib64").mkdir()
    (driver / "lib64" / "libstandin.so").write_text("stand-in driver library\n")
    SPEC_FOLDER.mkdir(parents=True, exist_ok=True)
    spec = SPEC_FOLDER / f"envaudit-test-{os.getpid()}.yaml"
    spec.write_text(
        'cdiVersion: "0.5.0"\n'
        "kind: nvidia.com/gpu\n"
        "devices:\n"
        f"  - name: {UUID}\n"
        "    containerEdits:\n"
        "      deviceNodes:\n"
        "        - path: /dev/nvidia-standin\n"
        "          hostPath: /dev/null\n"
        "      mounts:\n"
        f"        - hostPath: {driver}\n"
        "          containerPath: /usr/local/nvidia\n"
        "          options: [ro, nosuid, nodev, bind]\n"
        "containerEdits:\n"
        "  env:\n"
        "    - CDI_STANDIN=1\n"
    )
    yield spec
    spec.unlink(missing_ok=True)


def test_the_spec_envaudit_reads_gives_a_podman_container_exactly_its_device(
    shell_image: str, standin_spec: Path
) -> None:
    specs, problems = cdi_specs([SPEC_FOLDER])
    [spec] = [s for s in specs if s.path == standin_spec]
    assert problems == [] and spec.devices == (UUID,)
    name = cdi_device(spec, UUID, 0)
    assert name == f"nvidia.com/gpu={UUID}"
    granted = _podman(
        "run",
        "--rm",
        "--network",
        "none",
        *LIMITS,
        "--device",
        name,
        shell_image,
        "/bin/sh",
        "-c",
        PROBE,
    )
    assert granted.stdout.split() == ["node", "stand-in", "driver", "library", "variable=1"]
    plain = _podman(
        "run",
        "--rm",
        "--network",
        "none",
        *LIMITS,
        shell_image,
        "/bin/sh",
        "-c",
        PROBE,
        check=False,
    )
    assert "node" not in plain.stdout.split() and "variable=" in plain.stdout


def test_podmans_api_drops_the_request_so_envaudit_passes_device_nodes(
    shell_image: str, standin_spec: Path, tmp_path: Path
) -> None:
    pytest.importorskip("docker")
    from docker.types import DeviceRequest, Ulimit

    socket = tmp_path / "podman.sock"
    service = subprocess.Popen(
        ["podman", "system", "service", "--time=0", f"unix://{socket}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        address = f"unix://{socket}"
        _wait_for(address)
        with mock.patch.dict(os.environ, {"CONTAINER_HOST": address}):
            engine = Engine.connect("podman")
        client = engine.client
        limits = [
            Ulimit(name="nofile", soft=1024, hard=1024),
            Ulimit(name="nproc", soft=4096, hard=4096),
        ]
        request = DeviceRequest(driver="cdi", device_ids=[f"nvidia.com/gpu={UUID}"])
        out = client.containers.run(
            shell_image,
            ["/bin/sh", "-c", PROBE],
            remove=True,
            network_mode="none",
            ulimits=limits,
            device_requests=[request],
        )
        assert out.decode().split() == ["variable="], "podman's API now honours CDI requests"
        assert engine.podman
        chosen = choose_gpu_access(engine.info(), None, engine.podman)
        assert chosen.mode == DEVICE_NODES and "drops device requests" in chosen.reason
        for forced in (CDI, NVIDIA_RUNTIME):
            with pytest.raises(EnvauditError) as refused:
                choose_gpu_access(engine.info(), forced, engine.podman)
            assert refused.value.exit_code == 2 and "device-nodes" in (refused.value.hint or "")
    finally:
        service.terminate()
        service.wait(timeout=30)
