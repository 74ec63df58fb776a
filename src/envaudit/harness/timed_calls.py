"""The solution process's side of judged timing (envaudit.harness.witness): the calls a
measurement times, each on a fresh input and writing a slot the judge can read, and the
handshake that lets the judge's clock bracket every batch.

Nothing here is trusted: it runs beside the solution, which may patch any of it. What it
reports is checked by the judge against what the judge measured and read itself; a lie here
can only make the solution fail or be flagged.
"""

from __future__ import annotations

import functools
import math
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

import torch

from envaudit.harness.timing import Window
from envaudit.harness.witness import (
    CHAINED_GRAPH,
    GRAPH_MODES,
    ROWS_COPY,
    FreshInput,
    GraphedChain,
    KeyBuffers,
    Slots,
    adopted_ipc,
    chain_key,
    device_key,
    graph_call_cap,
    keyed_on_host,
    new_key_buffers,
    poison_value,
    slot_count,
)

WINDOW_COSTS = ("judge_setup", "fresh_draws", "slot_copies", "handshakes")
"""What judged timing adds to a mode's wall time, each part kept in the line's phases as
`<mode>_<part>` (seconds, this process's clock: a profile, not a measurement of the solution):
the set-up the judge calibrates its allowance in, the fresh draws before each call, the copies
of returned outputs into their slots, and the messages that open and close each window."""

Ask = Callable[[dict[str, Any]], dict[str, Any]]
Call = Callable[[Mapping[str, Any], list[torch.Tensor] | None, Any], Any]


def as_outputs(result: Any) -> list[Any]:
    if isinstance(result, torch.Tensor):
        return [result]
    if isinstance(result, tuple | list):
        return list(result)
    return [result]


class JudgedCalls(Window):
    """One mode's timed calls of one workload: `launch(i)` runs the solution on input copy i,
    with its fresh input drawn for the current step and its outputs going to the current slot."""

    def __init__(
        self,
        *,
        ask: Ask,
        uuid: str,
        mode: str,
        device: torch.device,
        call: Call,
        copies: list[dict[str, Any]],
        prepared: list[Any],
        destination_passing: bool,
        fresh: FreshInput | None,
        layouts: list[tuple[tuple[int, ...], torch.dtype]],
    ) -> None:
        self.ask, self.uuid, self.mode, self.device = ask, uuid, mode, device
        self._call, self.copies, self.prepared = call, copies, prepared
        self.dps, self.fresh, self.layouts = destination_passing, fresh, layouts
        self.slot = 0
        self.first = 0
        self.nonce = 0
        self.ready = False
        self.slots: Slots | None = None
        self.graph_slots: dict[tuple[int, int], list[torch.Tensor]] = {}
        self.graphs = self.calls = 1
        self._graph_key = (0, 0)
        self.spent: dict[str, float] = dict.fromkeys(WINDOW_COSTS, 0.0)
        self.chain: GraphedChain | None = None
        self.rows: torch.Tensor | None = None
        """Graph mode: the fresh input once per captured call, row j for call j (capturing)."""
        self.bits: torch.Tensor | None = None
        """Chained graph: each row's mantissa bits, drawn before each replay, keyed in it."""
        self._zero_key: torch.Tensor | None = None
        self._keyed_bits: torch.Tensor | None = None  # one row's bits, keyed in place
        self._key_buffers: KeyBuffers = functools.cache(new_key_buffers)
        self._bits: torch.Tensor | None = None  # the op-by-op chain's working buffer
        if mode not in GRAPH_MODES:
            count = min(slot_count(layouts, device), 1000)
            self.slots = Slots(layouts, count, device)

    # ------------------------------------------------------------ the call itself

    def launch(self, copy: int) -> Any:
        outputs = None
        if self.dps and self.slots is not None:
            outputs = self.slots.outputs(self.slot)
        elif self.dps:
            outputs = self._graph_outputs()
        inputs = self.copies[copy]
        if self.rows is not None and self.fresh is not None:
            inputs = {**inputs, self.fresh.name: self.rows[self._graph_key[1]]}
        return self._call(inputs, outputs, self.prepared[copy])

    # ------------------------------------------------------------ Window

    def batch_cap(self) -> int:
        return self.slots.count if self.slots is not None else super().batch_cap()

    def open(self, first: int, steps: int) -> None:
        if not self.ready:
            self.setup()
        began = time.perf_counter()
        self.first = first
        answer = self.ask({"timing": "begin", "uuid": self.uuid, "mode": self.mode, "first": first})
        self.nonce = int(answer.get("nonce") or 0)
        self.spent["handshakes"] += time.perf_counter() - began

    def prime(self, step: int) -> None:
        self.slot = step - self.first
        if self.fresh is None:
            return
        began = time.perf_counter()
        if self.mode not in GRAPH_MODES:
            c = step % len(self.copies)
            self._draw_chained(self.copies[c][self.fresh.name], step, c)
        self.spent["fresh_draws"] += time.perf_counter() - began

    def flushed(self, step: int) -> None:
        """A graph's rows are drawn after the L2 flush, so that its calls find their fresh
        inputs in L2 (as far as the rows fit), as the rotating copies the rows replace were
        found after each copy's first call: drawn before the flush, every call read its row
        from device memory, and a 1.4 us copy of 64 KiB read 1.28x its figure over copies on
        an H100, 1.06x drawn after it (benchmarks/graph_rows.py, s74). Rows that do not fit
        in L2 are read from device memory either way (a 512 KiB copy's 256 rows: 1.20x)."""
        if self.mode not in GRAPH_MODES or self.rows is None or self.fresh is None:
            return
        began = time.perf_counter()
        stacked = self.fresh.stacked(len(self.rows))
        if self.bits is not None:  # chained: the rows themselves are keyed inside the replay
            stacked.nonce_bits_into(self.bits, self.nonce, step, ROWS_COPY)
        else:
            stacked.fill(self.rows, self.nonce, step, ROWS_COPY)
        self.spent["fresh_draws"] += time.perf_counter() - began

    def _draw_chained(self, target: torch.Tensor, step: int, copy: int) -> None:
        """The step's draw with the key of the previous step's outputs (its slot) unless it is
        the batch's first (FreshInput.draw_chained_into; on a GPU replayed in a GraphedChain):
        no step's input exists before the step before it has ended."""
        assert self.fresh is not None
        if step == self.first or self.slots is None:
            self.fresh.fill(target, self.nonce, step, copy)
            return
        previous = self.slots.outputs(step - 1 - self.first)
        if self.chain is not None:
            self.chain.draw(previous, self.nonce, step, copy)
            return
        key = chain_key(previous)
        if key is None:
            self.fresh.fill(target, self.nonce, step, copy)
            return
        self._bits = self.fresh.draw_chained_into(target, self.nonce, step, copy, key, self._bits)

    def keep(self, step: int, result: Any) -> None:
        if self.dps or self.slots is None:
            return
        began = time.perf_counter()
        slots = self.slots.outputs(step - self.first)
        for target, value in zip(slots, as_outputs(result), strict=False):
            if isinstance(value, torch.Tensor) and (value.shape, value.dtype) == (
                target.shape,
                target.dtype,
            ):
                target.copy_(value)
        self.spent["slot_copies"] += time.perf_counter() - began

    def close(self, samples_ms: list[float]) -> None:
        began = time.perf_counter()
        request = {"timing": "end", "uuid": self.uuid, "mode": self.mode}
        self.ask({**request, "samples_ms": samples_ms})
        self.spent["handshakes"] += time.perf_counter() - began

    def graph_call_cap(self) -> int:
        return graph_call_cap(self.fresh, chained=self.mode == CHAINED_GRAPH)

    def capturing(self, calls: int) -> None:
        """Each call of the graphs about to be captured reads a row of its own of the fresh
        input (witness.graph_call_cap says why), drawn once here so that the warm-up replays
        meet values of the input's kind, and again before every timed replay (flushed)."""
        if self.fresh is None:
            return
        self.rows = self.bits = self._keyed_bits = None  # an earlier capture's go back first
        stacked = self.fresh.stacked(calls)
        self.rows = torch.empty(stacked.shape, dtype=stacked.dtype, device=self.device)
        if self.mode == CHAINED_GRAPH:
            self.bits = torch.empty(stacked.shape, dtype=torch.int32, device=self.device)
            stacked.nonce_bits_into(self.bits, 0, 0, ROWS_COPY)
            self._zero_key = torch.zeros((), dtype=torch.int64, device=self.device)
            self._keyed_bits = torch.empty(self.fresh.shape, dtype=torch.int32, device=self.device)
        stacked.fill(self.rows, 0, 0, ROWS_COPY)

    def capture(self, graph: int, call: int) -> None:
        self._graph_key = (graph, call)
        if self.dps:
            self._graph_outputs()
        if self.bits is not None:
            self._key_row(graph, call)

    def _graph_outputs(self) -> list[torch.Tensor]:
        """The current captured call's output slots (a destination-passing solution's), made
        at its first use. Apart from `capture`, which keys a chained graph's row once a call:
        keyed twice, a row's bits are spent and it is another row than the judge draws."""
        if self._graph_key not in self.graph_slots:
            self.graph_slots[self._graph_key] = [
                torch.full(shape, poison_value(dtype), dtype=dtype, device=self.device)
                for shape, dtype in self.layouts
            ]
        return self.graph_slots[self._graph_key]

    def _key_row(self, graph: int, call: int) -> None:
        """Captured before call `call` of a chained graph: its row, keyed on the device by every
        bit of the outputs of the call before it (0 for a graph's first call), so that it does
        not exist until that call has returned. The row's bits are keyed in a copy: the warm-up
        replays, which no draw precedes, key the same bits again (keyed in place, they were
        spent after one replay, and the next row read NaN). witness.chain_call_ms captures the
        same kernels with no call between them: the chain's own cost, which the judge takes
        off."""
        assert self.fresh is not None and self.rows is not None and self.bits is not None
        assert self._zero_key is not None and self._keyed_bits is not None
        key = None
        if call > 0:
            key = device_key(self.graph_slots.get((graph, call - 1), []), self._key_buffers)
        self._keyed_bits.copy_(self.bits[call])
        self.fresh.keyed_into(
            self.rows[call], self._zero_key if key is None else key, self._keyed_bits
        )

    def captured(self, graph: int, call: int, result: Any) -> None:
        if not self.dps:
            self.graph_slots[(graph, call)] = [
                v for v in as_outputs(result) if isinstance(v, torch.Tensor)
            ]

    def graphs_ready(self, graphs: int, calls: int) -> None:
        self.graphs, self.calls = graphs, calls
        self.setup()

    # ------------------------------------------------------------ the judge

    def setup(self) -> None:
        """Tell the judge how the calls are laid out and where their outputs are. One fresh
        draw is made first, outside any window, and on a GPU in eager mode the chained steps'
        graphs are captured (GraphedChain, which runs each once): a kernel's first use loads
        it (CUDA loads modules lazily, ~15 ms each on the H100), a one-time cost that would
        otherwise land in the first batch and, in a short measurement, look like a slowed
        clock (6 of 68 honest eager lines of the H100's dev suites before the chained step was
        warmed too). The CPU loads nothing lazily and keys its draws on the host."""
        began = time.perf_counter()
        if self.fresh is not None:
            target = self.copies[0][self.fresh.name]
            self.fresh.fill(target, 0, 0, 0)
            if not keyed_on_host(self.device):
                if self.slots is not None and any(math.prod(s) for s, _ in self.layouts):
                    self.chain = self._graphed_chain()
                torch.cuda.synchronize(self.device)
        if self.mode in GRAPH_MODES:
            ordered = [
                self.graph_slots.get((g, j), [])
                for g in range(self.graphs)
                for j in range(self.calls)
            ]
            slots = adopted_ipc(ordered)
        else:
            assert self.slots is not None
            slots = self.slots.describe()
        # How the calls lie in the slots; what the harness does beside them (flush, draws,
        # copies) the judge reckons itself (witness.judged_layout).
        layout = {"copies": len(self.copies), "graphs": self.graphs, "calls": self.calls}
        request = {"timing": "setup", "uuid": self.uuid, "mode": self.mode}
        self.ask({**request, "layout": layout, "slots": slots})
        self.ready = True
        self.spent["judge_setup"] += time.perf_counter() - began

    def _graphed_chain(self) -> GraphedChain | None:
        """The chain's graphs, or None (its steps then launched op by op: the same values at
        the host's cost) where they cannot be captured, say while the solution's own threads
        hold the device in a capture of their own; the worker's log says why. The judge's
        allowance is calibrated on the graphed step, so short eager calls may then be flagged:
        a figure the judge could not verify is not ranked."""
        assert self.fresh is not None
        targets = [copy[self.fresh.name] for copy in self.copies]
        try:
            return GraphedChain(self.fresh, self.layouts, targets)
        except RuntimeError as exc:
            print(f"envaudit: chained steps launched op by op: {exc}", file=sys.stderr)
            return None

    def finish(self, defer: bool = False) -> dict[str, Any]:
        """The judge's verdict on the calls it picked (and its clock's summary); with `defer`
        (another mode's measurement follows), the judge checks these calls with that mode's."""
        request = {"timing": "finish", "uuid": self.uuid, "mode": self.mode, "defer": defer}
        verdict = self.ask(request)
        self.graph_slots.clear()
        self.rows = self.bits = self._keyed_bits = None
        if self.slots is not None:
            self.slots.close()
            self.slots = None
        return verdict
