"""Tensor dtype names of the FlashInfer-Bench format, with their sizes. Standard library only."""

from __future__ import annotations

# FlashInfer-Bench wrote float8_e4m3fn in early datasets and float8_e4m3 later; both are read.
DTYPE_ALIASES = {"float8_e4m3fn": "float8_e4m3"}

ITEMSIZE = {
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "float8_e4m3": 1,
    "float8_e5m2": 1,
    "float4_e2m1": 1,
    "int64": 8,
    "int32": 4,
    "int16": 2,
    "int8": 1,
    "uint8": 1,
    "bool": 1,
}

FLOAT_DTYPES = frozenset(
    {"float32", "float16", "bfloat16", "float8_e4m3", "float8_e5m2", "float4_e2m1"}
)

# safetensors header dtype codes for each name.
SAFETENSORS_CODE = {
    "float32": "F32",
    "float16": "F16",
    "bfloat16": "BF16",
    "float8_e4m3": "F8_E4M3",
    "float8_e5m2": "F8_E5M2",
    "int64": "I64",
    "int32": "I32",
    "int16": "I16",
    "int8": "I8",
    "uint8": "U8",
    "bool": "BOOL",
}


def canonical_dtype(name: str) -> str:
    """Map an accepted alias to the one name used internally."""
    return DTYPE_ALIASES.get(name, name)
