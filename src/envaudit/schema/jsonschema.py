"""Write the JSON Schema of every on-disk model: `python -m envaudit.schema.jsonschema docs/schema`.

The schemas are generated from the models and committed; a test fails when they drift.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from pydantic import BaseModel

from envaudit.schema.interfaces import Interface
from envaudit.schema.models import MODELS
from envaudit.schema.result_line import ResultLine
from envaudit.schema.summary import Preferred, Summary

# The TraceSet formats plus envaudit's own files that live beside them under the data root, the
# result line every run writes, and the report's summary.json and preferred-solutions.json.
SCHEMA_MODELS: dict[str, type[BaseModel]] = {
    **MODELS,
    "interface": Interface,
    "result-line": ResultLine,
    "summary": Summary,
    "preferred-solutions": Preferred,
}


def render_schemas() -> dict[str, str]:
    """File name -> JSON text for each model's schema."""
    return {
        f"{name}.schema.json": json.dumps(model.model_json_schema(), indent=2, sort_keys=True)
        + "\n"
        for name, model in SCHEMA_MODELS.items()
    }


def main(argv: list[str]) -> int:
    out = Path(argv[1] if len(argv) > 1 else "docs/schema")
    out.mkdir(parents=True, exist_ok=True)
    for name, text in render_schemas().items():
        (out / name).write_text(text)
    print(f"wrote {len(SCHEMA_MODELS)} schemas to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
