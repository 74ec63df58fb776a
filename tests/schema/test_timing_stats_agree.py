"""The two declarations of a timing mode's statistics agree field for field: the harness's
dataclass (harness/timing.py, which may import only the standard library, torch and
safetensors, so it cannot use the schema's model) writes what the result line's model
(schema/result_line.py) reads."""

from __future__ import annotations

import dataclasses

from envaudit.harness.timing import TimingStats as Written
from envaudit.harness.timing import summarize
from envaudit.schema.result_line import TimingStats as Read

ADDED_AFTER_TIMING = {"judge"}
"""Written into a mode's statistics by the judge (harness/judge.py), not by timing."""

SAMPLE = {
    "float | None": 1.5,
    "int | None": 3,
    "str | None": "precise",
    "bool | None": True,
    "list[int] | None": [1410, 1980],
}
"""A value of each optional field's type, to fill every field the harness may leave empty."""


def test_the_same_fields_in_the_same_order() -> None:
    written = [f.name for f in dataclasses.fields(Written)]
    read = [name for name in Read.model_fields if name not in ADDED_AFTER_TIMING]
    assert written == read


def test_every_value_the_harness_writes_reads_back_as_written() -> None:
    """The line model is strict: a field typed differently on the two sides fails here."""
    stats = summarize([1.0, 2.0, 3.0, 4.0], "cuda_graph", warmup=2, copies=3, flush_bytes=1 << 20)
    optional = {
        f.name: SAMPLE[str(f.type)] for f in dataclasses.fields(Written) if f.default is None
    }
    assert set(optional) and len(optional) == sum(
        1 for f in dataclasses.fields(Written) if f.default is None
    )
    filled = dataclasses.replace(stats, **optional).as_dict()
    read = Read.model_validate(filled)
    assert read.model_dump(exclude_unset=True) == filled
    assert set(Read.model_fields) - set(filled) == ADDED_AFTER_TIMING
