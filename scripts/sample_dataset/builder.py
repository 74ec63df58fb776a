"""Writes the sample TraceSet under workloads/: definitions, workload lines, blobs and suites.

The sample dataset is generated, not hand-edited, so that every blob's bytes, hash and
provenance note can be reproduced from this repository with `make dataset`. UUIDs are
derived from the definition name and a workload label, so regenerating keeps them stable.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

# uuid5 namespace for the sample dataset's workload UUIDs.
SAMPLE_NAMESPACE = uuid.UUID("6f0a3c52-8d1e-4b7a-9c2f-1e5d7a9b3c40")
REFERENCES = Path(__file__).parent / "references"
GENERATOR = "scripts/sample_dataset"
SUITE_DESCRIPTIONS = {
    "smoke": "Tiny shapes that validate on a CPU in seconds.",
    "dev": "Realistic serving shapes for a quick GPU pass.",
    "all": "Every workload of the sample dataset.",
}


@dataclass
class DefinitionEntry:
    """One definition being built, with its workload lines in insertion order."""

    name: str
    op_type: str
    body: dict[str, Any]
    workloads: list[dict[str, Any]] = field(default_factory=list)


def _axis(value: str | int) -> dict[str, Any]:
    if value == "var":
        return {"type": "var"}
    if isinstance(value, int):
        return {"type": "const", "value": value}
    raise ValueError(f"axis must be 'var' or an int, got {value!r}")


class DatasetBuilder:
    """Collects definitions and workloads, then writes the whole TraceSet at once."""

    def __init__(self) -> None:
        self.definitions: dict[str, DefinitionEntry] = {}
        self.suites: dict[str, dict[str, list[str]]] = {name: {} for name in SUITE_DESCRIPTIONS}
        self._blobs: dict[str, dict[str, torch.Tensor]] = {}

    def definition(
        self,
        name: str,
        op_type: str,
        *,
        description: str,
        axes: dict[str, str | int],
        inputs: dict[str, dict[str, Any]],
        outputs: dict[str, dict[str, Any]],
        tolerance: dict[str, Any],
        constraints: list[str],
        tags: list[str],
        flops: str | None = None,
        bytes: str | None = None,
        mutable_inputs: list[str] | None = None,
        diagnostic_tolerance: dict[str, Any] | None = None,
        scale_probe_inputs: list[str] | None = None,
    ) -> DefinitionEntry:
        """Register a definition; its reference is read from references/<name>.py."""
        if name in self.definitions:
            raise ValueError(f"definition {name} registered twice")
        reference = (REFERENCES / f"{name}.py").read_text()
        body: dict[str, Any] = {
            "name": name,
            "op_type": op_type,
            "description": description,
            "tags": tags,
            "axes": {k: _axis(v) for k, v in axes.items()},
            "inputs": inputs,
            "outputs": outputs,
            "constraints": constraints,
            "reference": reference,
            "tolerance": tolerance,
        }
        if diagnostic_tolerance is not None:
            body["diagnostic_tolerance"] = diagnostic_tolerance
        if flops is not None:
            body["flops"] = flops
        if bytes is not None:
            body["bytes"] = bytes
        if mutable_inputs:
            body["mutable_inputs"] = mutable_inputs
        if scale_probe_inputs is not None:
            body["scale_probe_inputs"] = scale_probe_inputs
        entry = DefinitionEntry(name, op_type, body)
        self.definitions[name] = entry
        return entry

    def workload(
        self,
        entry: DefinitionEntry,
        label: str,
        *,
        axes: dict[str, int],
        suites: list[str],
        scalars: dict[str, int | float | bool] | None = None,
        tensors: dict[str, torch.Tensor] | None = None,
        provenance: str | None = None,
        seed: int | None = None,
    ) -> str:
        """Add one workload. Inputs not given as scalars or tensors are `random`.

        `tensors` are stored together in one safetensors blob (key = input name) whose
        sha256 and `provenance` note are written next to every reference to it.
        """
        uid = str(uuid.uuid5(SAMPLE_NAMESPACE, f"{entry.name}/{label}"))
        scalars = scalars or {}
        tensors = tensors or {}
        if tensors and not provenance:
            raise ValueError(f"{entry.name}/{label}: tensors need a provenance note")
        blob_path = f"blob/workloads/{entry.op_type}/{entry.name}/{entry.name}_{uid}.safetensors"
        inputs: dict[str, Any] = {}
        for input_name in entry.body["inputs"]:
            if input_name in scalars:
                inputs[input_name] = {"type": "scalar", "value": scalars[input_name]}
            elif input_name in tensors:
                inputs[input_name] = {
                    "type": "safetensors",
                    "path": blob_path,
                    "tensor_key": input_name,
                    "sha256": "",  # filled in by write()
                    "provenance": f"{provenance} Generated by {GENERATOR} ({label}).",
                }
            else:
                inputs[input_name] = {"type": "random"}
        unknown = (set(scalars) | set(tensors)) - set(entry.body["inputs"])
        if unknown:
            raise ValueError(f"{entry.name}/{label}: unknown inputs {sorted(unknown)}")
        if tensors:
            self._blobs[blob_path] = {k: v.contiguous() for k, v in tensors.items()}
        if seed is None:
            seed = int(hashlib.sha256(uid.encode()).hexdigest()[:8], 16)
        workload = {"uuid": uid, "axes": axes, "inputs": inputs, "seed": seed, "label": label}
        entry.workloads.append(workload)
        for suite in {*suites, "all"}:
            if suite not in self.suites:
                raise ValueError(f"{entry.name}/{label}: unknown suite {suite}")
            self.suites[suite].setdefault(entry.name, []).append(uid)
        return uid

    def write(self, root: Path) -> None:
        """Write the TraceSet into `root` via a temporary sibling, then swap it in."""
        root = root.resolve()
        root.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=root.parent))
        try:
            hashes = {path: self._write_blob(staging / path, t) for path, t in self._blobs.items()}
            for entry in self.definitions.values():
                self._write_definition(staging, entry, hashes)
            for suite, members in self.suites.items():
                doc = {
                    "schema_version": 1,
                    "name": suite,
                    "description": SUITE_DESCRIPTIONS[suite],
                    "workloads": members,
                }
                _write_json(staging / "suites" / f"{suite}.json", doc)
            for sub in ("definitions", "workloads", "blob", "suites"):
                (staging / sub).mkdir(exist_ok=True)
                target = root / sub
                if target.exists():
                    shutil.rmtree(target)
                os.replace(staging / sub, target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    @staticmethod
    def _write_blob(path: Path, tensors: dict[str, torch.Tensor]) -> str:
        path.parent.mkdir(parents=True, exist_ok=True)
        save_file(tensors, str(path))
        path.chmod(0o644)  # safetensors writes 0600; containers read blobs as a non-root user
        return hashlib.sha256(path.read_bytes()).hexdigest()

    @staticmethod
    def _write_definition(staging: Path, entry: DefinitionEntry, hashes: dict[str, str]) -> None:
        _write_json(staging / "definitions" / entry.op_type / f"{entry.name}.json", entry.body)
        lines = []
        for workload in entry.workloads:
            for spec in workload["inputs"].values():
                if spec["type"] == "safetensors":
                    spec["sha256"] = hashes[spec["path"]]
            trace = {"definition": entry.name, "workload": workload}
            trace.update({"solution": None, "evaluation": None})
            lines.append(json.dumps(trace, sort_keys=False))
        out = staging / "workloads" / entry.op_type / f"{entry.name}.jsonl"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text("\n".join(lines) + "\n")


def _write_json(path: Path, doc: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2) + "\n")
