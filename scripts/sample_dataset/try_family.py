"""Build one family into a temporary root and run its references on the smoke workloads.

`python -m scripts.sample_dataset.try_family gdn [--suite smoke]` — a quick loop for authors of
a family module: it checks constraints, runs each reference and checks output shapes/dtypes.
"""

from __future__ import annotations

import argparse
import importlib
import json
import tempfile
import time
from pathlib import Path

import torch

from envaudit.harness.inputs import (
    axis_values,
    check_constraints,
    concrete_shape,
    materialize_inputs,
    run_reference,
    torch_dtype,
)
from scripts.sample_dataset.builder import DatasetBuilder


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("family")
    parser.add_argument("--suite", default="smoke")
    args = parser.parse_args()
    builder = DatasetBuilder()
    importlib.import_module(f"scripts.sample_dataset.families.{args.family}").build(builder)
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        builder.write(root)
        suite = json.loads((root / "suites" / f"{args.suite}.json").read_text())["workloads"]
        for entry in builder.definitions.values():
            definition = entry.body
            for workload in entry.workloads:
                if workload["uuid"] not in suite.get(entry.name, []):
                    continue
                start = time.perf_counter()
                inputs = materialize_inputs(definition, workload, root)
                broken = check_constraints(definition, workload, inputs)
                outputs = run_reference(definition, inputs)
                axes = axis_values(definition, workload)
                problems = [f"constraint false: {c}" for c in broken]
                for out, (name, spec) in zip(outputs, definition["outputs"].items(), strict=True):
                    want = concrete_shape(spec, axes)
                    if tuple(out.shape) != want:
                        problems.append(f"{name}: shape {tuple(out.shape)} != {want}")
                    if out.dtype != torch_dtype(spec["dtype"]):
                        problems.append(f"{name}: dtype {out.dtype} != {spec['dtype']}")
                    if out.dtype.is_floating_point and not torch.isfinite(out.float()).all():
                        problems.append(f"{name}: non-finite values")
                took = time.perf_counter() - start
                status = "ok" if not problems else "FAIL " + "; ".join(problems)
                failures += bool(problems)
                print(f"{entry.name} {workload['label']} {took:.2f}s {status}")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
