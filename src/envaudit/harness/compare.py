"""Compare a solution's outputs with the reference's, under the definition's tolerance.

Counts are integers: an output passes when `matched >= ceil(required_ratio * total)`, computed
with exact fractions so that 0.9999 of 10_000 elements means 9_999, never 9_998.99. Shape and
dtype are strict. A non-finite output element fails unless the reference holds the very same
non-finite value there (e.g. -inf log-sum-exp of an empty row).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from fractions import Fraction
from typing import Any

import torch

DEFAULT_TOLERANCE: dict[str, Any] = {
    "atol": 1e-2,
    "rtol": 1e-2,
    "rule": "and",
    "required_matched_ratio": 1.0,
}


@dataclass
class OutputComparison:
    """How one output compared. `status` is PASSED or an INCORRECT_* status."""

    output: str
    status: str
    matched: int = 0
    total: int = 0
    required: int = 0
    nonfinite: int = 0
    max_abs: float = 0.0
    max_rel: float = 0.0
    max_rel_eps: float | None = None
    """max |out - ref| / (|ref| + 1e-8), FlashInfer-Bench's relative error (an element whose
    reference is 0 weighs 1e8 times its absolute error), for the traces we export."""
    message: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class _Elementwise:
    """Element by element, in float64: what every tolerance rule is computed from."""

    out: torch.Tensor
    diff: torch.Tensor
    """|out - ref| where both are finite, else 0."""
    scale: torch.Tensor
    """|ref|, what rtol multiplies (per element)."""
    finite: torch.Tensor
    both_special: torch.Tensor
    """The reference's non-finite value, matched exactly (e.g. -inf lse of an empty row)."""

    def largest_scale(self) -> float:
        """The abs_or_rel rule's scale: the largest finite |ref| of the whole output."""
        return float(torch.where(self.finite, self.scale, torch.zeros_like(self.scale)).max())


def _elementwise(out: torch.Tensor, ref: torch.Tensor) -> _Elementwise:
    o, r = out.double(), ref.double()
    finite = torch.isfinite(o) & torch.isfinite(r)
    return _Elementwise(
        out=o,
        diff=torch.where(finite, (o - r).abs(), torch.zeros_like(o)),
        scale=r.abs(),
        finite=finite,
        both_special=~torch.isfinite(r) & ((o == r) | (torch.isnan(o) & torch.isnan(r))),
    )


def tolerance_for(definition: Mapping[str, Any], output: str) -> dict[str, Any]:
    """The definition's tolerance for one output, per-output overrides applied."""
    base = dict(DEFAULT_TOLERANCE)
    declared = definition.get("tolerance") or {}
    base.update({k: v for k, v in declared.items() if k != "per_output"})
    base.update((declared.get("per_output") or {}).get(output, {}))
    return base


def required_count(total: int, ratio: float) -> int:
    return math.ceil(Fraction(str(ratio)) * total)


def compare_output(
    name: str, out: Any, ref: torch.Tensor, expected_dtype: torch.dtype, tol: Mapping[str, Any]
) -> OutputComparison:
    if not isinstance(out, torch.Tensor):
        return OutputComparison(name, "INCORRECT_SHAPE", message=f"got {type(out).__name__}")
    if tuple(out.shape) != tuple(ref.shape):
        msg = f"shape {tuple(out.shape)}, expected {tuple(ref.shape)}"
        return OutputComparison(name, "INCORRECT_SHAPE", message=msg)
    if out.dtype != expected_dtype:
        msg = f"dtype {out.dtype}, expected {expected_dtype}"
        return OutputComparison(name, "INCORRECT_DTYPE", message=msg)
    total = ref.numel()
    out, ref = out.detach().to(ref.device), ref.detach()
    if not (out.dtype.is_floating_point or ref.dtype.is_floating_point):
        matched = int((out == ref).sum())
        result = OutputComparison(name, "PASSED", matched, total, required_count(total, 1.0))
        result.max_abs = float((out.long() - ref.long()).abs().max()) if total else 0.0
        return _finish(result)
    e = _elementwise(out, ref)
    diff, scale = e.diff, e.scale
    atol, rtol = float(tol["atol"]), float(tol["rtol"])
    rule = tol["rule"]
    if rule == "and":
        ok = (diff <= atol) | (diff <= rtol * scale)
    elif rule == "allclose":
        ok = diff <= atol + rtol * scale
    elif rule == "abs_or_rel":
        ok = (diff <= atol) | (diff <= rtol * (e.largest_scale() if total else 0))
    else:
        return OutputComparison(name, "INCORRECT_NUMERICAL", message=f"unknown rule {rule!r}")
    ok = (ok & e.finite) | e.both_special
    matched = int(ok.sum())
    rel = torch.where(scale > 0, diff / scale.clamp_min(1e-30), diff)
    result = OutputComparison(
        name,
        "PASSED",
        matched,
        total,
        required_count(total, float(tol["required_matched_ratio"])),
        nonfinite=int((~torch.isfinite(e.out) & ~e.both_special).sum()),
        max_abs=float(diff.max()) if total else 0.0,
        max_rel=float(rel.max()) if total else 0.0,
        max_rel_eps=float((diff / (scale + 1e-8)).max()) if total else 0.0,
    )
    return _finish(result)


def _finish(result: OutputComparison) -> OutputComparison:
    if result.matched < result.required:
        result.status = "INCORRECT_NUMERICAL"
        result.message = (
            f"{result.matched}/{result.total} elements within tolerance, {result.required} required"
            + (f"; {result.nonfinite} non-finite" if result.nonfinite else "")
        )
    return result


def compare_outputs(
    definition: Mapping[str, Any],
    outputs: Sequence[Any],
    references: Sequence[torch.Tensor],
    dtypes: Sequence[torch.dtype],
) -> list[OutputComparison]:
    names = list(definition["outputs"])
    if len(outputs) != len(names):
        msg = f"returned {len(outputs)} outputs, definition has {len(names)} ({', '.join(names)})"
        return [OutputComparison(",".join(names), "INCORRECT_SHAPE", message=msg)]
    return [
        compare_output(name, out, ref, dtype, tolerance_for(definition, name))
        for name, out, ref, dtype in zip(names, outputs, references, dtypes, strict=True)
    ]


def tolerance_factor(out: Any, ref: torch.Tensor, tol: Mapping[str, Any]) -> float | None:
    """The smallest factor by which atol and rtol would have to grow for `out` to pass `tol`
    (<= 1: it passes; 3.5: missed by 3.5x); None for integer outputs, which compare exactly."""
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != tuple(ref.shape):
        return None
    if not (out.dtype.is_floating_point or ref.dtype.is_floating_point) or ref.numel() == 0:
        return None
    e = _elementwise(out.detach().to(ref.device).flatten(), ref.detach().flatten())
    atol, rtol = float(tol["atol"]), float(tol["rtol"])
    scale = e.scale if tol["rule"] != "abs_or_rel" else torch.full_like(e.scale, e.largest_scale())

    def needed(bound: torch.Tensor) -> torch.Tensor:
        return torch.where(e.diff == 0, torch.zeros_like(e.diff), e.diff / bound)

    if tol["rule"] == "allclose":
        factor = needed(atol + rtol * scale)
    else:
        factor = torch.minimum(
            needed(torch.full_like(e.diff, atol)), needed(rtol * scale)
        ).nan_to_num(nan=math.inf)
    factor = torch.where(e.finite, factor, torch.full_like(factor, math.inf))
    factor = torch.where(e.both_special, torch.zeros_like(factor), factor)
    count = max(1, required_count(e.diff.numel(), float(tol["required_matched_ratio"])))
    return float(torch.kthvalue(factor, count).values)


def strict_diagnostic(
    definition: Mapping[str, Any],
    outputs: Sequence[Any],
    references: Sequence[torch.Tensor],
    dtypes: Sequence[torch.dtype],
) -> dict[str, Any] | None:
    """The outputs against the definition's `diagnostic_tolerance` (a stricter, informative
    bound beside the formal one), with by how much each misses it; None when it declares none.
    Never changes the formal status."""
    strict = definition.get("diagnostic_tolerance")
    if not strict:
        return None
    stricter = {**definition, "tolerance": strict}
    found = []
    for comparison, out, ref in zip(
        compare_outputs(stricter, outputs, references, dtypes), outputs, references, strict=False
    ):
        tol = tolerance_for(stricter, comparison.output)
        found.append(
            {
                "output": comparison.output,
                "holds": comparison.status == "PASSED",
                "matched": comparison.matched,
                "total": comparison.total,
                "required": comparison.required,
                "factor": tolerance_factor(out, ref, tol),
            }
        )
    return {"holds": all(o["holds"] for o in found), "outputs": found}


def overall_status(comparisons: Sequence[OutputComparison]) -> str:
    """The first failing status in output order, else PASSED."""
    for comparison in comparisons:
        if comparison.status != "PASSED":
            return comparison.status
    return "PASSED"
