"""Regenerate the sample dataset: `python -m scripts.sample_dataset.build workloads`."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import torch

from scripts.sample_dataset.builder import DatasetBuilder

# One module per family of the audit's table, in the order the report lists them.
FAMILIES = [
    "attention",
    "neighborhood",
    "gdn",
    "qsa_index",
    "moe_router",
    "sparse_attention",
    "gemm",
]


def main(argv: list[str]) -> int:
    root = Path(argv[1] if len(argv) > 1 else "workloads")
    torch.manual_seed(0)
    builder = DatasetBuilder()
    for family in FAMILIES:
        module = importlib.import_module(f"scripts.sample_dataset.families.{family}")
        module.build(builder)
    builder.write(root)
    n_workloads = sum(len(d.workloads) for d in builder.definitions.values())
    print(f"wrote {len(builder.definitions)} definitions, {n_workloads} workloads to {root}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
