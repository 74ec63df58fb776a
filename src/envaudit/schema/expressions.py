"""Safe evaluation of the Python expressions a definition carries (constraints, FLOP/byte formulas).

Standard library only: the harness imports this inside minimal solution environments, and the
dataset layer uses it in `check-inputs`. Expressions are parsed first and only a small subset of
Python is accepted (no dunder attributes, no lambdas, no comprehensions over arbitrary code), so
evaluating a dataset's constraint cannot reach into the interpreter.
"""

from __future__ import annotations

import ast
import builtins
import math
from collections.abc import Mapping
from typing import Any

ALLOWED_FUNCTIONS: dict[str, Any] = {
    "abs": abs,
    "all": all,
    "any": any,
    "bool": bool,
    "float": float,
    "int": int,
    "len": len,
    "max": max,
    "min": min,
    "range": range,
    "sum": sum,
    "ceil": math.ceil,
    "floor": math.floor,
    "log2": math.log2,
    "sqrt": math.sqrt,
}

_ALLOWED_NODES = (
    ast.Expression,
    ast.BoolOp,
    ast.BinOp,
    ast.UnaryOp,
    ast.Compare,
    ast.Call,
    ast.Attribute,
    ast.Subscript,
    ast.Slice,
    ast.Name,
    ast.Load,
    ast.Constant,
    ast.Tuple,
    ast.List,
    ast.IfExp,
    ast.keyword,
    ast.operator,
    ast.boolop,
    ast.unaryop,
    ast.cmpop,
)


class ExpressionError(ValueError):
    """An expression is not valid Python or uses syntax outside the accepted subset."""


class UnresolvedName(LookupError):
    """An expression names something that is not available yet (e.g. a random input)."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


def parse_expression(source: str) -> ast.Expression:
    """Parse and vet one expression; raise ExpressionError naming the offending syntax."""
    try:
        tree = ast.parse(source.strip(), mode="eval")
    except SyntaxError as exc:
        raise ExpressionError(f"not a Python expression: {exc.msg}") from None
    for node in ast.walk(tree):
        if not isinstance(node, _ALLOWED_NODES):
            raise ExpressionError(f"syntax not allowed in expressions: {type(node).__name__}")
        if isinstance(node, ast.Attribute) and node.attr.startswith("_"):
            raise ExpressionError(f"private attribute not allowed: .{node.attr}")
        if isinstance(node, ast.Name) and node.id.startswith("_"):
            raise ExpressionError(f"private name not allowed: {node.id}")
    return tree


def expression_names(source: str) -> set[str]:
    """Free names an expression reads (excluding the allowed functions)."""
    tree = parse_expression(source)
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    return names - set(ALLOWED_FUNCTIONS)


def evaluate(source: str, namespace: Mapping[str, Any]) -> Any:
    """Evaluate an expression over `namespace` (axes, scalars, tensors).

    Raises UnresolvedName when the expression reads a name the namespace lacks.
    """
    tree = parse_expression(source)
    missing = expression_names(source) - set(namespace)
    if missing:
        raise UnresolvedName(sorted(missing)[0])
    code = compile(tree, "<expression>", "eval")
    # numpy's C code imports through the calling frame's builtins, so `__import__` must be
    # there; expressions themselves cannot reach it (names starting with `_` are refused).
    scope = {"__builtins__": {"__import__": builtins.__import__}, **ALLOWED_FUNCTIONS, **namespace}
    return eval(code, scope)
