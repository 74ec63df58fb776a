"""The strict diagnostic bound: by what factor a stricter, informative tolerance is missed,
recorded beside a formal status it never changes."""

from __future__ import annotations

import pytest
import torch


def test_tolerance_factor_says_by_how_much_a_bound_is_missed() -> None:
    from envaudit.harness.compare import tolerance_factor

    ref = torch.ones(1000, dtype=torch.float32)
    out = ref + 5e-3  # within 1e-2, five times the 1e-3 bound
    loose = {"atol": 1e-2, "rtol": 0.0, "rule": "and", "required_matched_ratio": 1.0}
    strict = {**loose, "atol": 1e-3}
    assert tolerance_factor(out, ref, loose) == pytest.approx(0.5, rel=1e-3)
    assert tolerance_factor(out, ref, strict) == pytest.approx(5.0, rel=1e-3)
    # with 99% required, the worst 1% may miss
    spiky = ref.clone()
    spiky[:5] += 1.0
    assert tolerance_factor(spiky, ref, {**strict, "required_matched_ratio": 0.99}) == 0.0
    assert (
        tolerance_factor(torch.ones(3, dtype=torch.int32), torch.ones(3, dtype=torch.int32), loose)
        is None
    )


def test_strict_diagnostic_is_recorded_beside_a_formal_pass() -> None:
    from envaudit.harness.compare import strict_diagnostic

    definition = {
        "outputs": {"y": {"dtype": "float32", "shape": ["n"]}},
        "tolerance": {"atol": 1e-2, "rtol": 1e-2, "rule": "and", "required_matched_ratio": 1.0},
        "diagnostic_tolerance": {"atol": 1e-4, "rtol": 0.0, "rule": "and"},
    }
    ref = torch.zeros(10)
    found = strict_diagnostic(definition, [ref + 2e-3], [ref], [torch.float32])
    assert found is not None and found["holds"] is False
    (output,) = found["outputs"]
    assert output["output"] == "y" and output["matched"] == 0
    assert output["factor"] == pytest.approx(20.0, rel=1e-3)
    assert strict_diagnostic({**definition, "diagnostic_tolerance": None}, [ref], [ref], []) is None
