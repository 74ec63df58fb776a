"""Read safetensors blobs without torch: header parsing, integrity checks and numpy views.

The header is parsed here rather than through the safetensors library so that a truncated or
corrupt file gets a message saying exactly what is wrong (header length, JSON, offsets), and
so that `check-inputs` needs no tensor framework.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from envaudit.schema.dtypes import ITEMSIZE, SAFETENSORS_CODE
from envaudit.schema.paths import sha256_file

DTYPE_OF_CODE = {code: name for name, code in SAFETENSORS_CODE.items()}
NUMPY_DTYPE = {
    "float32": np.float32,
    "float16": np.float16,
    "int64": np.int64,
    "int32": np.int32,
    "int16": np.int16,
    "int8": np.int8,
    "uint8": np.uint8,
    "bool": np.bool_,
}
MAX_HEADER_BYTES = 100 * 1024 * 1024


class BlobError(ValueError):
    """A blob file is not a readable safetensors file."""


@dataclass(frozen=True)
class TensorEntry:
    """One tensor of a blob: dtype (FlashInfer-Bench name), shape and byte range in the file."""

    dtype: str
    shape: tuple[int, ...]
    start: int
    end: int


@dataclass(frozen=True)
class BlobInfo:
    """A parsed blob: its sha256 and its tensors."""

    path: Path
    sha256: str
    tensors: dict[str, TensorEntry]

    def array(self, key: str) -> np.ndarray | None:
        """The tensor as a numpy array, or None when numpy has no such dtype (bf16, fp8)."""
        entry = self.tensors[key]
        np_dtype = NUMPY_DTYPE.get(entry.dtype)
        if np_dtype is None:
            return None
        with self.path.open("rb") as handle:
            handle.seek(entry.start)
            data = handle.read(entry.end - entry.start)
        return np.frombuffer(data, dtype=np_dtype).reshape(entry.shape)


def read_blob(path: Path) -> BlobInfo:
    """Parse and vet a safetensors file; raise BlobError saying what is broken."""
    size = path.stat().st_size
    with path.open("rb") as handle:
        prefix = handle.read(8)
        if len(prefix) < 8:
            raise BlobError(f"file is {size} bytes, shorter than the 8-byte header length")
        (header_len,) = struct.unpack("<Q", prefix)
        if header_len > MAX_HEADER_BYTES or 8 + header_len > size:
            raise BlobError(f"header length {header_len} does not fit in a {size}-byte file")
        raw = handle.read(header_len)
    try:
        header = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BlobError(f"header is not valid JSON ({exc})") from None
    if not isinstance(header, dict):
        raise BlobError("header is not a JSON object")
    data_start = 8 + header_len
    tensors = {}
    for key, meta in header.items():
        if key == "__metadata__":
            continue
        tensors[key] = _tensor_entry(key, meta, data_start, size)
    return BlobInfo(path, sha256_file(path), tensors)


def _tensor_entry(key: str, meta: object, data_start: int, size: int) -> TensorEntry:
    if not isinstance(meta, dict) or not {"dtype", "shape", "data_offsets"} <= set(meta):
        raise BlobError(f"tensor {key}: header entry lacks dtype/shape/data_offsets")
    dtype = DTYPE_OF_CODE.get(meta["dtype"])
    if dtype is None:
        raise BlobError(f"tensor {key}: unsupported dtype {meta['dtype']}")
    shape = tuple(int(d) for d in meta["shape"])
    begin, end = (int(x) for x in meta["data_offsets"])
    expected = math.prod(shape) * ITEMSIZE[dtype]
    if end - begin != expected:
        raise BlobError(f"tensor {key}: {end - begin} data bytes, shape {shape} needs {expected}")
    if data_start + end > size:
        raise BlobError(
            f"tensor {key}: data ends at byte {data_start + end} but the file has {size}"
            " (truncated?)"
        )
    return TensorEntry(dtype, shape, data_start + begin, data_start + end)
