"""cuda/cpp solutions with the torch binding (FlashInfer-Bench's TorchBuilder form): compiled in
the worker before any workload, cached by (sources, arch) in TORCH_EXTENSIONS_DIR, the build
recorded on the job's first line; a broken source is a COMPILE_ERROR with the compiler's words.
On the CPU: a `cpp` solution, compiled with the machine's C++ compiler and this torch."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envaudit.cli import app
from tests.conftest import UUID_BLOB, UUID_RANDOM, write_toy_root

pytestmark = pytest.mark.skipif(shutil.which("c++") is None, reason="needs a C++ compiler")

CORRECT_CPP = """
#include <torch/extension.h>

// toy_scale: the first lengths[b] rows of x[b] times scale, the rest zero.
torch::Tensor run(torch::Tensor x, torch::Tensor lengths, double scale) {
  auto rows = torch::arange(x.size(1), x.options().dtype(torch::kLong));
  auto mask = rows.unsqueeze(0) < lengths.to(torch::kLong).unsqueeze(1);
  return torch::where(mask.unsqueeze(-1), x * scale, torch::zeros({}, x.options()));
}

// fib_scale (tests/dataset/test_env_map.py): x times scale. One module serves both tests, so
// the suite compiles it once (pybind picks the overload by its arguments).
torch::Tensor run_unmasked(torch::Tensor x, double scale) { return x * scale; }

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("run", &run);
  m.def("run", &run_unmasked);
}
"""

# A header that is nowhere: the compiler stops at once, saying so (no torch headers parsed).
BROKEN_CPP = '#include "no_such_header_anywhere.h"\n' + CORRECT_CPP


def write_native(folder: Path, name: str, source: str, inline: bool) -> None:
    """A solution as FlashInfer-Bench publishes one: sources inline (`content`), or files."""
    folder.mkdir(parents=True)
    entry = {"path": "main.cpp", "content": source} if inline else {"path": "main.cpp"}
    if not inline:
        (folder / "main.cpp").write_text(source)
    solution = {
        "name": name,
        "definition": "toy_scale",
        "author": "tests",
        "spec": {
            "language": "cpp",
            "target_hardware": ["cpu"],
            "entry_point": "main.cpp::run",
            "binding": "torch",
            "destination_passing_style": False,
        },
        "sources": [entry],
        "env": "torch-cpu",
    }
    (folder / "solution.json").write_text(json.dumps(solution))


@pytest.fixture(scope="module")
def native_run(
    tmp_path_factory: pytest.TempPathFactory, native_cache: Path
) -> tuple[Path, dict[str, list[dict]]]:
    base = tmp_path_factory.mktemp("native")
    root = write_toy_root(base / "data")
    write_native(base / "solutions/native_ok", "native_ok", CORRECT_CPP, inline=True)
    write_native(base / "solutions/native_broken", "native_broken", BROKEN_CPP, inline=False)
    lines: dict[str, list[dict]] = {}
    for name, runs in (("native_ok", 2), ("native_broken", 1)):
        for _ in range(runs):  # the second run of native_ok finds its module built
            report = base / f"{name}.jsonl"
            argv = ["run", "--solution", name, "--device", "cpu", "--runtime", "host"]
            argv += ["--data-root", str(root), "--solutions-root", str(base / "solutions")]
            argv += ["--report", str(report), "--timeout", "300"]
            CliRunner().invoke(app, argv, env={"ENVAUDIT_CACHE": str(native_cache)})
        lines[name] = [json.loads(x) for x in report.read_text().splitlines()]
    return native_cache, lines


def test_a_cpp_solution_is_compiled_and_passes(native_run: tuple) -> None:
    _, lines = native_run
    first, second = lines["native_ok"][:2], lines["native_ok"][2:]
    assert [ln["status"] for ln in lines["native_ok"]] == ["PASSED"] * 4
    assert {ln["workload"]["uuid"] for ln in first} == {UUID_BLOB, UUID_RANDOM}
    built = first[0]["build"]
    # cached where test_env_map's audit built the same sources in this session's cache first
    assert built["arch"] == "cpu" and isinstance(built["cached"], bool) and built["seconds"] > 0
    assert built["module"].startswith("envaudit_") and "build" not in first[1]
    assert second[0]["build"]["cached"] is True  # the env's cache held the module
    assert second[0]["build"]["module"] == built["module"]
    if not built["cached"]:
        assert "c++" in built["log"] or "g++" in built["log"]  # the compiler's own output


def test_the_build_lives_in_the_environments_jit_cache(native_run: tuple) -> None:
    cache, lines = native_run
    module = lines["native_ok"][0]["build"]["module"]
    built = list((cache / "jit").glob(f"*/torch-extensions/{module}/{module}*.so"))
    assert len(built) == 1


def test_a_broken_source_is_a_compile_error_with_the_compilers_message(native_run: tuple) -> None:
    _, lines = native_run
    assert [ln["status"] for ln in lines["native_broken"]] == ["COMPILE_ERROR"] * 2
    message = lines["native_broken"][0]["message"]
    assert "building main.cpp failed" in message and "no_such_header_anywhere.h" in message


def test_a_cpp_entry_point_needs_a_native_language() -> None:
    from pydantic import ValidationError

    from envaudit.schema.models import BuildSpec

    with pytest.raises(ValidationError, match="C/C\\+\\+/CUDA file"):
        BuildSpec(language="python", entry_point="main.cpp::run")
    with pytest.raises(ValidationError, match="needs a C/C\\+\\+/CUDA entry file"):
        BuildSpec(language="cuda", entry_point="main.py::run")
    assert BuildSpec(language="cuda", entry_point="kernel.cu::run", binding="torch")


KERNEL_CU = """
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

__global__ void scale_rows(const float* x, const int* lengths, float scale, float* out,
                           long S, long D, long total) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i >= total) return;
  long b = i / (S * D), s = (i / D) % S;
  out[i] = s < lengths[b] ? x[i] * scale : 0.0f;
}

torch::Tensor run(torch::Tensor x, torch::Tensor lengths, double scale) {
  auto xc = x.contiguous();
  auto lc = lengths.contiguous();
  auto out = torch::empty_like(xc);
  long total = xc.numel();
  int threads = 256;
  long blocks = (total + threads - 1) / threads;
  if (blocks > 0) {
    scale_rows<<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
        xc.data_ptr<float>(), lc.data_ptr<int>(), (float)scale, out.data_ptr<float>(),
        xc.size(1), xc.size(2), total);
  }
  return out;
}
"""

MAIN_CPP = """
#include <torch/extension.h>

torch::Tensor run(torch::Tensor x, torch::Tensor lengths, double scale);

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("run", &run); }
"""


@pytest.mark.gpu
def test_a_cuda_solution_is_compiled_for_the_gpu_and_passes(tmp_path: Path) -> None:
    """On the GPU machine (scripts/gpu/record-audit.sh): FlashInfer-Bench's cuda form, a kernel
    in a .cu and the pybind module in main.cpp, built with the environment's nvcc."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from tests.harness.test_gpu_faults import gpu_uuid

    root = write_toy_root(tmp_path / "data")
    folder = tmp_path / "solutions/native_cuda"
    folder.mkdir(parents=True)
    solution = {
        "name": "native_cuda",
        "definition": "toy_scale",
        "author": "tests",
        "spec": {
            "language": "cuda",
            "target_hardware": ["cuda"],
            "entry_point": "main.cpp::run",
            "binding": "torch",
            "destination_passing_style": False,
        },
        "sources": [
            {"path": "main.cpp", "content": MAIN_CPP},
            {"path": "kernel.cu", "content": KERNEL_CU},
        ],
        "env": "torch-2.11-cu130",
    }
    (folder / "solution.json").write_text(json.dumps(solution))
    report = tmp_path / "lines.jsonl"
    argv = ["run", "--solution", "native_cuda", "--gpu", gpu_uuid(), "--runtime", "host"]
    argv += ["--data-root", str(root), "--solutions-root", str(tmp_path / "solutions")]
    argv += ["--report", str(report), "--timeout", "300"]
    CliRunner().invoke(app, argv, env={"ENVAUDIT_CACHE": str(tmp_path / "cache")})
    lines = [json.loads(x) for x in report.read_text().splitlines()]
    assert [ln["status"] for ln in lines] == ["PASSED", "PASSED"], lines[0].get("message")
    assert lines[0]["build"]["arch"].startswith("sm") and lines[0]["timing"]
