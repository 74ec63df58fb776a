"""An environment for a solution that declares none (FlashInfer-Bench's never do): --env, else
the data's envs.toml, recorded as assigned; and its dependencies checked against that lock
before any run. Roots are written with FlashInfer-Bench's own API (test_solution_layouts)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from flashinfer_bench.data import BuildSpec, Solution, SourceFile
from typer.testing import CliRunner

from envaudit.cli import app
from envaudit.dataset.env_map import EnvMapError, load_env_map
from envaudit.lock.dependencies import dependency_names
from tests.dataset.test_solution_layouts import DEFINITION, MAIN, fib_solution, write_nested_root
from tests.harness.test_native import CORRECT_CPP

ENVS = """
default = "torch-cpu"
[solutions]
"special-*" = "torch-2.11-cu130"
[authors]
"flashinfer-ai" = "flashinfer-0.7.2"
[definitions]
"fib_*" = "fa4-4.0.0b35"
"""


def with_dependencies(name: str, dependencies: list[str]) -> Solution:
    spec = BuildSpec(
        language="python",
        target_hardware=["cpu", "cuda"],
        entry_point="main.py::run",
        destination_passing_style=False,
        dependencies=dependencies,
    )
    return Solution(
        name=name,
        definition=DEFINITION,
        author="fib-tests",
        spec=spec,
        sources=[SourceFile(path="main.py", content=MAIN)],
    )


def run(root: Path, tmp_path: Path, name: str, *extra: str) -> tuple[int, str, list[dict]]:
    report = tmp_path / f"{name}.jsonl"
    argv = ["run", "--solution", name, "--device", "cpu", "--data-root", str(root)]
    argv += ["--report", str(report), "--timeout", "60", *extra]
    result = CliRunner().invoke(app, argv, env={"ENVAUDIT_CACHE": str(tmp_path / "cache")})
    lines = [json.loads(x) for x in report.read_text().splitlines()] if report.exists() else []
    return result.exit_code, result.output, lines


def test_rules_are_tried_solution_author_definition_then_default(tmp_path: Path) -> None:
    (tmp_path / "envs.toml").write_text(ENVS)
    found = load_env_map(tmp_path)
    assert found.assign("special-x", "flashinfer-ai", "fib_scale").env == "torch-2.11-cu130"
    by_author = found.assign("plain", "flashinfer-ai", "fib_scale")
    assert by_author is not None and by_author.how == "envs.toml [authors] 'flashinfer-ai'"
    assert found.assign("plain", "someone", "fib_scale").env == "fa4-4.0.0b35"
    fallback = found.assign("plain", "someone", "gemm")
    assert fallback is not None and (fallback.env, fallback.how) == (
        "torch-cpu",
        "envs.toml default",
    )
    assert load_env_map(tmp_path / "nothing-here").assign("a", "b", "c") is None


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("defualt = 'torch-cpu'", "unknown key 'defualt'"),
        ("default = '../outside'", "the env '../outside' is not valid"),
        ("[authors]\n'x' = 3", "[authors] 'x': the env '3' is not valid"),
        ("authors = 'x'", "[authors] must be a table"),
        ("default = ", "cannot be read"),
    ],
)
def test_a_bad_envs_toml_is_named_precisely(tmp_path: Path, text: str, words: str) -> None:
    (tmp_path / "envs.toml").write_text(text)
    with pytest.raises(EnvMapError) as caught:
        load_env_map(tmp_path)
    assert str(tmp_path / "envs.toml") in str(caught.value) and words in str(caught.value)


def test_an_assigned_env_is_recorded_as_assigned(tmp_path: Path) -> None:
    root = write_nested_root(tmp_path / "fib", fib_solution("plain"))
    (root / "envs.toml").write_text('default = "torch-cpu"\n')
    code, output, lines = run(root, tmp_path, "plain", "--runtime", "host")
    assert code == 0, output
    for line in lines:
        context = line["context"]
        assert (context["env"], context["env_assigned"]) == ("torch-cpu", "envs.toml default")
        assert context["declared_env"] is None and context["env_check"]["matches"] is not None


def test_no_env_anywhere_is_a_usage_error_naming_both_ways(tmp_path: Path) -> None:
    root = write_nested_root(tmp_path / "fib", fib_solution("plain"))
    code, output, _ = run(root, tmp_path, "plain", "--runtime", "local")
    assert code == 2
    assert "declares no environment" in output and "envs.toml" in output and "--env" in output


def test_a_dependency_the_lock_lacks_stops_the_run_before_anything(tmp_path: Path) -> None:
    needy = with_dependencies("needy", ["torch", "flashinfer-python >= 0.7", "CUDA >= 12.8"])
    root = write_nested_root(tmp_path / "fib", needy)
    (root / "envs.toml").write_text('default = "torch-cpu"\n')
    code, output, lines = run(root, tmp_path, "needy", "--runtime", "local")
    assert code == 2 and not lines
    assert "depends on flashinfer-python, which lock torch-cpu lacks" in output
    assert "flashinfer-0.7.2" in output  # the lock that has it
    assert not (tmp_path / "cache" / "envs").exists()  # nothing was built


def test_a_cuda_solution_in_a_lock_without_a_run_time_nvcc_stops_before_anything(
    tmp_path: Path,
) -> None:
    """A cuda solution is compiled in its job: torch-cpu has no toolchain, flashmla-13.3 has a
    build-only one (gone from its run environment), deepgemm-2.6.1 keeps only nvcc's part of
    one (no cuBLAS headers for ATen's); all three are refused naming the locks that keep the
    whole toolchain at run time."""
    spec = BuildSpec(
        language="cuda",
        target_hardware=["cuda"],
        entry_point="main.cpp::run",
        destination_passing_style=False,
    )
    source = SourceFile(path="main.cpp", content=CORRECT_CPP)
    cuda = Solution(
        name="cuda-one", definition=DEFINITION, author="fib-tests", spec=spec, sources=[source]
    )
    root = write_nested_root(tmp_path / "fib", cuda)
    for env in ("torch-cpu", "flashmla-13.3", "deepgemm-2.6.1"):
        code, output, lines = run(root, tmp_path, "cuda-one", "--runtime", "local", "--env", env)
        assert code == 2 and not lines, output
        assert f"lock {env} keeps no whole CUDA toolchain there or pins no ninja" in output
        assert "torch-2.11-cu130-nvcc" in output and "deepgemm" not in output.split("hint")[1]
    assert not (tmp_path / "cache" / "envs").exists()  # nothing was built


def test_a_tvm_ffi_solution_needs_the_tvm_ffi_package_in_its_lock(tmp_path: Path) -> None:
    """FlashInfer-Bench's default binding (none named) is TVM-FFI: its package must be in the
    lock, checked like a declared dependency."""
    spec = BuildSpec(language="cpp", target_hardware=["cpu"], entry_point="kernel.cpp::run")
    source = SourceFile(path="kernel.cpp", content="// TVM-FFI export\n")
    tvm = Solution(name="tvm-one", definition=DEFINITION, author="fib", spec=spec, sources=[source])
    root = write_nested_root(tmp_path / "fib", tvm)
    code, output, lines = run(root, tmp_path, "tvm-one", "--runtime", "local", "--env", "torch-cpu")
    assert code == 2 and not lines, output
    assert "depends on apache-tvm-ffi, which lock torch-cpu lacks" in output
    assert "torch-2.11-cu130-nvcc" in output


def test_dependency_names_are_package_names() -> None:
    names = dependency_names(["torch", "Triton >= 3.3", "CUDA >= 12.8", "cutlass", "flash_attn"])
    assert names == ["torch", "triton", "flash-attn"]


TRITON_MAIN = """
import triton
import triton.language as tl


@triton.jit
def _scale(x, out, scale, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    keep = offsets < n
    tl.store(out + offsets, tl.load(x + offsets, mask=keep) * scale, mask=keep)


def run(x, scale):
    import torch

    out = torch.empty_like(x)
    _scale[(triton.cdiv(x.numel(), 256),)](x, out, scale, x.numel(), BLOCK=256)
    return out
"""


def fib_native(name: str, language: str, path: str, content: str, targets: list[str]) -> Solution:
    spec = BuildSpec(
        language=language,
        target_hardware=targets,
        entry_point=f"{path}::run",
        destination_passing_style=False,
        binding="torch" if language in ("cpp", "cuda") else None,
        dependencies=["torch"] + (["triton"] if language == "triton" else []),
    )
    return Solution(
        name=name,
        definition=DEFINITION,
        author="fib-tests",
        spec=spec,
        sources=[SourceFile(path=path, content=content)],
    )


@pytest.mark.skipif(shutil.which("c++") is None, reason="needs a C++ compiler")
def test_a_flashinfer_bench_root_of_three_languages_is_audited_with_one_command(
    tmp_path: Path, native_cache: Path
) -> None:
    """python, triton and cpp (torch binding), written by FlashInfer-Bench's API, none with an
    env: one `audit --definition`, envs.toml's default env, each language its own way (on the
    CPU the Triton one targets only GPUs: UNSUPPORTED_DEVICE, never imported)."""
    root = write_nested_root(
        tmp_path / "fib",
        fib_solution("fib-python"),
        fib_native("fib-triton", "triton", "main.py", TRITON_MAIN, ["cuda"]),
        fib_native("fib-cpp", "cpp", "main.cpp", CORRECT_CPP, ["cpu", "cuda"]),
    )
    (root / "envs.toml").write_text('default = "torch-cpu"\n')
    argv = ["audit", "--definition", DEFINITION, "--data-root", str(root), "--suite", "all"]
    argv += ["--runtime", "host", "--device", "cpu", "--out", str(tmp_path / "audit")]
    result = CliRunner().invoke(app, argv, env={"ENVAUDIT_CACHE": str(native_cache)})
    assert result.exit_code in (0, 1), result.output
    lines = [json.loads(x) for x in (tmp_path / "audit/results.jsonl").read_text().splitlines()]
    statuses = {(ln["solution"], ln["workload"]["uuid"]): ln["status"] for ln in lines}
    assert len(statuses) == 6
    for (solution, _), status in statuses.items():
        want = "UNSUPPORTED_DEVICE" if solution == "fib-triton" else "PASSED"
        assert status == want, (solution, status)
    assert {ln["context"]["env_assigned"] for ln in lines} == {"envs.toml default"}
    assert any(
        ln.get("build", {}).get("arch") == "cpu" for ln in lines if ln["solution"] == "fib-cpp"
    )
