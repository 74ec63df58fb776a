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


def test_a_cuda_solution_where_torch_cannot_compile_cuda_is_not_blamed(tmp_path: Path) -> None:
    """This interpreter's CPU torch cannot build CUDA: the environment's shortcoming, recorded
    as UNSUPPORTED_DEVICE with the reason, never the solution's COMPILE_ERROR."""
    torch = pytest.importorskip("torch")
    if torch.version.cuda is not None:
        pytest.skip("this torch is a CUDA build")
    root = write_toy_root(tmp_path / "data")
    folder = tmp_path / "solutions/cuda_here"
    write_native(folder, "cuda_here", CORRECT_CPP, inline=True)
    solution = json.loads((folder / "solution.json").read_text())
    solution["spec"].update(language="cuda", target_hardware=[])
    (folder / "solution.json").write_text(json.dumps(solution))
    report = tmp_path / "lines.jsonl"
    argv = ["run", "--solution", "cuda_here", "--device", "cpu", "--runtime", "host"]
    argv += ["--data-root", str(root), "--solutions-root", str(tmp_path / "solutions")]
    argv += ["--report", str(report)]
    result = CliRunner().invoke(app, argv, env={"ENVAUDIT_CACHE": str(tmp_path / "cache")})
    lines = [json.loads(x) for x in report.read_text().splitlines()]
    assert [ln["status"] for ln in lines] == ["UNSUPPORTED_DEVICE"] * 2, result.output
    assert f"torch {torch.__version__} is not a CUDA build" in lines[0]["message"]


TVM_FFI_CPP = """
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/function.h>
#include <cstdint>

// toy_scale in destination-passing style: out = x times scale on the first lengths[b] rows.
void run(tvm::ffi::TensorView x, tvm::ffi::TensorView lengths, double scale,
         tvm::ffi::TensorView out) {
  const int64_t batches = x.size(0), rows = x.size(1), width = x.size(2);
  const float* xs = static_cast<const float*>(x.data_ptr());
  const int32_t* valid = static_cast<const int32_t*>(lengths.data_ptr());
  float* outs = static_cast<float*>(out.data_ptr());
  for (int64_t b = 0; b < batches; ++b)
    for (int64_t s = 0; s < rows; ++s)
      for (int64_t d = 0; d < width; ++d) {
        const int64_t i = (b * rows + s) * width + d;
        outs[i] = s < valid[b] ? xs[i] * static_cast<float>(scale) : 0.0f;
      }
}

TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, run);
"""


def test_a_tvm_ffi_solution_is_built_and_passes_by_default_binding(tmp_path: Path) -> None:
    """FlashInfer-Bench's TVM-FFI form (its default binding: none named): a function exported
    with TVM_FFI_DLL_EXPORT_TYPED_FUNC, destination-passing, called with the tensors through
    DLPack; built once, then found in the environment's cache."""
    pytest.importorskip("tvm_ffi")
    root = write_toy_root(tmp_path / "data")
    folder = tmp_path / "solutions/tvm_ok"
    write_native(folder, "tvm_ok", "", inline=True)
    solution = json.loads((folder / "solution.json").read_text())
    solution["spec"].update(entry_point="kernel.cpp::run", destination_passing_style=True)
    del solution["spec"]["binding"]
    solution["sources"] = [{"path": "kernel.cpp", "content": TVM_FFI_CPP}]
    (folder / "solution.json").write_text(json.dumps(solution))
    argv = ["run", "--solution", "tvm_ok", "--device", "cpu", "--runtime", "host"]
    argv += ["--data-root", str(root), "--solutions-root", str(tmp_path / "solutions")]
    runs = []
    for attempt in ("cold", "warm"):
        report = tmp_path / f"{attempt}.jsonl"
        env = {"ENVAUDIT_CACHE": str(tmp_path / "cache")}
        result = CliRunner().invoke(app, [*argv, "--report", str(report)], env=env)
        runs.append([json.loads(x) for x in report.read_text().splitlines()])
    assert [ln["status"] for ln in runs[0]] == ["PASSED", "PASSED"], result.output
    built = runs[0][0]["build"]
    assert built["module"].endswith("_cpu_tvmffi") and built["cached"] is False
    assert runs[1][0]["build"]["cached"] is True
    assert [ln["status"] for ln in runs[1]] == ["PASSED", "PASSED"]
