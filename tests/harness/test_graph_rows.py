"""A graph's captured calls each read a fresh input of their own (envaudit.harness.witness,
graph_call_cap): the rows the solution's process draws before a replay are the ones the judge
draws again for the call it checks, no two calls of a replay share one, and the judge counts
its allowance and reads its slots by its own layout, not by what the process declares. The
GPU half (a capture that copies answers between calls that used to share an input copy) is in
tests/harness/test_gpu_timing_integrity.py."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from envaudit.harness.timed_calls import JudgedCalls
from envaudit.harness.timing import MAX_GRAPH_CALLS, MAX_INPUT_COPIES
from envaudit.harness.witness import (
    FRESH_ROWS_BUDGET_BYTES,
    FreshInput,
    ModeWitness,
    Picked,
    graph_call_cap,
    judged_layout,
)

FRESH = FreshInput("x", (4, 3), torch.float32, {"dist": "normal"})
OUTPUTS = [((4, 3), torch.float32)]


def graph_calls(copies: int) -> tuple[JudgedCalls, list[torch.Tensor]]:
    """A graph-mode JudgedCalls on the CPU whose solution records the input it was given."""
    seen: list[torch.Tensor] = []

    def call(inputs: Mapping[str, Any], outputs: Any, prepared: Any) -> torch.Tensor:
        seen.append(inputs["x"])
        return inputs["x"] * 2

    calls = JudgedCalls(
        ask=lambda request: {"nonce": 12345},
        uuid="w",
        mode="graph",
        device=torch.device("cpu"),
        call=call,
        copies=[{"x": torch.zeros(4, 3)} for _ in range(copies)],
        prepared=[None] * copies,
        destination_passing=False,
        fresh=FRESH,
        layouts=OUTPUTS,
    )
    return calls, seen


def test_each_call_of_a_replay_reads_the_row_the_judge_draws_for_it() -> None:
    copies, calls_per_graph, step = 3, 7, 5
    calls, seen = graph_calls(copies)
    calls.capturing(calls_per_graph)
    for j in range(calls_per_graph):
        calls.capture(0, j)
        calls.launch(j % copies)
    calls.nonce = 12345
    calls.prime(step)
    calls.flushed(step)  # the replay's rows, drawn after the flush: the calls read them
    witness = ModeWitness("graph", {"copies": copies, "graphs": 1, "calls": 7}, None, 0.0, "cpu")
    mapped = witness.calls_of(step, 1)
    assert [slot for slot, *_ in mapped] == list(range(calls_per_graph))
    values = []
    for slot, drawn_step, copy, rows in mapped:
        item = Picked(0, slot, drawn_step, copy, 12345, rows=rows)
        expected = item.fresh_value(FRESH, torch.device("cpu"))
        assert torch.equal(seen[slot], expected), slot
        values.append(expected)
    # every call of the replay has an input of its own, though only 3 copies rotate
    assert len({v.sum().item() for v in values}) == calls_per_graph


def test_an_eager_call_draws_as_before() -> None:
    item = Picked(0, 0, 3, 1, 777)
    assert torch.equal(
        item.fresh_value(FRESH, torch.device("cpu")),
        FRESH.draw(777, 3, 1, torch.device("cpu")),
    )


def test_a_graph_holds_no_more_rows_than_the_budget() -> None:
    small = FreshInput("x", (1024,), torch.float32, None)
    big = FreshInput("x", (FRESH_ROWS_BUDGET_BYTES // 4 // 10,), torch.float32, None)
    huge = FreshInput("x", (FRESH_ROWS_BUDGET_BYTES,), torch.float32, None)
    assert graph_call_cap(None) == graph_call_cap(small) == MAX_GRAPH_CALLS
    assert graph_call_cap(big) == 10
    assert graph_call_cap(huge) == 1
    calls, _ = graph_calls(2)
    assert calls.graph_call_cap() == MAX_GRAPH_CALLS


def test_the_judge_counts_by_its_own_layout() -> None:
    """Declared draws, copies of outputs and flush sizes are not read; declared copies and
    calls are bounded by the harness's limits."""
    declared = {
        "copies": 99,
        "graphs": 99,
        "calls": 10_000,
        "draws_per_step": 2000,
        "copy_bytes": 1 << 30,
        "flush_bytes": 1 << 40,
    }
    cpu = torch.device("cpu")
    graph = judged_layout("graph", declared, FRESH, OUTPUTS, False, cpu)
    assert graph["copies"] == MAX_INPUT_COPIES and graph["calls"] == MAX_GRAPH_CALLS
    assert (graph["draws_per_step"], graph["copy_bytes"], graph["flush_bytes"]) == (1, 0, 0)
    eager = judged_layout("eager", declared, FRESH, OUTPUTS, False, cpu)
    assert (eager["draws_per_step"], eager["copy_bytes"]) == (1, 4 * 3 * 4)
    passing = judged_layout("eager", {"copies": "many"}, None, OUTPUTS, True, cpu)
    assert (passing["copies"], passing["draws_per_step"], passing["copy_bytes"]) == (1, 0, 0)
