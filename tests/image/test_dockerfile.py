"""Rendering a Dockerfile is a pure function of the lock: golden files, and the properties
that make a build hermetic and its layers shareable."""

from __future__ import annotations

import hashlib
from pathlib import Path

from typer.testing import CliRunner

from envaudit.cli import app
from envaudit.image.context import planned_files
from envaudit.image.dockerfile import render_dockerfile
from envaudit.image.plan import ImagePlan, plan_image
from envaudit.schema.locks import Lock, seal
from envaudit.settings import UPDATE_GOLDEN, value
from tests.conftest import REPO
from tests.schema.test_locks import lock_body

GOLDEN = Path(__file__).parent / "golden"
UPDATE = value(UPDATE_GOLDEN)


def _package(name: str, version: str, role: str = "runtime", size: int = 1000) -> dict:
    digest = hashlib.sha256(f"{name} {version} {role}".encode()).hexdigest()
    filename = f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
    return {
        "name": name,
        "version": version,
        "index": "default",
        "role": role,
        "artifact": {"filename": filename, "size": size, "sha256": digest},
    }


def sample_lock(extra: list[dict] | None = None, sources: list[dict] | None = None) -> Lock:
    """A lock with every part a renderer meets: the torch stack, other packages, a CUDA
    toolchain, an unbuilt git source with a submodule and build_env."""
    packages = [
        _package("torch", "2.11.0"),
        _package("triton", "3.6.0"),
        _package("nvidia-cublas", "13.1.0.3"),
        _package("numpy", "2.5.2"),
        _package("safetensors", "0.8.0"),
        _package("nvidia-cuda-nvcc", "13.3.73", "cuda"),
        _package("nvidia-cuda-runtime", "13.3.29", "cuda"),
        *(extra or []),
    ]
    source = {
        "name": "flash-mla",
        "kind": "git",
        "rev": "9241ae3ef9bac614dd25e45e507e089f888280e0",
        "submodules": {"csrc/cutlass": "147f5673d0c1c3dcf66f78d677fd647e4a020219"},
        "build_requires": [_package("setuptools", "81.0.0", "build")],
        "build_env": {"FLASH_MLA_SKIP_REG_SPILL_CHECK": "1", "FLASH_MLA_DISABLE_SM100": "1"},
        "cuda_arch_list": ["9.0a"],
    }
    return seal(
        lock_body(
            packages,
            env="sample",
            spec_sha256="a" * 64,
            base={"recipe": "noble-minbase", "recipe_sha256": "b" * 64},
            sources=sources if sources is not None else [source],
            env_vars={"OMP_NUM_THREADS": "2"},
        )
    )


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.read_text() == text, f"{path} differs (ENVAUDIT_UPDATE_GOLDEN=1 rewrites it)"


def test_sample_lock_renders_its_golden_dockerfile() -> None:
    check_golden("sample.Dockerfile", render_dockerfile(plan_image(sample_lock())))


def test_shipped_torch_cpu_lock_renders_its_golden_dockerfile() -> None:
    from envaudit.lock.files import load_lock

    lock = load_lock(REPO / "locks" / "torch-cpu")
    check_golden("torch-cpu.Dockerfile", render_dockerfile(plan_image(lock)))


def test_rendering_is_deterministic_and_installs_only_by_hash() -> None:
    plan = plan_image(sample_lock())
    text = render_dockerfile(plan)
    assert text == render_dockerfile(plan_image(sample_lock()))
    for line in text.splitlines():
        if " install " in line:
            assert "--no-index" in line
    assert "--require-hashes" in text
    for layer in plan.all_layers():
        for name, version, artifact in layer.packages:
            assert f"{name}=={version} --hash=sha256:{artifact.sha256}" in layer.requirements()
    assert "http://" not in text and "https://" not in text


def test_layers_put_the_torch_stack_first_and_the_toolchain_apart() -> None:
    plan = plan_image(sample_lock())
    names = [[p[0] for p in layer.packages] for layer in plan.layers]
    assert names[0] == ["torch", "triton", "nvidia-cublas"]
    assert names[1] == ["numpy", "safetensors"]
    assert plan.toolchain is not None
    assert [p[0] for p in plan.toolchain.packages] == ["nvidia-cuda-nvcc", "nvidia-cuda-runtime"]


def test_envs_sharing_the_torch_stack_share_the_first_final_steps() -> None:
    """Two locks that differ only outside the torch stack render the same FROM and first COPY
    of their final stage, and the same stage that produces it: Docker reuses that layer."""
    one = render_dockerfile(plan_image(sample_lock()))
    two = render_dockerfile(plan_image(sample_lock(extra=[_package("einops", "0.8.2")])))

    def stack_stage(text: str) -> str:
        start = text.index("FROM installer AS layer-torch-stack")
        return text[start : text.index("\n\n", start)]

    def final_head(text: str) -> list[str]:
        return text[text.index("# the environment") :].splitlines()[1:3]

    assert one != two
    assert stack_stage(one) == stack_stage(two)
    assert final_head(one) == final_head(two)


def test_unbuilt_source_gets_a_build_stage_with_its_pins() -> None:
    text = render_dockerfile(plan_image(sample_lock()))
    assert "FROM installer AS build-flash-mla" in text
    assert "9241ae3ef9bac614dd25e45e507e089f888280e0" in text
    assert "csrc/cutlass at 147f5673d0c1c3dcf66f78d677fd647e4a020219" in text
    assert 'FLASH_MLA_SKIP_REG_SPILL_CHECK="1"' in text
    assert 'TORCH_CUDA_ARCH_LIST="9.0a"' in text and 'CUDA_HOME="/opt/cuda"' in text


def test_the_flashmla_image_builds_its_source_and_leaves_the_toolchain_out() -> None:
    """flashmla-13.3 builds FlashMLA in its image (built_in = "image") with a build-only
    toolchain: a build stage compiles it with nvcc as CUDA_HOME, and the final image installs
    the wheel that stage made, with neither nvcc nor CUDA_HOME in it."""
    result = CliRunner().invoke(
        app,
        ["build", "--solution", "flashmla-13.3", "--dry-run", "--locks-dir", str(REPO / "locks")],
    )
    assert result.exit_code == 0, result.output
    dockerfile = result.output.split("# ---- staged build context")[0]
    build, final = dockerfile.split("# the environment flashmla-13.3")
    assert "FROM layer-torch-stack AS build-flash-mla" in build and "nvidia-cuda-nvcc" in build
    assert 'CUDA_HOME="/opt/cuda"' in build and "COPY --from=cuda-toolchain" in build
    assert "COPY --from=layer-built-flash-mla" in final
    assert "nvidia-cuda-nvcc" not in final and "CUDA_HOME" not in final
    assert "cuda-toolchain" not in final


def test_a_build_only_toolchain_builds_the_sources_and_stays_out_of_the_image() -> None:
    body = sample_lock().model_dump(mode="json", exclude={"closure_hash"})
    body["cuda"]["build_only"] = True
    text = render_dockerfile(plan_image(seal(body)))
    build, final = text.split("# the environment sample")
    assert "FROM installer AS cuda-toolchain" in build
    assert "COPY --from=cuda-toolchain" in build and 'CUDA_HOME="/opt/cuda"' in build
    assert "cuda-toolchain" not in final and "CUDA_HOME" not in final


def test_build_only_components_stay_in_the_source_stages_only() -> None:
    """cuda.build_only_components: the source stages build with the whole toolchain, the final
    image copies a stage holding the rest, with CUDA_HOME; without an unbuilt source that stage
    is the only one."""
    body = sample_lock().model_dump(mode="json", exclude={"closure_hash"})
    body["cuda"]["build_only_components"] = ["nvidia-cuda-runtime"]
    plan = plan_image(seal(body))
    assert plan.toolchain is not None and plan.run_toolchain is not None
    assert [n for n, _, _ in plan.toolchain.packages] == ["nvidia-cuda-nvcc", "nvidia-cuda-runtime"]
    assert [n for n, _, _ in plan.run_toolchain.packages] == ["nvidia-cuda-nvcc"]
    text = render_dockerfile(plan)
    build, final = text.split("# the environment sample")
    assert "FROM installer AS cuda-toolchain" in build
    assert "FROM installer AS cuda-run-toolchain" in build
    stage = build.split("FROM installer AS cuda-run-toolchain")[1].split("FROM ")[0]
    assert "wheels/cuda-run-toolchain/" in stage and "nvidia-cuda-runtime" not in stage
    assert "COPY --from=cuda-toolchain" in build.split("AS build-flash-mla")[1]
    assert "COPY --from=cuda-run-toolchain" in final and 'CUDA_HOME="/opt/cuda"' in final
    assert "COPY --from=cuda-toolchain " not in final
    staged = {folder for folder, _ in plan.staged_artifacts()}
    assert "wheels/cuda-toolchain" in staged and "wheels/cuda-run-toolchain" not in staged
    nvcc = next(a for n, _, a in plan.toolchain.packages if n == "nvidia-cuda-nvcc")
    assert plan.run_toolchain.borrowed == ((nvcc.sha256, f"wheels/cuda-toolchain/{nvcc.filename}"),)
    assert f"COPY wheels/cuda-toolchain/{nvcc.filename}" in stage

    built = seal({**body, "sources": []})
    plan = plan_image(built)
    assert plan.run_toolchain is None and plan.toolchain is not None
    assert [n for n, _, _ in plan.toolchain.packages] == ["nvidia-cuda-nvcc"]
    assert "COPY --from=cuda-toolchain" in render_dockerfile(plan).split("# the environment")[1]


def test_the_deepgemm_image_keeps_only_what_its_jit_runs() -> None:
    """deepgemm-2.6.1: deep_gemm's wheel is built; the image's toolchain is nvcc, NVVM, crt, the
    runtime headers and CCCL, without the cuBLAS/cuSPARSE/cuSOLVER/cuRAND/NVRTC components that
    only built deep_gemm._C."""
    result = CliRunner().invoke(
        app,
        ["build", "--solution", "deepgemm-2.6.1", "--dry-run", "--locks-dir", str(REPO / "locks")],
    )
    assert result.exit_code == 0, result.output
    final = result.output.split("# the environment deepgemm-2.6.1")[1]
    assert "COPY --from=cuda-toolchain" in final and 'CUDA_HOME="/opt/cuda"' in final
    stage = result.output.split("# the CUDA toolchain (")[1].split("\n")[0]
    assert result.output.count("# the CUDA toolchain (") == 1
    for kept in ("nvidia-cuda-nvcc", "nvidia-nvvm", "nvidia-cuda-crt", "nvidia-cuda-cccl"):
        assert kept in stage, kept
    for left in ("cublas", "cusparse", "cusolver", "curand", "nvrtc"):
        assert left not in stage, left


def _flashmla_over_trixie() -> ImagePlan:
    from envaudit.lock.files import load_lock

    return plan_image(load_lock(REPO / "locks" / "flashmla-13.3", "trixie-devbase"))


def test_the_flashmla_image_over_its_substitute_renders_its_golden_dockerfile() -> None:
    check_golden(
        "flashmla-13.3-over-trixie-devbase.Dockerfile", render_dockerfile(_flashmla_over_trixie())
    )


def test_a_build_stage_starts_from_the_run_layer_its_requirements_hold_whole() -> None:
    """FlashMLA's build requirements hold the torch stack's exact wheels: its build stage starts
    from that layer's stage and installs only the 15 others, so torch is installed once."""
    plan = _flashmla_over_trixie()
    [source] = plan.sources
    stack = next(layer for layer in plan.layers if layer.name == "torch-stack")
    assert source.from_layer == "torch-stack"
    names = {n for n, _, _ in source.build_requires.packages}
    assert "torch" not in names and {"ninja", "wheel", "setuptools"} <= names
    assert not names & {n for n, _, _ in stack.packages}
    text = render_dockerfile(plan)
    stage = text.split("FROM layer-torch-stack AS build-flash-mla")[1].split("\n\n")[0]
    assert "python3 -m venv" not in stage and "-r /tmp/build-requires/requirements.txt" in stage


def test_a_build_stage_whose_requirements_lack_a_layer_wheel_starts_from_the_installer() -> None:
    """A run layer with a wheel the build does not require would put it in the build's venv:
    the stage then starts from the installer, as before."""
    plan = plan_image(sample_lock())
    [source] = plan.sources
    assert source.from_layer is None
    assert "FROM installer AS build-flash-mla" in render_dockerfile(plan)


def test_each_wheel_is_staged_once_and_copied_by_name_into_every_stage_that_installs_it() -> None:
    """The torch stack's cuBLAS, cuRAND, cuSOLVER, cuSPARSE and nvJitLink are also toolchain
    wheels, and the build's requirements repeat the packages layer: the context holds each
    file once, in the first layer's folder, and the later stages copy it from there."""
    plan = _flashmla_over_trixie()
    staged = [a.sha256 for _, a in plan.staged_artifacts()]
    assert len(staged) == len(set(staged))
    every = {a.sha256 for layer in plan.all_layers() for _, _, a in layer.packages}
    assert set(staged) == every
    assert plan.toolchain is not None
    assert {path.split("/")[1] for _, path in plan.toolchain.borrowed} == {"torch-stack"}
    text = render_dockerfile(plan)
    for layer in plan.all_layers():
        for _, path in layer.borrowed:
            assert path in text
    files = [f.path for f in planned_files(plan) if f.path.endswith(".whl")]
    assert len(files) == len(every)
