"""Reference outputs, computed once per (definition, workload, input draw, device) and cached.

The key covers the definition's full JSON (so a changed reference or tolerance-independent
field invalidates it), the workload's JSON, the input draw (seed offset) and the device type.
Entries are safetensors files written to a temporary name and renamed, so an interrupted run
never leaves a half-written entry; readable by every user (a container's worker is not the user
who made the folder). With a key (the job's seal: envaudit.schema.progress), an entry's name is
the HMAC of its cache key, so a process that cannot list the folder and has no key cannot find
the entry for a workload: the container runtimes mount the folder without read permission for
the worker's user (docs/harness.md, "What a solution can reach"). Only the judge reads it.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from envaudit.harness.inputs import INPUT_DRAW, axis_values, run_reference


def cache_key(
    definition: Mapping[str, Any], workload: Mapping[str, Any], seed_offset: int, device: str
) -> str:
    doc = {"d": definition, "w": workload, "s": seed_offset, "dev": device, "draw": INPUT_DRAW}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


class ReferenceCache:
    """Reference outputs on disk (when a directory is given) or only in memory."""

    def __init__(self, directory: Path | None, key: str | None = None) -> None:
        self.directory = directory
        self.key = key
        self.hits = 0

    def entry(self, cache_key_hex: str) -> Path:
        """Where one entry lives: flat in the folder, named by the key's HMAC when keyed."""
        assert self.directory is not None
        name = cache_key_hex
        if self.key is not None:
            name = hmac.new(self.key.encode(), name.encode(), hashlib.sha256).hexdigest()
        return self.directory / f"{name}.safetensors"

    def outputs(
        self,
        definition: Mapping[str, Any],
        workload: Mapping[str, Any],
        draw: Callable[[], Mapping[str, Any]],
        seed_offset: int,
        device: torch.device,
    ) -> tuple[torch.Tensor, ...]:
        """The reference outputs of one draw; `draw` makes the inputs, asked only when the
        entry is not in the cache (a hit reads no blob and draws nothing)."""
        key = cache_key(definition, workload, seed_offset, device.type)
        path = self.entry(key) if self.directory is not None else None
        if path is not None:
            try:
                found = read_outputs(path, device)
            except torch.cuda.OutOfMemoryError:
                raise
            except Exception:
                found = None  # absent, or unreadable here: computed again and replaced
            if found is not None:
                self.hits += 1
                return found
        with torch.no_grad():
            outputs = run_reference(definition, draw(), axis_values(definition, workload))
        if path is not None:
            with contextlib.suppress(OSError):  # a cache that cannot be written is no cache
                _write_atomically(path, {f"out{i}": t.contiguous() for i, t in enumerate(outputs)})
        return outputs


def read_outputs(path: Path, device: torch.device) -> tuple[torch.Tensor, ...]:
    """One cache entry's outputs, in order, on `device`: mapped from the file on the CPU, then
    copied. Read straight to a CUDA device (`load_file(device=...)`), the first 201 MB entry a
    process read took 115-156 ms on the H200 machine, against 29-48 ms this way, every time
    (benchmarks/reference_read.py); a worker reads each entry once."""
    stored = load_file(str(path))
    return tuple(stored[f"out{i}"].to(device) for i in range(len(stored)))


def _write_atomically(path: Path, tensors: dict[str, torch.Tensor]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    os.close(fd)
    try:
        save_file(tensors, tmp)
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would shut out a container's user
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
