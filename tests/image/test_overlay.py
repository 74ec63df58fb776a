"""An env's image over an imported machine stack: refused when the stack holds another Python or
another version of the lock's torch stack; otherwise adds exactly what the stack lacks and
replaces what it holds at another version."""

from __future__ import annotations

from pathlib import Path

import pytest

from envaudit.errors import EnvauditError
from envaudit.image.overlay import plan_overlay, render_overlay_dockerfile
from envaudit.lock.verify import InstalledDist, compare
from envaudit.schema.locks import seal
from tests.image.test_dockerfile import check_golden, sample_lock


def installed(**versions: str) -> list[InstalledDist]:
    return [InstalledDist(n, v, Path("/x"), None) for n, v in versions.items()]


STACK = {"torch": "2.11.0", "triton": "3.6.0", "nvidia-cublas": "13.1.0.3", "numpy": "2.5.2"}


def plan(stack: dict[str, str], python: str = "3.12"):  # type: ignore[no-untyped-def]
    lock = sample_lock(sources=[])
    drift = compare(lock, installed(**stack), None, python)
    return plan_overlay(
        lock,
        "envaudit-base/gpu-host-stack:0123",
        "gpu-host-stack",
        "/opt/torch/.venv/bin/python",
        "c" * 64,
        drift,
        (("CUDA_HOME", "/usr/local/cuda"),),
        ("/opt/gcc/bin",),
    )


def test_a_stack_lacking_a_package_gets_it_from_the_store() -> None:
    overlay = plan({**STACK, "einops": "0.8.2"})  # an extra is allowed
    assert overlay.added is not None
    assert [p[0] for p in overlay.added.packages] == ["safetensors"]
    assert overlay.verified["present"] == 4 and overlay.verified["extra_in_base"] == 1
    text = render_overlay_dockerfile(overlay)
    check_golden("overlay.Dockerfile", text)
    assert "--require-hashes" in text and "--no-index" in text
    assert overlay.labels["dev.envaudit.overlay-on"] == "gpu-host-stack"
    assert overlay.tag.endswith("-on-gpu-host-stack")


def test_a_package_at_another_version_outside_the_torch_stack_is_replaced() -> None:
    overlay = plan({**STACK, "numpy": "2.4.0", "safetensors": "0.8.0"})
    assert overlay.added is not None
    assert [(p[0], p[1]) for p in overlay.added.packages] == [("numpy", "2.5.2")]
    assert overlay.verified["replaced"] == ["numpy 2.4.0 -> 2.5.2"]
    assert overlay.verified["added"] == 0
    assert "# replaced: numpy 2.4.0 -> 2.5.2" in render_overlay_dockerfile(overlay)


def test_a_stack_holding_the_whole_lock_adds_nothing() -> None:
    overlay = plan({**STACK, "safetensors": "0.8.0"})
    assert overlay.added is None
    assert "COPY wheels/added" not in render_overlay_dockerfile(overlay)


def test_the_lock_s_toolchain_is_installed_and_is_cuda_home_not_the_stack_s() -> None:
    overlay = plan({**STACK, "safetensors": "0.8.0"})
    assert overlay.toolchain is not None and overlay.verified["toolchain"] == 2
    text = render_overlay_dockerfile(overlay)
    assert "--target /opt/envaudit/toolchain" in text
    assert 'CUDA_HOME="/opt/cuda"' in text and "/usr/local/cuda" not in text
    assert ":/opt/cuda/bin:/opt/gcc/bin:" in text


@pytest.mark.parametrize(
    ("stack", "python", "words"),
    [
        ({**STACK, "torch": "2.12.0"}, "3.12", "torch 2.12.0 (locked 2.11.0)"),
        (STACK, "3.11", "Python 3.11 (locked 3.12)"),
    ],
)
def test_a_stack_that_contradicts_the_lock_is_refused(
    stack: dict[str, str], python: str, words: str
) -> None:
    with pytest.raises(EnvauditError) as caught:
        plan(stack, python)
    assert caught.value.exit_code == 1 and words in str(caught.value)


def test_a_build_only_toolchain_is_not_installed_over_the_stack() -> None:
    body = sample_lock(sources=[]).model_dump(mode="json", exclude={"closure_hash"})
    body["cuda"]["build_only"] = True
    lock = seal(body)
    drift = compare(lock, installed(**STACK, safetensors="0.8.0"), None, "3.12")
    overlay = plan_overlay(lock, "b", "gpu-host-stack", "/opt/torch/.venv/bin/python", "c", drift)
    assert overlay.toolchain is None and overlay.cuda_home is None
    assert "/opt/envaudit/toolchain" not in render_overlay_dockerfile(overlay)


def test_build_only_components_are_not_installed_over_the_stack() -> None:
    body = sample_lock(sources=[]).model_dump(mode="json", exclude={"closure_hash"})
    body["cuda"]["build_only_components"] = ["nvidia-cuda-runtime"]
    lock = seal(body)
    drift = compare(lock, installed(**STACK, safetensors="0.8.0"), None, "3.12")
    overlay = plan_overlay(lock, "b", "gpu-host-stack", "/opt/torch/.venv/bin/python", "c", drift)
    assert overlay.toolchain is not None and overlay.verified["toolchain"] == 1
    assert [n for n, _, _ in overlay.toolchain.packages] == ["nvidia-cuda-nvcc"]
    assert overlay.verified["added"] == 0  # a left-out component is not a missing package
    assert 'CUDA_HOME="/opt/cuda"' in render_overlay_dockerfile(overlay)


@pytest.mark.parametrize(
    ("built_in", "words", "hint"),
    [
        ("image", 'flash-mla (built_in = "image"', "envaudit build --env sample"),
        (None, "flash-mla (not built yet)", "envaudit lock sample --rebuild flash-mla"),
    ],
)
def test_a_source_without_a_wheel_in_the_lock_refuses_the_overlay(
    built_in: str | None, words: str, hint: str
) -> None:
    """The overlay installs only the lock's wheels: a source the lock holds no wheel of would
    be missing from the image, so the plan is refused (exit 2), naming env, source and way."""
    lock = sample_lock()
    body = lock.model_dump(mode="json", exclude={"closure_hash"})
    body["sources"][0]["built_in"] = built_in
    lock = seal(body)
    drift = compare(lock, installed(**STACK, safetensors="0.8.0"), None, "3.12")
    with pytest.raises(EnvauditError) as caught:
        plan_overlay(lock, "b", "gpu-host-stack", "/opt/torch/.venv/bin/python", "c", drift)
    error = caught.value
    assert error.exit_code == 2
    assert "sample:" in str(error) and "gpu-host-stack" in str(error) and words in str(error)
    assert error.hint is not None and hint in error.hint and "without --over" in error.hint
