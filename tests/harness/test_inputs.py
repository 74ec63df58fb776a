"""Input materialisation: seeded, deterministic, hash-checked, confined to the root."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from envaudit.harness.inputs import (
    InputError,
    check_constraints,
    input_seed,
    materialize_inputs,
    random_tensor,
    run_reference,
)
from tests.conftest import toy_definition


def workloads(root: Path) -> list[dict]:
    lines = (root / "workloads/toy/toy_scale.jsonl").read_text().splitlines()
    return [json.loads(line)["workload"] for line in lines]


def test_seeded_inputs_are_reproducible_and_independent(toy_root: Path) -> None:
    d, w = toy_definition(), workloads(toy_root)[1]
    a = materialize_inputs(d, w, toy_root)
    b = materialize_inputs(d, w, toy_root)
    assert torch.equal(a["x"], b["x"]) and torch.equal(a["lengths"], b["lengths"])
    fresh = materialize_inputs(d, w, toy_root, seed_offset=1)
    assert not torch.equal(a["x"], fresh["x"])
    assert input_seed(7, "x") != input_seed(7, "lengths")
    assert a["lengths"].dtype == torch.int32 and int(a["lengths"].max()) < 3


def test_blob_inputs_and_reference(toy_root: Path) -> None:
    d, w = toy_definition(), workloads(toy_root)[0]
    inputs = materialize_inputs(d, w, toy_root)
    assert inputs["lengths"].tolist() == [2, 0, 3]
    assert check_constraints(d, w, inputs) == []
    (out,) = run_reference(d, inputs)
    assert torch.equal(out[0, :2], inputs["x"][0, :2] * 2.0)
    assert torch.count_nonzero(out[1]) == 0


def test_changed_blob_is_refused(toy_root: Path) -> None:
    d, w = toy_definition(), workloads(toy_root)[0]
    w["inputs"]["lengths"]["sha256"] = "0" * 64
    with pytest.raises(InputError, match="does not match recorded"):
        materialize_inputs(d, w, toy_root)


@pytest.mark.parametrize("path", ["../x.safetensors", "/etc/passwd"])
def test_blob_outside_root_is_refused(toy_root: Path, path: str) -> None:
    d, w = toy_definition(), workloads(toy_root)[0]
    w["inputs"]["lengths"]["path"] = path
    with pytest.raises(InputError, match=r"absolute|escapes"):
        materialize_inputs(d, w, toy_root)


def test_random_rules() -> None:
    u = random_tensor((1000,), torch.float32, {"dist": "uniform", "low": -2, "high": -1}, 1)
    assert float(u.min()) >= -2 and float(u.max()) < -1
    # without a rule, integers are drawn as FlashInfer-Bench draws them
    ints = random_tensor((10000,), torch.int32, None, 1)
    assert ints.dtype == torch.int32 and int(ints.min()) >= -1024 and int(ints.max()) < 1024
    assert int(ints.min()) < -900 and int(ints.max()) > 900
    small = random_tensor((10000,), torch.int8, None, 1)
    assert int(small.min()) == -128 and int(small.max()) == 127


def _splitmix64(seed: int, i: int) -> int:
    """The generator's definition in Python's unbounded integers, to check torch's int64 one."""
    mask = (1 << 64) - 1
    z = (seed + i * 0x9E3779B97F4A7C15) & mask
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
    return z ^ (z >> 31)


def test_counter_hash_is_splitmix64_with_wrapping_int64() -> None:
    from envaudit.harness.inputs import counter_hash

    seed = input_seed(5, "kv_cache")  # a real seed: up to 63 bits
    start = (1 << 40) - 100  # counters far past any chunk boundary
    bits = counter_hash(seed, start, 300, "cpu").tolist()
    assert [b & ((1 << 64) - 1) for b in bits] == [_splitmix64(seed, start + i) for i in range(300)]


def test_the_normal_draw_is_box_muller_of_the_two_halves_step_for_step() -> None:
    """The in-place steps of the draw give the bits of the formula written out plainly (draw
    revision 3: the reference cache and committed lines depend on them)."""
    from envaudit.harness.inputs import counter_hash, random_tensor

    n = (1 << 19) + 37  # a length that is a multiple of nothing the draw uses
    bits = counter_hash(29, 0, n, "cpu")
    words = bits.view(torch.int32).view(-1, 2)
    u1 = (words[:, 1].to(torch.float64) + (2.0**31 + 1.0)) * 2.0**-32
    u2 = (words[:, 0].to(torch.float64) + 2.0**31) * 2.0**-32
    plain = torch.sqrt(-2.0 * torch.log(u1)) * torch.cos(2.0 * math.pi * u2)
    expected = (plain * 2.0 + 0.5).to(torch.float32)
    drawn = random_tensor((n,), torch.float32, {"dist": "normal", "mean": 0.5, "std": 2.0}, 29)
    assert torch.equal(drawn.view(torch.int32), expected.view(torch.int32))


def test_a_large_draw_does_not_depend_on_its_chunking(monkeypatch: pytest.MonkeyPatch) -> None:
    """Element i is a function of the seed and i alone: drawn in one chunk or in many, the
    values are the same bits, and the distribution is the one asked for."""
    from envaudit.harness import inputs as module

    n = 1 << 20
    init = {"dist": "normal", "mean": 0.5, "std": 2.0}
    whole = random_tensor((n,), torch.bfloat16, init, 11)
    monkeypatch.setattr(module, "CPU_DRAW_CHUNK", 1000)  # chunks not aligned to anything
    pieces = random_tensor((n,), torch.bfloat16, init, 11)
    assert torch.equal(whole.view(torch.int16), pieces.view(torch.int16))
    assert abs(float(whole.float().mean()) - 0.5) < 0.01
    assert abs(float(whole.float().std()) - 2.0) < 0.01
    # a prefix of a longer tensor is the shorter tensor
    assert torch.equal(random_tensor((1000,), torch.bfloat16, init, 11), whole[:1000])
    ints = random_tensor((2, n // 2), torch.int8, None, 3)
    assert int(ints.min()) == -128 and int(ints.max()) == 127
    coins = random_tensor((n,), torch.bool, None, 4)
    assert abs(float(coins.float().mean()) - 0.5) < 0.005


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_the_gpu_draws_what_the_cpu_draws() -> None:
    """Integer and uniform inputs are the same bits on both; normal floats may differ only by
    an ulp, in a few elements per billion (module docstring)."""
    n = 1 << 26
    for dtype, init in (
        (torch.int32, None),
        (torch.float32, {"dist": "uniform", "low": -1, "high": 3}),
        (torch.bool, None),
    ):
        cpu = random_tensor((n,), dtype, init, 21)
        assert torch.equal(random_tensor((n,), dtype, init, 21, "cuda").cpu(), cpu)
    cpu = random_tensor((n,), torch.float32, None, 22)
    gpu = random_tensor((n,), torch.float32, None, 22, "cuda").cpu()
    differ = cpu != gpu
    assert int(differ.sum()) <= 4
    assert torch.allclose(cpu[differ], gpu[differ], rtol=2**-22, atol=0)
    half = random_tensor((n,), torch.bfloat16, None, 22)
    assert torch.equal(random_tensor((n,), torch.bfloat16, None, 22, "cuda").cpu(), half)


FUSED_CASES = (
    ({"dist": "normal", "mean": 0.5, "std": 2.0}, torch.float32),
    (None, torch.bfloat16),
    (None, torch.float16),
    ({"dist": "normal", "mean": 0.0, "std": 0.25}, torch.float8_e4m3fn),
    ({"dist": "uniform", "low": -1, "high": 3}, torch.float32),
    ({"dist": "uniform", "low": 0.1, "high": 0.7}, torch.bfloat16),
    (None, torch.int32),
    (None, torch.int8),
    ({"dist": "randint", "low": -(1 << 40), "high": 1 << 41}, torch.int64),
    ({"dist": "randint", "low": 3, "high": (1 << 31) + 3}, torch.int64),
    (None, torch.bool),
    ({"dist": "bernoulli", "p": 0.3}, torch.float32),
)


def _step_by_step(n: int, dtype: torch.dtype, init: dict | None, seed: int, start: int = 0):
    """The step-by-step draw on the GPU, as random_tensor ran it before the fused kernel."""
    from envaudit.harness.inputs import DEFAULT_FLOAT_INIT, _draw, counter_hash, default_int_init

    if init is None:
        init = DEFAULT_FLOAT_INIT if dtype.is_floating_point else default_int_init(dtype)
    out = torch.empty(n, dtype=dtype, device="cuda")
    return out.copy_(_draw(counter_hash(seed, start, n, "cuda"), init))


def _bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's bits as integers (torch.equal on floats would take -0.0 for 0.0)."""
    return t.view(
        {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]
    )


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_the_fused_gpu_draw_gives_the_step_by_step_bits(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every distribution, in every kind of dtype, in chunks aligned to nothing, and far past
    2**32 counters: the one-kernel draw is the step-by-step draw, bit for bit."""
    from envaudit.harness import inputs as module

    assert module.fused_draw_kernel() is not None, module.FUSED_DRAW_ERROR
    monkeypatch.setattr(module, "DRAW_CHUNK", 1_000_003)
    n = 3_000_017
    for init, dtype in FUSED_CASES:
        drawn = random_tensor((n,), dtype, init, 41, "cuda")
        expected = _step_by_step(n, dtype, init, 41)
        assert torch.equal(_bits(drawn), _bits(expected)), (init, dtype)
    assert module.FUSED_DRAW_ERROR is None  # nothing fell back to the step-by-step draw
    start = (1 << 40) - 100
    normal = {"dist": "normal", "mean": 0.0, "std": 1.0}
    far = module._fused_draw(
        module.fused_draw_kernel(),
        module._fused_arguments(7, normal),
        start,
        300,
        torch.device("cuda"),
    ).to(torch.float32)
    assert torch.equal(_bits(far), _bits(_step_by_step(300, torch.float32, normal, 7, start)))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_a_fused_draw_that_fails_falls_back_to_the_same_bits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from envaudit.harness import inputs as module

    def refuses(*args: object, **kwargs: object) -> torch.Tensor:
        raise RuntimeError("nvrtc: error: failed to open libnvrtc-builtins.so")

    monkeypatch.setattr(module, "_fused_kernel", refuses)
    monkeypatch.setattr(module, "FUSED_DRAW_ERROR", None)
    drawn = random_tensor((1000,), torch.bfloat16, None, 5, "cuda")
    assert "libnvrtc" in str(module.FUSED_DRAW_ERROR)
    assert module.fused_draw_kernel() is None
    assert torch.equal(_bits(drawn), _bits(_step_by_step(1000, torch.bfloat16, None, 5)))
