"""Input materialisation: seeded, deterministic, hash-checked, confined to the root."""

from __future__ import annotations

import json
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


def test_a_large_draw_is_chunked_and_independent_of_the_thread_count(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Chunks come from their own generators, so the values are the same on one thread and on
    many; the first chunk (and so any tensor of at most one chunk) is one generator's draw."""
    from envaudit.harness import inputs as module

    n = module.DRAW_CHUNK * 5 // 2
    init = {"dist": "normal", "mean": 0.5, "std": 2.0}
    monkeypatch.setattr(module.os, "cpu_count", lambda: 1)
    serial = random_tensor((n,), torch.bfloat16, init, 11)
    monkeypatch.setattr(module.os, "cpu_count", lambda: 4)
    parallel = random_tensor((n,), torch.bfloat16, init, 11)
    assert torch.equal(serial.view(torch.int16), parallel.view(torch.int16))
    one = torch.randn(module.DRAW_CHUNK, generator=torch.Generator().manual_seed(11)) * 2.0 + 0.5
    assert torch.equal(serial[: module.DRAW_CHUNK], one.to(torch.bfloat16))
    # later chunks are fresh draws, not a repeat of the first
    second = serial[module.DRAW_CHUNK : 2 * module.DRAW_CHUNK]
    assert not torch.equal(second, serial[: module.DRAW_CHUNK])
    assert abs(float(serial.float().mean()) - 0.5) < 0.01
    assert abs(float(serial.float().std()) - 2.0) < 0.01
    ints = random_tensor((2, n // 2), torch.int8, None, 3)
    assert int(ints.min()) == -128 and int(ints.max()) == 127
