from __future__ import annotations

import numpy as np
import pytest

from envaudit.schema.expressions import ExpressionError, UnresolvedName, evaluate, expression_names


def test_constraints_over_axes_and_arrays() -> None:
    lengths = np.array([1, 4, 0], dtype=np.int32)
    ns = {"S": 4, "lengths": lengths}
    assert bool(evaluate("(lengths <= S).all() and lengths.sum() == 5", ns))
    assert not bool(evaluate("max(lengths) < S", ns))
    assert evaluate("2 * S * ceil(S / 3)", ns) == 16


@pytest.mark.parametrize(
    "source",
    [
        "__import__('os')",
        "x.__class__",
        "[y for y in range(3)]",
        "lambda: 1",
        "open('f')",
        "(x := 3)",
    ],
)
def test_unsafe_or_unknown_syntax_is_refused(source: str) -> None:
    with pytest.raises((ExpressionError, UnresolvedName)):
        evaluate(source, {"x": 1})


def test_names_exclude_functions() -> None:
    assert expression_names("max(M, N) * K") == {"M", "N", "K"}
    with pytest.raises(UnresolvedName) as info:
        evaluate("M + Q", {"M": 1})
    assert info.value.name == "Q"
