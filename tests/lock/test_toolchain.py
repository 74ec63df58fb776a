"""The CUDA toolchain as a build-only closure, for real: uv resolves it apart from the run
closure (so a name may be locked once per role), and a source build sees it in a prefix of its
own as CUDA_HOME, outside the builder venv. A tiny stand-in toolchain wheel (nvidia/cu13/...)
is made here, so no CUDA download is needed."""

from __future__ import annotations

import base64
import hashlib
import json
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from envaudit.lock.files import load_lock
from envaudit.lock.verify import locked_distributions
from envaudit.settings import REQUIRE_ENGINE
from tests.conftest import REPO, engine_missing, skip_unless_ready
from tests.lock.helpers import env_header, envaudit, new_repo, setuptools_pyproject

SETUPTOOLS = "setuptools==80.9.0"

PROBE_SETUP = """import importlib.util, json, os, shutil
from pathlib import Path
from setuptools import setup

home = os.environ.get("CUDA_HOME", "")
seen = {
    "cuda_home": home,
    "venv": os.environ.get("VIRTUAL_ENV", ""),
    "nvcc": shutil.which("nvcc"),
    "cplus_include_path": os.environ.get("CPLUS_INCLUDE_PATH", ""),
    "cudart_link": os.path.islink(os.path.join(home, "lib", "libcudart.so")),
    "six_in_builder": importlib.util.find_spec("six") is not None,
    "ld_library_path": os.environ.get("LD_LIBRARY_PATH", ""),
    "prefix": sorted(os.listdir(os.path.realpath(os.path.join(home, "..", ".."))))
    if os.path.isdir(home)
    else [],
}
Path("src/probe/seen.json").write_text(json.dumps(seen))
setup(packages=["probe"], package_dir={"": "src"}, package_data={"probe": ["seen.json"]})
"""


def fake_toolchain_wheel(folder: Path, version: str) -> Path:
    """A wheel laid out like the CUDA 13 component wheels: everything under nvidia/cu13."""
    dist = f"fake_cuda_toolchain-{version}"
    files = {
        "nvidia/cu13/bin/nvcc": b"#!/bin/sh\necho fake nvcc\n",
        "nvidia/cu13/include/cccl/cuda/std/utility": b"// CCCL stand-in\n",
        "nvidia/cu13/lib/libcudart.so.13": b"not a library\n",
        f"{dist}.dist-info/METADATA": (
            f"Metadata-Version: 2.1\nName: fake-cuda-toolchain\nVersion: {version}\n"
        ).encode(),
        f"{dist}.dist-info/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    rows = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        rows.append(f"{name},sha256={digest},{len(data)}\n")
    rows.append(f"{dist}.dist-info/RECORD,,\n")
    path = folder / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        for name, data in files.items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (0o755 if "/bin/" in name else 0o644) << 16
            wheel.writestr(info, data)
        wheel.writestr(f"{dist}.dist-info/RECORD", "".join(rows))
    return path


@pytest.fixture(scope="module")
def places(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A tmp locks dir, store and find-links folder; commands run from the repository root."""
    root = tmp_path_factory.mktemp("toolchain")
    (root / "wheels").mkdir()
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(REPO)
        patch.setenv("ENVAUDIT_STORE", str(root / "store"))
        for name in ("UV_FIND_LINKS", "PIP_FIND_LINKS"):
            patch.delenv(name, raising=False)
        patch.setenv("ENVAUDIT_FIND_LINKS", str(root / "wheels"))
        yield root


def write_env(places: Path, name: str, body: str) -> Path:
    folder = places / "locks" / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "env.toml").write_text(env_header() + body)
    return folder


def test_toolchain_is_resolved_apart_from_the_run_closure(places: Path) -> None:
    """idna==3.7 in the toolchain beside the run closure's idna 3.10 (one resolution could not
    hold both); the env's constraints still pin what the toolchain pulls in (urllib3)."""
    folder = write_env(
        places,
        "apart",
        'requirements = ["requests==2.32.3"]\n'
        'constraints = ["idna==3.10", "urllib3==2.2.3", "certifi==2024.8.30",'
        ' "charset-normalizer==3.4.0"]\n\n'
        '[cuda]\nversion = "13.0"\nhome = "/opt/cuda"\n'
        'components = ["requests==2.32.3", "idna==3.7"]\n',
    )
    result = envaudit(places, "lock", "apart")
    assert result.exit_code == 0, result.output
    lock = load_lock(folder)
    run = {p.name: p.version for p in lock.runtime_packages()}
    toolchain = {p.name: p.version for p in lock.toolchain_packages()}
    assert run["idna"] == "3.10" and toolchain["idna"] == "3.7"
    assert toolchain["urllib3"] == run["urllib3"] == "2.2.3"
    assert set(toolchain) == set(run)  # every name twice, once per role
    assert [(p.name, p.role) for p in lock.packages] == sorted(
        (p.name, p.role) for p in lock.packages
    )
    assert {(d.name, d.version) for d in locked_distributions(lock)} == set(run.items())
    assert envaudit(places, "lock", "apart", "--check").exit_code == 0
    fetched = envaudit(places, "fetch", "apart")
    assert fetched.exit_code == 0, fetched.output
    assert "idna-3.7-py3-none-any.whl" in fetched.output
    assert "idna-3.10-py3-none-any.whl" in fetched.output


def probe_env(repo: Path, rev: str, toolchain_version: str) -> str:
    return (
        'requirements = ["six==1.17.0"]\n\n'
        '[cuda]\nversion = "13.0"\nhome = "/opt/cuda"\n'
        f'components = ["fake-cuda-toolchain=={toolchain_version}", "six==1.16.0"]\n\n'
        f'[[sources]]\nname = "probe"\ngit = "{repo}"\nrev = "{rev}"\n'
        f'build_requires = ["{SETUPTOOLS}"]\n'
    )


def seen_by_build(places: Path, folder: Path) -> dict[str, object]:
    (source,) = load_lock(folder).sources
    assert source.wheel is not None
    with zipfile.ZipFile(places / "store" / "sha256" / source.wheel.sha256) as wheel:
        seen: dict[str, object] = json.loads(wheel.read("probe/seen.json"))
    return seen


def test_build_sees_the_toolchain_prefix_as_cuda_home(places: Path) -> None:
    fake_toolchain_wheel(places / "wheels", "13.0.0")
    rev = new_repo(
        places / "probe",
        {
            "setup.py": PROBE_SETUP,
            "pyproject.toml": setuptools_pyproject("probe"),
            "src/probe/__init__.py": "",
        },
    )
    folder = write_env(places, "probe", probe_env(places / "probe", rev, "13.0.0"))
    result = envaudit(places, "lock", "probe")
    assert result.exit_code == 0 and "built probe" in result.output, result.output
    lock = load_lock(folder)
    assert {p.name: p.version for p in lock.toolchain_packages()} == {
        "fake-cuda-toolchain": "13.0.0",
        "six": "1.16.0",
    }
    assert {p.name: p.version for p in lock.runtime_packages()} == {"six": "1.17.0"}
    seen = seen_by_build(places, folder)
    home = str(seen["cuda_home"])
    assert home.endswith("/toolchain/nvidia/cu13")
    assert not home.startswith(str(seen["venv"]))  # a prefix of its own, not the builder venv
    assert seen["nvcc"] == f"{home}/bin/nvcc"
    assert str(seen["cplus_include_path"]).split(":")[0] == f"{home}/include/cccl"
    assert seen["cudart_link"] is True
    assert seen["six_in_builder"] is False  # toolchain packages stay out of the builder venv
    assert home not in str(seen["ld_library_path"])


def test_a_new_toolchain_rebuilds_the_wheel(places: Path) -> None:
    """The toolchain is a build input: the same one carries the wheel, another rebuilds it."""
    folder = places / "locks" / "probe"
    same = envaudit(places, "lock", "probe")
    assert same.exit_code == 0 and "carried over" in same.output, same.output
    fake_toolchain_wheel(places / "wheels", "13.0.1")
    (folder / "env.toml").write_text(
        (folder / "env.toml").read_text().replace("==13.0.0", "==13.0.1")
    )
    again = envaudit(places, "lock", "probe")
    assert again.exit_code == 0 and "built probe" in again.output, again.output
    assert {p.version for p in load_lock(folder).toolchain_packages()} == {"13.0.1", "1.16.0"}


def test_a_local_env_gets_the_toolchain_its_image_would_keep() -> None:
    """toolchain_of: the run-time part (build_only_components left out, as in the image); a
    build-only toolchain whole, since a local run may build the env's sources."""
    from envaudit.runtime.runtimes.local import toolchain_of
    from envaudit.schema.locks import seal
    from tests.image.test_dockerfile import sample_lock

    body = sample_lock(sources=[]).model_dump(mode="json", exclude={"closure_hash"})
    assert [n for n, _, _ in toolchain_of(seal(body))] == [
        "nvidia-cuda-nvcc",
        "nvidia-cuda-runtime",
    ]
    body["cuda"]["build_only_components"] = ["nvidia-cuda-runtime"]
    assert [n for n, _, _ in toolchain_of(seal(body))] == ["nvidia-cuda-nvcc"]
    body["cuda"] = {**body["cuda"], "build_only": True, "build_only_components": None}
    assert len(toolchain_of(seal(body))) == 2


@skip_unless_ready(engine_missing(), REQUIRE_ENGINE)
def test_an_image_builds_with_the_whole_toolchain_and_keeps_its_run_time_part(
    places: Path,
) -> None:
    """[cuda] build_only_components, in a real image: the source stage builds the unbuilt source
    with every component in the toolchain prefix, the final image's prefix lacks the left-out
    one and keeps the rest as CUDA_HOME."""
    from typer.testing import CliRunner

    from envaudit.cli import app
    from envaudit.image.build import plan_build
    from envaudit.image.engine import Engine
    from tests.conftest import base_recipe_for
    from tests.lock.helpers import PYTHON

    fake_toolchain_wheel(places / "wheels", "13.0.0")
    repo = places / "probe-split"
    files = {"setup.py": PROBE_SETUP, "pyproject.toml": setuptools_pyproject("probe")}
    rev = new_repo(repo, {**files, "src/probe/__init__.py": ""})
    body = probe_env(repo, rev, "13.0.0").replace(
        'components = ["fake-cuda-toolchain==13.0.0", "six==1.16.0"]\n',
        'components = ["fake-cuda-toolchain==13.0.0", "six==1.16.0"]\n'
        'build_only_components = ["six"]\n',
    )
    write_env(places, "split", body)
    for argv in (("lock", "split", "--no-build"), ("fetch", "split")):
        result = envaudit(places, *argv)
        assert result.exit_code == 0, result.output
    based = CliRunner().invoke(app, ["base", "build", base_recipe_for(PYTHON)])
    assert based.exit_code == 0, based.output
    built = envaudit(places, "build", "--env", "split")
    assert built.exit_code == 0, built.output
    tag = plan_build("split", places / "locks").image.tag
    script = (
        "ls /opt/envaudit/toolchain; echo CUDA_HOME=$CUDA_HOME;"
        ' python -c \'import importlib.resources as r; print(r.files("probe")'
        '.joinpath("seen.json").read_text())\''
    )
    output = Engine.connect().client.containers.run(tag, ["sh", "-c", script], remove=True)
    lines = output.decode().splitlines()
    seen = json.loads(lines[-1])
    assert "six.py" in seen["prefix"] and "nvidia" in seen["prefix"]  # the build saw them all
    assert seen["cuda_home"] == "/opt/cuda"
    final = lines[: lines.index("CUDA_HOME=/opt/cuda")]
    assert "nvidia" in final and "six.py" not in final, final  # the image keeps its run part
