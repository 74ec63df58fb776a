"""A cuda solution in FlashInfer-Bench's published form (a kernel in `kernel.cu`, the pybind
module in `main.cpp`, the torch binding) compiled in its job, in the environment it is run in.

On the CPU: the local environment of torch-2.11-cu130-nvcc (torch's CUDA 13.0 build, nvcc 13.0.88
from the lock's toolchain wheels as CUDA_HOME, ninja) compiles it for sm_90a with no GPU in sight
(TORCH_CUDA_ARCH_LIST=9.0a), and the cubin in the `.so` says so. The solution's CPU branch lets
the CPU run judge it, so the line carries the build record beside a PASSED status. On the GPU
(`-m gpu`), the kernel itself runs.

A TVM-FFI solution (FlashInfer-Bench's default binding) is built
the same way with TVM-FFI's builder.

The environment is about 6 GB: it is made in the machine's own store and cache (content
addressed, so shared safely with other runs); each test session's sources carry a nonce, so the
first build is cold, and the module folders it makes are removed afterwards."""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envaudit.cli import app
from envaudit.lock.files import load_lock
from envaudit.runtime.jit import jit_cache_folder
from envaudit.runtime.runtimes.local import environment_root, uv_binary
from envaudit.settings import REQUIRE_CUDA_BUILD, value
from tests.conftest import UUID_BLOB, UUID_RANDOM, write_toy_root

REPO = Path(__file__).resolve().parents[2]
ENV = "torch-2.11-cu130-nvcc"
LOCK = load_lock(REPO / "locks" / ENV)

KERNEL_CU = """
#include <cuda_runtime.h>

// toy_scale: the first lengths[b] rows of x[b] times scale, the rest zero.
__global__ void scale_rows(const float* x, const int* lengths, float scale, float* out,
                           long S, long D, long total) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i >= total) return;
  long b = i / (S * D), s = (i / D) % S;
  out[i] = s < lengths[b] ? x[i] * scale : 0.0f;
}

void launch_scale_rows(const float* x, const int* lengths, float scale, float* out, long S,
                       long D, long total, cudaStream_t stream) {
  const int threads = 256;
  long blocks = (total + threads - 1) / threads;
  if (blocks > 0) scale_rows<<<blocks, threads, 0, stream>>>(x, lengths, scale, out, S, D, total);
}
"""

MAIN_CPP = """
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cuda_runtime.h>

void launch_scale_rows(const float* x, const int* lengths, float scale, float* out, long S,
                       long D, long total, cudaStream_t stream);

torch::Tensor run(torch::Tensor x, torch::Tensor lengths, double scale) {
  if (!x.is_cuda()) {  // the CPU branch: what a machine without a GPU can judge
    auto rows = torch::arange(x.size(1), x.options().dtype(torch::kLong));
    auto mask = rows.unsqueeze(0) < lengths.to(torch::kLong).unsqueeze(1);
    return torch::where(mask.unsqueeze(-1), x * scale, torch::zeros({}, x.options()));
  }
  auto xc = x.contiguous();
  auto lc = lengths.to(torch::kInt).contiguous();
  auto out = torch::empty_like(xc);
  launch_scale_rows(xc.data_ptr<float>(), lc.data_ptr<int>(), (float)scale,
                    out.data_ptr<float>(), xc.size(1), xc.size(2), xc.numel(),
                    at::cuda::getCurrentCUDAStream());
  return out;
}

// fib_scale (the FlashInfer-Bench root of three_languages_audit): x times scale. One module
// serves both definitions, so the session compiles it once (pybind picks by the arguments).
torch::Tensor run_unmasked(torch::Tensor x, double scale) { return x * scale; }

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("run", &run);
  m.def("run", &run_unmasked);
}
"""

# nvcc stops at once on a header that is nowhere, saying so
BROKEN_CU = '#include "no_such_header_anywhere.h"\n' + KERNEL_CU

# FlashInfer-Bench's TVM-FFI form (its default binding): one .cu exporting a destination-passing
# function; no torch header, so it compiles in seconds
TVM_FFI_CU = (
    KERNEL_CU
    + """
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/function.h>
#include <cstdint>

void run(tvm::ffi::TensorView x, tvm::ffi::TensorView lengths, double scale,
         tvm::ffi::TensorView out) {
  const long S = x.size(1), D = x.size(2), total = x.numel();
  const float* xs = static_cast<const float*>(x.data_ptr());
  const int* valid = static_cast<const int*>(lengths.data_ptr());
  float* outs = static_cast<float*>(out.data_ptr());
  if (x.device().device_type == kDLCPU) {  // the CPU branch
    for (long i = 0; i < total; ++i) outs[i] = (i / D) % S < valid[i / (S * D)] ? xs[i] * scale : 0;
    return;
  }
  launch_scale_rows(xs, valid, (float)scale, outs, S, D, total, 0);
}

TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, run);
"""
)


def python_found(version: str) -> bool:
    done = subprocess.run(
        [uv_binary(), "python", "find", "--system", version], capture_output=True, check=False
    )
    return done.returncode == 0


def write_cuda_solution(
    folder: Path, name: str, sources: dict[str, str], targets: list, binding: str | None = "torch"
) -> None:
    """A solution as FlashInfer-Bench publishes one: no env, sources inline; binding None is
    its default, TVM-FFI (destination-passing)."""
    folder.mkdir(parents=True)
    entry = "main.cpp::run" if "main.cpp" in sources else "kernel.cu::run"
    spec = {
        "language": "cuda",
        "target_hardware": targets,
        "entry_point": entry,
        "destination_passing_style": binding is None,
    }
    if binding is not None:
        spec["binding"] = binding
    solution = {
        "name": name,
        "definition": "toy_scale",
        "author": "tests",
        "spec": spec,
        "sources": [{"path": p, "content": c} for p, c in sources.items()],
    }
    (folder / "solution.json").write_text(json.dumps(solution))


def run_lines(base: Path, name: str, report: Path, device: list[str], env: dict) -> list[dict]:
    argv = ["run", "--solution", name, *device, "--data-root", str(base / "data")]
    argv += ["--solutions-root", str(base / "solutions"), "--report", str(report)]
    argv += ["--timeout", "900"]
    result = CliRunner().invoke(app, argv, env=env)
    assert report.is_file(), result.output
    return [json.loads(x) for x in report.read_text().splitlines()]


def three_languages_audit(root: Path, cuda_sources: dict[str, str], env: dict) -> list[dict]:
    """A root written with FlashInfer-Bench's own API holding a python, a triton and a cuda
    (torch binding) solution, none naming an env: one `audit --definition`, envs.toml's default
    env (this lock) for all three."""
    from flashinfer_bench.data import BuildSpec, Solution, SourceFile

    from tests.dataset.test_env_map import TRITON_MAIN, fib_native
    from tests.dataset.test_solution_layouts import DEFINITION, fib_solution, write_nested_root

    spec = BuildSpec(
        language="cuda",
        target_hardware=["cpu", "cuda"],
        entry_point="main.cpp::run",
        destination_passing_style=False,
        binding="torch",
        dependencies=["torch", "CUDA >= 13.0"],
    )
    sources = [SourceFile(path=p, content=c) for p, c in cuda_sources.items()]
    cuda = Solution(
        name="fib-cuda", definition=DEFINITION, author="fib", spec=spec, sources=sources
    )
    triton = fib_native("fib-triton", "triton", "main.py", TRITON_MAIN, ["cuda"])
    write_nested_root(root, fib_solution("fib-python"), triton, cuda)
    (root / "envs.toml").write_text(f'default = "{ENV}"\n')
    out = root.parent / "audit"
    argv = ["audit", "--definition", DEFINITION, "--data-root", str(root), "--suite", "all"]
    argv += ["--runtime", "local", "--device", "cpu", "--out", str(out)]
    result = CliRunner().invoke(app, argv, env=env)
    assert (out / "results.jsonl").is_file(), result.output
    return [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]


def extensions_folder() -> Path:
    return jit_cache_folder(LOCK.env, LOCK.closure_hash) / "torch-extensions"


@pytest.fixture(scope="module")
def cpu_runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, list[dict]]]:
    if not python_found(LOCK.python):
        if value(REQUIRE_CUDA_BUILD):
            pytest.fail(f"Python {LOCK.python} is not found (uv python find --system)")
        pytest.skip(f"the local environment of {ENV} needs Python {LOCK.python}")
    base = tmp_path_factory.mktemp("native-cuda")
    write_toy_root(base / "data")
    nonce = f"// {uuid.uuid4()}\n"  # a cold build in every session
    ok = {"kernel.cu": nonce + KERNEL_CU, "main.cpp": MAIN_CPP}
    write_cuda_solution(base / "solutions/fib_cuda", "fib_cuda", ok, [])
    broken = {"kernel.cu": nonce + BROKEN_CU}
    write_cuda_solution(base / "solutions/fib_cuda_broken", "fib_cuda_broken", broken, [])
    tvm_ffi = {"kernel.cu": nonce + TVM_FFI_CU}
    write_cuda_solution(base / "solutions/fib_tvm_ffi", "fib_tvm_ffi", tvm_ffi, [], None)
    device = ["--device", "cpu", "--runtime", "local", "--env", ENV]
    # Disk: a 6 GB environment this module made is removed when it ends, and uv keeps no second
    # copy of it in its cache (the wheels come from the store either way).
    made_here = not environment_root(LOCK).exists()
    env = {"TORCH_CUDA_ARCH_LIST": "9.0a", "UV_NO_CACHE": "1"}
    fetched = CliRunner().invoke(app, ["fetch", ENV, "--locks-dir", str(REPO / "locks")])
    assert fetched.exit_code == 0, fetched.output
    lines = {
        "first": run_lines(base, "fib_cuda", base / "first.jsonl", device, env),
        "again": run_lines(base, "fib_cuda", base / "again.jsonl", device, env),
        "broken": run_lines(base, "fib_cuda_broken", base / "broken.jsonl", device, env),
        "tvm_ffi": run_lines(base, "fib_tvm_ffi", base / "tvm_ffi.jsonl", device, env),
        "audit": three_languages_audit(base / "fib", ok, env),
    }
    yield lines
    if made_here:
        shutil.rmtree(environment_root(LOCK), ignore_errors=True)
    for line in (lines["first"][0], lines["broken"][0], lines["tvm_ffi"][0]):
        module = (line.get("build") or {}).get("module")
        if module:
            shutil.rmtree(extensions_folder() / module, ignore_errors=True)
    for folder in extensions_folder().glob("envaudit_*"):  # the broken build's (no module)
        kernel = folder / "src" / "kernel.cu"
        if kernel.is_file() and kernel.read_text().startswith(nonce):
            shutil.rmtree(folder, ignore_errors=True)


def test_a_cuda_solution_is_compiled_for_sm90a_without_a_gpu(cpu_runs: dict) -> None:
    first = cpu_runs["first"]
    assert [ln["status"] for ln in first] == ["PASSED", "PASSED"], first[0].get("message")
    assert {ln["workload"]["uuid"] for ln in first} == {UUID_BLOB, UUID_RANDOM}
    built = first[0]["build"]
    assert built["arch"] == "sm90a" and built["module"].endswith("_sm90a")
    assert built["cached"] is False and built["seconds"] > 0
    # the lock's nvcc (the toolchain prefix as CUDA_HOME), for sm_90a only
    assert "toolchain/nvidia/cu13/bin/nvcc" in built["log"]
    assert "-gencode=arch=compute_90a,code=sm_90a" in built["log"]
    context = first[0]["context"]
    assert context["env"] == ENV and context["closure_hash"] == LOCK.closure_hash
    assert first[0]["environment"]["torch"] == "2.11.0+cu130"


def test_the_module_holds_sm90a_code_and_is_reused(cpu_runs: dict) -> None:
    module = cpu_runs["first"][0]["build"]["module"]
    library = extensions_folder() / module / f"{module}.so"
    data = library.read_bytes()
    # ptxas records its options in the cubin it embeds: code for sm_90a, and for nothing else
    assert b"-arch sm_90a" in data and b"-arch sm_100" not in data
    again = cpu_runs["again"]
    assert [ln["status"] for ln in again] == ["PASSED", "PASSED"]
    assert again[0]["build"]["cached"] is True and again[0]["build"]["module"] == module


def test_a_broken_cuda_source_is_a_compile_error_with_nvccs_message(cpu_runs: dict) -> None:
    broken = cpu_runs["broken"]
    assert [ln["status"] for ln in broken] == ["COMPILE_ERROR", "COMPILE_ERROR"]
    message = broken[0]["message"]
    assert "building kernel.cu failed" in message
    assert "no_such_header_anywhere.h" in message and "nvcc" in message


def test_a_root_of_three_languages_is_audited_in_one_command(cpu_runs: dict) -> None:
    """On the CPU the Triton one targets only GPUs (UNSUPPORTED_DEVICE, never imported); the
    cuda one is compiled for sm_90a in the lock's environment (the module test_native's runs
    built: the same sources) and judged on its CPU branch."""
    lines = cpu_runs["audit"]
    statuses = {(ln["solution"], ln["workload"]["uuid"]): ln["status"] for ln in lines}
    assert len(statuses) == 6
    for (solution, _), status in statuses.items():
        assert status == ("UNSUPPORTED_DEVICE" if solution == "fib-triton" else "PASSED")
    assert {ln["context"]["env"] for ln in lines} == {ENV}
    assert {ln["context"]["env_assigned"] for ln in lines} == {"envs.toml default"}
    built = [ln["build"] for ln in lines if ln["solution"] == "fib-cuda" and "build" in ln]
    assert built and built[0]["arch"] == "sm90a"


def test_a_tvm_ffi_cuda_solution_is_compiled_for_sm90a_too(cpu_runs: dict) -> None:
    lines = cpu_runs["tvm_ffi"]
    assert [ln["status"] for ln in lines] == ["PASSED", "PASSED"], lines[0].get("message")
    built = lines[0]["build"]
    assert built["arch"] == "sm90a" and built["module"].endswith("_sm90a_tvmffi")
    library = extensions_folder() / built["module"] / f"{built['module']}.so"
    assert b"-arch sm_90a" in library.read_bytes()


@pytest.mark.gpu
def test_a_cuda_solution_is_compiled_for_the_gpu_and_passes(tmp_path: Path) -> None:
    """On the GPU machine (scripts/gpu/record-audit.sh): the kernel runs, built for the GPU's
    arch with the machine's own nvcc (the host runtime: this interpreter's CUDA_HOME)."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from tests.harness.test_gpu_faults import gpu_uuid

    write_toy_root(tmp_path / "data")
    sources = {"kernel.cu": KERNEL_CU, "main.cpp": MAIN_CPP}
    write_cuda_solution(tmp_path / "solutions/native_cuda", "native_cuda", sources, ["cuda"])
    device = ["--gpu", gpu_uuid(), "--runtime", "host"]
    cache = {"ENVAUDIT_CACHE": str(tmp_path / "cache")}
    lines = run_lines(tmp_path, "native_cuda", tmp_path / "lines.jsonl", device, cache)
    assert [ln["status"] for ln in lines] == ["PASSED", "PASSED"], lines[0].get("message")
    assert lines[0]["build"]["arch"] == "sm90a" and lines[0]["timing"]


@pytest.mark.gpu
def test_a_cuda_solution_is_compiled_in_its_image_and_passes(tmp_path: Path) -> None:
    """On the GPU machine, in the session scripts/gpu/overlay-audit.sh sets up (an engine, the
    imported machine stack as base `gpu-host-stack`, the store holding this lock's toolchain):
    the solution is compiled by the lock's own nvcc inside its container, as the non-root user
    with no network, and the kernel runs there."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from envaudit.image.engine import Engine, EngineError
    from tests.harness.test_gpu_faults import gpu_uuid

    try:
        Engine.connect()
    except EngineError as exc:
        pytest.skip(f"no container engine: {exc}")
    write_toy_root(tmp_path / "data")
    sources = {"kernel.cu": KERNEL_CU, "main.cpp": MAIN_CPP}
    write_cuda_solution(tmp_path / "solutions/native_cuda", "native_cuda", sources, ["cuda"])
    device = ["--gpu", gpu_uuid(), "--runtime", "docker", "--over", "gpu-host-stack"]
    device += ["--env", ENV]
    lines = run_lines(tmp_path, "native_cuda", tmp_path / "lines.jsonl", device, {})
    assert [ln["status"] for ln in lines] == ["PASSED", "PASSED"], lines[0].get("message")
    context = lines[0]["context"]
    assert context["runtime"] == "docker" and context["env"] == ENV, context
    assert context["env_check"]["matches"], context["env_check"]
    assert lines[0]["build"]["arch"] == "sm90a" and lines[0]["timing"]
