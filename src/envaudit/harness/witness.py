"""Timed calls the solution's process cannot fake: fresh inputs, judged outputs, the judge's clock.

The solution's process measures a solution's time (device events, or a wall clock on the CPU),
and whatever runs in that process can patch those clocks, serve an earlier answer, leave work
on a side stream, or record no work while a CUDA graph is captured. So every measured batch of
calls runs inside a *window* the judge opens and closes (docs/harness.md, "Timing integrity"):

- The judge stamps its own monotonic clock when it sends `go` and when it reads the batch's end;
  a clock in the solution's process cannot move those stamps. The batch's reported time must fit
  the window: `window <= RATIO x reported + allowance`, where the allowance is what the harness
  honestly does inside the window beside the timed calls (the L2 flush, the fresh draw, the copy
  of a returned output), each measured by the judge on its own context or CPU, plus a fixed
  per-step and per-batch margin. A mode whose windows do not fit is flagged: its figure stays in
  the line, marked, and never ranks the solution.
- Every timed call gets an input it has not seen: the first random floating-point input of the
  definition (`fresh_input`) is drawn afresh before each call (eager, CPU) or each replay (graph),
  from a nonce the judge sends with `go`, so nothing can be computed before the window opens and
  no cache of earlier answers is right. Within a batch (eager, CPU) each step's draw then
  depends on a key taken from the bits of the previous step's outputs (`chain_key`): the draw
  alone is predictable from the nonce, so without the chain a solution could compute later
  steps' answers ahead, in parallel, and return each at once when its step comes. On the CPU
  the key seeds the draw; on a GPU, where reading it would wait for the device, the device
  XORs it into the random mantissa bits of the nonce's draw before they are mapped to the
  draw's rule (`FreshInput.draw_keyed_into`). Either way the step's values are new: an answer
  computed ahead on the nonce's draw answers nothing (docs/harness.md).
- Every timed call writes its outputs to a slot of its own (the batch's slots are memory the judge
  maps: a sealed memfd on the CPU, CUDA IPC on a GPU), and at the end of each batch the judge
  reads, itself, the slots a reservoir sample picks (CHECKS per mode, uniform over every timed
  call of the measurement): the solution's process is not asked and cannot know which call is
  judged until after it has ended. After the last batch the judge computes the reference for
  each picked call's inputs and compares; a wrong answer fails the workload as the validation
  would.

Standard library and torch only (the harness's rule).
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import math
import mmap
import os
import random
import re
import secrets
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from envaudit.harness.inputs import axis_values, concrete_shape, tensor_bytes, torch_dtype
from envaudit.harness.timing import (
    MAX_GRAPH_CALLS,
    MAX_GRAPHS,
    MAX_INPUT_COPIES,
    flush_bytes,
    median_halfwidth,
    summarize,
)

CHECKS = 1
"""Timed calls the judge checks per mode, drawn uniformly over all of them (reservoir). One is
enough against a cheat that moves the recorded figure: the figure is a median, so stale answers
must serve more than half the timed calls to move it, and then each mode's check catches them
with a chance above one half, per workload (below 2^-12 to escape a 12-workload suite). Each
check costs one reference computed on its fresh input, which no cache can hold: on the CPU that
was most of the judge's added cost (a second check doubled it)."""
SLOT_BUDGET_BYTES = {"cuda": 1 << 30, "cpu": 256 << 20}
"""Memory the output slots of one batch may take: a batch holds at most this many calls."""
RATIO = 1.25
"""How much longer than the reported time a window may be, beside the allowance."""
STEP_MARGIN_MS = {"cuda": 0.02, "cpu": 0.5}
"""Per step, the host work inside a window that no event brackets (queueing the flush and the
events, the loop), measured on the H100 at well under 0.02 ms. On the CPU the solution's
process runs that loop in Python beside the call on the same cores: an audit of the 21 CPU
baselines on this project's 2-core machine saw 0.4-1.1 ms a step outside the calls, of which
the judge's own draw-and-copy measurement explained about half (one honest line flagged at
0.1 ms)."""
BATCH_MARGIN_MS = 3.0
"""Per batch: the two messages of the handshake and the device synchronisation."""
ALLOWANCE_SLACK = 1.5
"""The judge's own measurements of the flush, draw and copy, times this."""


FIGURE_FIELDS = (
    "median_ms",
    "min_ms",
    "max_ms",
    "q1_ms",
    "q3_ms",
    "iqr_ms",
    "mean_ms",
    "iterations",
)
"""The statistics of a timing mode that the judge computes itself (ModeWitness.figure): what
the report ranks by, its noise and its intervals read."""
FRESH_ROWS_BUDGET_BYTES = 1 << 30
"""Memory a graph's fresh rows may take (one row of the fresh input per captured call): a
graph holds at most this many bytes' worth of calls (graph_call_cap)."""
ROWS_COPY = -1
"""The copy number a graph's rows are drawn under (one draw of all of them, before each
replay): no per-copy draw shares its seed."""
FRESH_DISTS = ("normal", "uniform")
MANTISSA_BITS = 23
"""A float32's mantissa: the random bits a chained draw on a GPU keys (draw_keyed_into)."""
KEY_BITS_FROM = 40
"""Where in the key those 23 bits start: its high bits, which every bit of every word moves
(a product carries low bits up, never down)."""
ONE_BITS = 0x3F800000
"""1.0's float32 bits: with any 23 mantissa bits below them, a float in [1, 2)."""
CHAINED_GRAPH = "chained_graph"
"""The mode that bounds the graph figure from below: the same graph, but each captured call's
row keyed on the device by every bit of the call before's outputs (JudgedCalls), so that no
capture can batch its calls (docs/harness.md, "Timing integrity", item 3)."""
GRAPH_MODES = ("graph", CHAINED_GRAPH)
TIMING_MODES = ("eager", *GRAPH_MODES)


def _seed(nonce: int, step: int, copy: int, name: str, key: int | None = None) -> int:
    text = f"{nonce}:{step}:{copy}:{name}" + ("" if key is None else f":{key}")
    digest = hashlib.sha256(text.encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def keyed_on_host(device: torch.device) -> bool:
    """Whether a chained step's draw on `device` is seeded with the key itself (the CPU, where
    the key is a host value once computed) rather than keyed on the device (a GPU, where
    reading the key would wait for the step before: draw_keyed_into). Both give new values;
    seeding costs the CPU nothing beyond the draw, where the device's keying costs six kernels."""
    return device.type != "cuda"


@functools.cache
def _generator(device: str) -> torch.Generator:
    """One generator per device, seeded afresh for every draw: made once, not on every timed
    step (seeding a kept generator draws the same bits as a new one seeded alike)."""
    return torch.Generator(device=device)


@dataclass(frozen=True)
class FreshInput:
    """The input drawn afresh for every timed call: its name, shape, dtype and draw rule."""

    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    init: Mapping[str, Any] | None

    def draw(
        self, nonce: int, step: int, copy: int, device: torch.device, key: int | None = None
    ) -> torch.Tensor:
        """This step's value for input copy `copy`, in a tensor of its own (the judge's);
        where the step is chained, with `key` (chain_key of the previous step's outputs)."""
        drawn = torch.empty(self.shape, dtype=self.dtype, device=device)
        if key is None:
            self.draw_into(drawn, nonce, step, copy)
        else:
            key_tensor = torch.tensor(key, dtype=torch.int64, device=device)
            self.draw_chained_into(drawn, nonce, step, copy, key_tensor)
        return drawn

    def fill(
        self, target: torch.Tensor, nonce: int, step: int, copy: int, key: int | None = None
    ) -> None:
        """draw_into for a target of this input's shape in any layout or dtype: drawn in place
        where it is contiguous and of this input's dtype, copied in otherwise."""
        if target.is_contiguous() and (tuple(target.shape), target.dtype) == (
            self.shape,
            self.dtype,
        ):
            self.draw_into(target, nonce, step, copy, key)
        else:
            target.copy_(self.draw(nonce, step, copy, target.device, key))

    def draw_chained_into(
        self,
        target: torch.Tensor,
        nonce: int,
        step: int,
        copy: int,
        key: torch.Tensor,
        bits: torch.Tensor | None = None,
    ) -> torch.Tensor | None:
        """`target` (this input's shape, any layout or dtype) = a chained step's draw, with
        `key` (chain_key of the previous step's outputs, on the target's device): seeded with
        it where keyed_on_host, else keyed on the device (draw_keyed_into, its working
        `bits` allocated here when None). Returns `bits` for the next step (None where
        seeded)."""
        if keyed_on_host(target.device):
            self.fill(target, nonce, step, copy, int(key))
            return None
        return self.draw_keyed_into(target, nonce, step, copy, key, bits)

    def draw_keyed_into(
        self,
        target: torch.Tensor,
        nonce: int,
        step: int,
        copy: int,
        key: torch.Tensor,
        bits: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """`target` = a draw of this input's rule whose values depend on `key`, a tensor
        read on its own device and never by the host (the host would wait for the step
        before). The nonce's draw gives every element 23 random mantissa bits; 23 bits of the
        key (from KEY_BITS_FROM) are XORed into all of them (a bijection of the grid, so each
        element stays uniform on it), and the result is mapped to the rule (the normal's
        inverse CDF, or the uniform's range). Every value is new: an answer computed ahead on
        the nonce's draw is no answer to this one, whatever the kernel (a roll, which only
        moved the draw's rows, left answers that move with their input open). Six kernels,
        one working buffer of int32 (`bits`, returned for the next step)."""
        if bits is None:
            bits = torch.empty(self.shape, dtype=torch.int32, device=target.device)
        self.nonce_bits_into(bits, nonce, step, copy)
        self.keyed_into(target, key, bits)
        return bits

    def nonce_bits_into(self, bits: torch.Tensor, nonce: int, step: int, copy: int) -> None:
        """draw_keyed_into's first kernel: the nonce's 23 random mantissa bits under 1.0's."""
        generator = _generator(str(bits.device))
        generator.manual_seed(_seed(nonce, step, copy, self.name))
        bits.random_(ONE_BITS, ONE_BITS + (1 << MANTISSA_BITS), generator=generator)

    def keyed_into(self, target: torch.Tensor, key: torch.Tensor, bits: torch.Tensor) -> None:
        """draw_keyed_into's other kernels: `key` into the nonce's `bits` (overwritten), then
        the rule's map into `target`. No random numbers, so a CUDA graph can hold them
        (GraphedChain)."""
        mask = torch.bitwise_right_shift(key, KEY_BITS_FROM).bitwise_and_((1 << MANTISSA_BITS) - 1)
        bits.bitwise_xor_(mask)
        value = bits.view(torch.float32)  # in [1, 2), every mantissa as likely
        init = dict(self.init or {"dist": "normal"})
        if init.get("dist") == "uniform":
            low, high = float(init.get("low", 0.0)), float(init.get("high", 1.0))
            torch.add(value.mul_(high - low), low - (high - low), out=target)
            return
        value.sub_(1.0 - 2.0**-24)  # (0, 1), exactly: never the inverse CDF's 0 or 1
        mean, std = float(init.get("mean", 0.0)), float(init.get("std", 1.0))
        if (mean, std) == (0.0, 1.0):
            torch.special.ndtri(value, out=target)
        else:
            torch.add(torch.special.ndtri(value, out=value).mul_(std), mean, out=target)

    def draw_into(
        self, target: torch.Tensor, nonce: int, step: int, copy: int, key: int | None = None
    ) -> None:
        """Write this step's value into `target` (contiguous, of this input's shape and dtype)
        with one kernel, from torch's own generator (Philox on a GPU): both processes write the
        same bits from the same seed on the same device, at memory speed, where the counter
        draw of envaudit.harness.inputs does not. One kernel and no allocation, because it runs
        before every timed call and all of it is wall time the audit pays. `key`, where given,
        is part of the seed (a chained step on the CPU)."""
        generator = _generator(str(target.device))
        generator.manual_seed(_seed(nonce, step, copy, self.name, key))
        init = dict(self.init or {"dist": "normal"})
        if init.get("dist") == "uniform":
            low, high = float(init.get("low", 0.0)), float(init.get("high", 1.0))
            target.uniform_(low, high, generator=generator)
        else:
            mean, std = float(init.get("mean", 0.0)), float(init.get("std", 1.0))
            target.normal_(mean, std, generator=generator)

    def describe(self) -> dict[str, Any]:
        return {"name": self.name}

    def chained_row(
        self, nonce: int, step: int, rows: int, row: int, key: int, device: torch.device
    ) -> torch.Tensor:
        """Row `row` of a chained graph's replay (JudgedCalls, CHAINED_GRAPH): the nonce's
        mantissa bits of all `rows` rows drawn by one kernel (ROWS_COPY), this row's keyed by
        `key` (chain_key of the call before's outputs; 0 for a graph's first call) and mapped
        to the rule, as the captured kernels did."""
        bits = torch.empty((rows, *self.shape), dtype=torch.int32, device=device)
        self.stacked(rows).nonce_bits_into(bits, nonce, step, ROWS_COPY)
        target = torch.empty(self.shape, dtype=self.dtype, device=device)
        self.keyed_into(target, torch.tensor(key, dtype=torch.int64, device=device), bits[row])
        return target

    def stacked(self, rows: int) -> FreshInput:
        """This input `rows` times over, drawn as one tensor: a graph's captured calls each
        read a row of their own (JudgedCalls), all drawn by one kernel before each replay."""
        return replace(self, shape=(rows, *self.shape))

    def nbytes(self) -> int:
        return tensor_bytes(self.shape, self.dtype)


def graph_call_cap(fresh: FreshInput | None, chained: bool = False) -> int:
    """The most calls a graph may hold: MAX_GRAPH_CALLS, and no more rows of the fresh input
    than FRESH_ROWS_BUDGET_BYTES holds (`chained`: with each row's int32 mantissa bits beside
    it). Each captured call gets a row of its own because the addresses a graph's calls read
    are fixed when it is captured: calls that shared an input copy saw the same values in every
    replay, so a solution could compute one of them and copy its answer into the rest (or
    declare more calls than it captured, their slots copies of real ones), right wherever the
    judge looked and up to calls / copies times faster."""
    if fresh is None:
        return MAX_GRAPH_CALLS
    row = fresh.nbytes() + (4 * math.prod(fresh.shape) if chained else 0)
    return max(1, min(MAX_GRAPH_CALLS, FRESH_ROWS_BUDGET_BYTES // max(row, 1)))


def fresh_input(definition: Mapping[str, Any], workload: Mapping[str, Any]) -> FreshInput | None:
    """The first input, in the definition's order, that the workload draws at random with a
    floating-point dtype, that the solution may not write and no constraint names: outputs
    depend on it and any value of its draw rule is valid. None when there is none."""
    mutable = set(definition.get("mutable_inputs") or [])
    constraints = " ".join(str(c) for c in definition.get("constraints") or [])
    axes = axis_values(definition, workload)
    for name, spec in definition["inputs"].items():
        source = workload["inputs"].get(name) or {}
        shape = concrete_shape(spec, axes)
        if source.get("type") != "random" or shape is None or math.prod(shape) == 0:
            continue
        dtype = torch_dtype(spec["dtype"])
        init = spec.get("init") or {"dist": "normal"}
        if not dtype.is_floating_point or name in mutable or init.get("dist") not in FRESH_DISTS:
            continue
        if re.search(rf"\b{re.escape(name)}\b", constraints):
            continue
        return FreshInput(name, tuple(shape), dtype, spec.get("init"))
    return None


def chain_key(outputs: list[Any]) -> torch.Tensor | None:
    """An integer from every bit of a call's outputs, as a tensor on their device (on a GPU
    computed there, so that taking it waits for nothing). None where there is no tensor
    output.

    Every word counts (a key from a sample could be known from the few elements it reads,
    computed first), and no word counts alone: outputs pass their checks within a tolerance,
    so a solution has free bits (an element whose reference is 0 may hold anything below
    atol) and could set them to give the key it likes, the same every step, and then compute
    every later step's answer ahead on inputs it draws itself. With a plain sum of the words
    that took one subtraction a step: on the CPU such a solution reported 0.34 ms against the
    honest 4.15 ms, PASSED, unflagged. So on the CPU the key is SHA-256 of the outputs' bytes
    (the host reads it anyway, to seed the draw), and on a GPU two rounds of sums on the
    device: `first`, of each word mixed alone, then the key, of each word XORed with `first`
    and mixed again (mixed_key). A change to any word changes `first` and with it every term
    of the second sum, so each candidate setting of free bits costs a pass over all the
    outputs, and a GPU's draw reads 23 of the key's bits (2^23 passes to steer it)."""
    tensors = [o.detach() for o in outputs if isinstance(o, torch.Tensor) and o.numel()]
    if not tensors:
        return None
    if all(keyed_on_host(t.device) for t in tensors):
        return hashed_key(tensors)
    return mixed_key(tensors)


def hashed_key(tensors: list[torch.Tensor]) -> torch.Tensor:
    """chain_key on the host: the first 8 bytes of SHA-256 over the tensors' bytes."""
    digest = hashlib.sha256()
    for tensor in tensors:
        digest.update(tensor.contiguous().view(-1).view(torch.uint8).numpy().data)
    return torch.tensor(int.from_bytes(digest.digest()[:8], "little", signed=True))


KeyBuffers = Callable[[int, torch.device], tuple[torch.Tensor, torch.Tensor]]
"""Where mixed_key's two working buffers for a chunk of so many words come from."""


def mixed_key(tensors: list[torch.Tensor], buffers: KeyBuffers | None = None) -> torch.Tensor:
    """chain_key on a device: the two rounds of mixed sums (_mixed_sum), on the tensors' device,
    in `buffers` (default: the ones kept for the process, _key_buffers)."""
    chunks = [
        words[start : start + KEY_CHUNK]
        for tensor in tensors
        for words in _words(tensor)
        for start in range(0, words.numel(), KEY_CHUNK)
    ]
    pairs = [(buffers or _key_buffers)(chunk.numel(), chunk.device) for chunk in chunks]
    return _mixed_sum(chunks, pairs, _mixed_sum(chunks, pairs, None))


KEY_MIX = -0x40A7B892E31B1A47
"""An odd 64-bit multiplier (2^64 less 0xBF58476D1CE4E5B9, as a signed word)."""
KEY_CHUNK = 1 << 24
"""The most 64-bit words chain_key mixes in one pass (its two kept buffers: 128 MB each at
most, one pair per size of output it has seen)."""


def _words(output: torch.Tensor) -> list[torch.Tensor]:
    """`output`'s bytes as int64 words: the whole ones where they lie (copied where not 8-byte
    aligned, so a slot at any offset gives the judge's copy's key), the tail in one more."""
    if output.numel() == 0:
        return []
    size = output.element_size()
    if output.is_contiguous() and output.numel() * size % 8 == 0 and output.data_ptr() % 8 == 0:
        return [output.detach().view(-1).view(torch.uint8).view(torch.int64)]
    raw = output.detach().contiguous().view(-1).view(torch.uint8)
    whole = raw.numel() // 8 * 8
    words = []
    if whole:
        aligned = raw[:whole] if raw.data_ptr() % 8 == 0 else raw[:whole].clone()
        words.append(aligned.view(torch.int64))
    if whole < raw.numel():
        tail = torch.zeros(8, dtype=torch.uint8, device=raw.device)
        tail[: raw.numel() - whole] = raw[whole:]
        words.append(tail.view(torch.int64))
    return words


def new_key_buffers(words: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    return (
        torch.empty(words, dtype=torch.int64, device=device),
        torch.empty(words, dtype=torch.int64, device=device),
    )


_key_buffers: KeyBuffers = functools.lru_cache(maxsize=16)(new_key_buffers)
"""Kept, not made before every step: a temporary the outputs' size made between two calls
slowed the next call's own allocation (GDN decode, 1 MB of outputs: 1.21x its figure)."""


def _mixed_sum(
    chunks: list[torch.Tensor],
    buffers: list[tuple[torch.Tensor, torch.Tensor]],
    salt: torch.Tensor | None,
) -> torch.Tensor:
    """The wrapping sum over all words of m(w ^ salt), m(v) = u ^ (u >> 32) with u = v *
    KEY_MIX (the shift arithmetic): a mix of 64-bit words that is no polynomial in v's bits,
    so the sum for another salt cannot be had from counts of the words' bits; it must be
    taken again over every word. Four or five kernels a chunk, in its kept buffers."""
    total: torch.Tensor | None = None
    for words, (mixed, shifted) in zip(chunks, buffers, strict=True):
        if salt is None:
            torch.mul(words, KEY_MIX, out=mixed)
        else:
            torch.bitwise_xor(words, salt, out=mixed).mul_(KEY_MIX)
        part = mixed.bitwise_xor_(torch.bitwise_right_shift(mixed, 32, out=shifted)).sum()
        total = part if total is None else total.add_(part)
    assert total is not None
    return total


def captured_graph(work: Callable[[], Any], device: torch.device) -> torch.cuda.CUDAGraph:
    """`work` run once (its kernels loaded, its buffers made outside the graph), then captured
    into a CUDA graph on a side stream, without torch.cuda.graph's synchronisation, collection
    and release of cached memory (GraphedChain says why)."""
    work()
    graph = torch.cuda.CUDAGraph()
    current = torch.cuda.current_stream(device)
    side = torch.cuda.Stream(device)
    side.wait_stream(current)
    with torch.cuda.stream(side):
        graph.capture_begin(capture_error_mode="thread_local")
        try:
            work()
        finally:
            graph.capture_end()
    current.wait_stream(side)
    return graph


class GraphedChain:
    """A GPU's chained steps (eager judged timing) in four or so launches each: the previous
    step's outputs copied to kept buffers, the nonce's bits drawn, and one CUDA graph replay (one
    graph per input copy) holding the key's two rounds and the keyed draw (mixed_key,
    FreshInput.keyed_into). The same kernels in the same order as draw_keyed_into with
    chain_key launched op by op, so the same bits, which is what the judge recomputes; but a
    chained step's cost is its host's launches, not the device's work (0.18-0.26 ms a step,
    flat in size, op by op; 36-59 us graphed, up to a million elements on an H200:
    benchmarks/chained_draw.py), and a host slower than the device
    leaves the device idle before the start event, so the eager figures of small kernels
    scatter and their measurements run to the iteration cap.

    The graphs are captured when made (outside any window), on a side stream, without
    torch.cuda.graph's synchronisation, collection and release of cached memory: that would
    hand the solution's cached blocks back to the driver between its warm-up and its timing.
    The key's working buffers are the chain's own, not the process's bounded cache: a graph
    keeps the addresses it was captured with, so its buffers must live as long as it does."""

    def __init__(
        self,
        fresh: FreshInput,
        layouts: list[tuple[tuple[int, ...], torch.dtype]],
        targets: list[torch.Tensor],
    ) -> None:
        device = targets[0].device
        self.fresh = fresh
        self.kept = [torch.zeros(shape, dtype=dtype, device=device) for shape, dtype in layouts]
        self.bits = torch.empty(fresh.shape, dtype=torch.int32, device=device)
        self._buffers: KeyBuffers = functools.cache(new_key_buffers)
        self.graphs = [self._captured(target) for target in targets]
        for graph in self.graphs:
            graph.replay()  # a graph's first replay uploads it
        torch.cuda.synchronize(device)

    def _keyed(self, target: torch.Tensor) -> None:
        self.fresh.keyed_into(target, mixed_key(self.kept, self._buffers), self.bits)

    def _captured(self, target: torch.Tensor) -> torch.cuda.CUDAGraph:
        return captured_graph(lambda: self._keyed(target), target.device)

    def draw(self, outputs: list[torch.Tensor], nonce: int, step: int, copy: int) -> None:
        """Input copy `copy`'s draw for `step`, keyed by `outputs` (the previous step's, in
        the layouts this chain was made for): FreshInput.draw_keyed_into with chain_key."""
        for kept, output in zip(self.kept, outputs, strict=True):
            kept.copy_(output)
        self.fresh.nonce_bits_into(self.bits, nonce, step, copy)
        self.graphs[copy].replay()


def poison_value(dtype: torch.dtype, variant: int = 0) -> float | int | bool:
    """What an output buffer holds before a call writes it: NaN, or for integers and bools an
    extreme value; variant 1 is the other extreme (a second call's buffers differ from the
    first's, so an element left unwritten shows)."""
    if dtype.is_floating_point:
        return float("nan")
    if dtype == torch.bool:
        return variant == 0
    info = torch.iinfo(dtype)
    return info.min if variant == 0 else info.max


# ---------------------------------------------------------------- slots (both processes)


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _dtype_of(name: str) -> torch.dtype:
    dtype = getattr(torch, str(name), None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"not a dtype: {name!r}")
    return dtype


class Slots:
    """One tensor per output of shape (slots, *output shape) in memory the judge can map:
    a sealed memfd on the CPU (it cannot shrink under the judge's mapping), device memory shared
    through CUDA IPC on a GPU. Filled with poison, so a slot no call wrote fails its check."""

    def __init__(
        self, layouts: list[tuple[tuple[int, ...], torch.dtype]], count: int, device: torch.device
    ) -> None:
        self.count = count
        self.layouts = layouts
        self.device = device
        self._fd: int | None = None
        self._map: mmap.mmap | None = None
        if device.type == "cuda":
            self.tensors = [
                torch.full((count, *shape), poison_value(dtype), dtype=dtype, device=device)
                for shape, dtype in layouts
            ]
        else:
            self.tensors = self._shared_cpu(layouts, count)

    def _shared_cpu(
        self, layouts: list[tuple[tuple[int, ...], torch.dtype]], count: int
    ) -> list[torch.Tensor]:
        sizes = [count * tensor_bytes(s, d) for s, d in layouts]
        total = max(1, sum(sizes))
        fd = os.memfd_create("envaudit-slots", os.MFD_ALLOW_SEALING | os.MFD_CLOEXEC)
        os.ftruncate(fd, total)
        seals = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
        self._fd = fd
        self._map = mmap.mmap(fd, total)
        raw = torch.frombuffer(self._map, dtype=torch.uint8)
        tensors, offset = [], 0
        for (shape, dtype), size in zip(layouts, sizes, strict=True):
            view = raw[offset : offset + size].view(dtype).view(count, *shape)
            view.fill_(poison_value(dtype))
            tensors.append(view)
            offset += size
        return tensors

    def outputs(self, slot: int) -> list[torch.Tensor]:
        return [t[slot] for t in self.tensors]

    def describe(self) -> dict[str, Any]:
        """What the judge needs to map the slots."""
        outputs = [{"shape": list(s), "dtype": _dtype_name(d)} for s, d in self.layouts]
        if self.device.type == "cuda":
            for entry, tensor in zip(outputs, self.tensors, strict=True):
                shared = tensor.untyped_storage()._share_cuda_()
                entry["ipc"] = [v.hex() if isinstance(v, bytes) else v for v in shared]
            return {"kind": "cuda_ipc", "count": self.count, "outputs": outputs}
        return {
            "kind": "memfd",
            "count": self.count,
            "pid": os.getpid(),
            "fd": self._fd,
            "outputs": outputs,
        }

    def close(self) -> None:
        self.tensors = []
        if self._map is not None:
            with contextlib.suppress(BufferError):  # a view remains: it goes with the process
                self._map.close()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def layout_bytes(layouts: list[tuple[tuple[int, ...], torch.dtype]]) -> int:
    """Bytes of one call's outputs laid out as `layouts`."""
    return sum(tensor_bytes(shape, dtype) for shape, dtype in layouts)


def slot_count(layouts: list[tuple[tuple[int, ...], torch.dtype]], device: torch.device) -> int:
    """How many calls' outputs one batch can keep within SLOT_BUDGET_BYTES (at least one)."""
    per_call = layout_bytes(layouts)
    budget = SLOT_BUDGET_BYTES["cuda" if device.type == "cuda" else "cpu"]
    return max(1, budget // max(per_call, 1))


class MappedSlots:
    """The judge's view of a batch's slots, mapped from the solution's process."""

    def __init__(self, described: Mapping[str, Any], device: torch.device) -> None:
        self.count = int(described["count"])
        self.tensors: list[torch.Tensor] = []
        self.each: list[list[torch.Tensor]] | None = None
        self._keep: list[Any] = []
        if described.get("kind") == "cuda_ipc_each":
            slots = list(described["slots"])
            self._require_distinct(slots)
            self.each = [[self._ipc_view(e) for e in slot] for slot in slots]
            return
        outputs = list(described["outputs"])
        if described.get("kind") == "cuda_ipc":
            for entry in outputs:
                self.tensors.append(self._ipc_tensor(entry))
        elif described.get("kind") == "memfd":
            self._map_memfd(described, outputs)
        else:
            raise ValueError(f"unknown slot kind {described.get('kind')!r}")

    @staticmethod
    def _require_distinct(slots: list[Any]) -> None:
        """Every captured call's outputs must be memory of their own: slots that share memory
        would let a graph hold fewer calls than it claims."""
        places = [(e["ipc"][1], int(e["ipc"][3]), int(e["offset"])) for slot in slots for e in slot]
        if len(set(places)) != len(places):
            raise ValueError("two captured calls' outputs share memory")

    def _ipc_storage(self, entry: Mapping[str, Any]) -> tuple[Any, int, int]:
        dev, handle, size, offset, ref_handle, ref_offset, event, sync = entry["ipc"]
        storage = torch.UntypedStorage._new_shared_cuda(
            int(dev),
            bytes.fromhex(handle),
            int(size),
            int(offset),
            bytes.fromhex(ref_handle),
            int(ref_offset),
            bytes.fromhex(event) if isinstance(event, str) else event,
            bool(sync),
        )
        self._keep.append(storage)
        return storage, int(dev), int(size)

    def _ipc_view(self, entry: Mapping[str, Any]) -> torch.Tensor:
        storage, dev, size = self._ipc_storage(entry)
        dtype = _dtype_of(entry["dtype"])
        shape = [int(v) for v in entry["shape"]]
        stride = [int(v) for v in entry["stride"]]
        offset = int(entry["offset"])
        element = torch.empty((), dtype=dtype).element_size()
        reach = offset + sum((n - 1) * s for n, s in zip(shape, stride, strict=True)) + 1
        if min(shape, default=1) > 0 and (
            reach * element > size or offset < 0 or min(stride, default=0) < 0
        ):
            raise ValueError("a returned output reaching beyond its shared memory")
        view = torch.empty(0, dtype=dtype, device=f"cuda:{dev}")
        view.set_(storage, offset, shape, stride)
        return view

    def _ipc_tensor(self, entry: Mapping[str, Any]) -> torch.Tensor:
        storage, dev, size = self._ipc_storage(entry)
        dtype = _dtype_of(entry["dtype"])
        shape = (self.count, *[int(v) for v in entry["shape"]])
        numel = math.prod(shape)
        if numel * torch.empty((), dtype=dtype).element_size() > int(size):
            raise ValueError("a slot mapping smaller than its outputs")
        flat = torch.empty(0, dtype=dtype, device=f"cuda:{int(dev)}")
        flat.set_(storage, 0, (numel,), (1,))
        return flat.view(shape)

    def _map_memfd(self, described: Mapping[str, Any], outputs: list[Any]) -> None:
        path = f"/proc/{int(described['pid'])}/fd/{int(described['fd'])}"
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
            if not seals & fcntl.F_SEAL_SHRINK:
                raise ValueError("the slots' memory may shrink under the judge")
            total = os.fstat(fd).st_size
            mapped = mmap.mmap(fd, total, prot=mmap.PROT_READ)
        finally:
            os.close(fd)
        self._keep.append(mapped)
        raw = torch.frombuffer(mapped, dtype=torch.uint8)  # read-only memory: only ever cloned
        offset = 0
        for entry in outputs:
            dtype = _dtype_of(entry["dtype"])
            shape = (self.count, *[int(v) for v in entry["shape"]])
            size = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
            if offset + size > total:
                raise ValueError("a slot mapping smaller than its outputs")
            self.tensors.append(raw[offset : offset + size].view(dtype).view(shape))
            offset += size

    def read(self, slot: int) -> list[torch.Tensor]:
        """The outputs in one slot as they are now, copied into the judge's own memory."""
        chosen = self.each[slot] if self.each is not None else [t[slot] for t in self.tensors]
        copies = [t.clone() for t in chosen]
        if copies and copies[0].device.type == "cuda":
            torch.cuda.synchronize(copies[0].device)
        return copies


# ---------------------------------------------------------------- the judge's side


@dataclass
class Picked:
    """One timed call the reservoir picked: where its outputs were, how its fresh input was
    drawn, and the outputs the judge read."""

    batch: int
    slot: int
    step: int
    copy: int
    nonce: int
    outputs: list[torch.Tensor] | None = None
    key: int | None = None
    """chain_key of the previous step's outputs, as the judge read them, for a chained step."""
    rows: int | None = None
    """A graph's call: its fresh input is row `copy` of a draw of `rows` rows (ROWS_COPY)."""
    chained: bool = False
    """A chained graph's call: its row keyed by `key` (FreshInput.chained_row)."""

    def fresh_value(self, fresh: FreshInput, device: torch.device) -> torch.Tensor:
        """The fresh input this call was given, drawn again by the judge."""
        if self.rows is None:
            return fresh.draw(self.nonce, self.step, self.copy, device, self.key)
        if self.chained:
            key = self.key or 0
            return fresh.chained_row(self.nonce, self.step, self.rows, self.copy, key, device)
        stacked = fresh.stacked(self.rows).draw(self.nonce, self.step, ROWS_COPY, device)
        return stacked[self.copy].clone()


@dataclass
class Window:
    began_ns: int
    nonce: int
    first: int
    waited_ns: dict[int, int] | None = None
    """Each of the solution's threads' wait for a CPU so far, when the window opened."""


def cpu_waits_ns(pid: int | None) -> dict[int, int] | None:
    """How long each thread of process `pid` has waited, runnable, for a CPU (the kernel's
    run-queue wait, /proc/PID/task/TID/schedstat), by thread id: time a busy machine took from
    it, which the process cannot write. None where the kernel keeps no such count."""
    if pid is None:
        return None
    waits = {}
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as handle:
                waits[int(tid)] = int(handle.read().split()[1])
        except (OSError, ValueError, IndexError):
            continue
    return waits or None


def longest_wait_ns(before: dict[int, int], after: dict[int, int]) -> int:
    """The most any one thread waited for a CPU between two readings (a thread started in
    between counts from zero, one ended is not seen). The longest, not the sum: threads wait
    side by side, and a call that spreads its work over a pool waits for its slowest thread
    while the calling one sleeps, waiting for no CPU."""
    return max((wait - before.get(tid, 0) for tid, wait in after.items()), default=0)


@dataclass
class ModeWitness:
    """The judge's record of one mode's measurement of one workload."""

    mode: str
    layout: dict[str, Any]
    slots: MappedSlots | None
    allowance_step_ms: float
    device_kind: str
    chain_call_ms: float | None = None
    """A chained graph's: what the chain alone costs a call (chain_call_ms), the judge's own."""
    windows_ms: list[float] = field(default_factory=list)
    waited_ms: list[float] = field(default_factory=list)
    """Per window, the solution's thread's wait for a CPU (where the kernel counts it)."""
    samples_ms: list[float] = field(default_factory=list)
    """Every step's time as the solution's process reported it, batch after batch."""
    steps: list[int] = field(default_factory=list)
    picked: list[Picked] = field(default_factory=list)
    seen: int = 0
    open: Window | None = None
    rng: random.Random = field(default_factory=lambda: random.Random(secrets.randbits(64)))
    error: str | None = None
    judged: bool = False
    """Its picked calls have been checked: their outputs and the slots' mapping are let go."""
    checked: int = 0

    def release(self) -> None:
        """After the check: the mapping of the solution's slots (which holds that memory in
        the solution's process) and the outputs read from them are no longer needed."""
        self.checked = len([p for p in self.picked if p.outputs is not None])
        self.judged = True
        self.slots = None
        for item in self.picked:
            item.outputs = None

    def calls_of(self, first: int, steps: int) -> list[tuple[int, int, int, int | None]]:
        """(slot, step, draw, rows) of every call a batch of `steps` steps from `first` leaves
        in the slots, by the judged layout: eager, the step's input copy (rows None); graph,
        the last replay of each graph wrote its calls' slots, call j reading row j of that
        replay's `calls` rows."""
        if self.mode not in GRAPH_MODES:
            copies = int(self.layout.get("copies", 1))
            return [(i, first + i, (first + i) % copies, None) for i in range(steps)]
        graphs, calls = int(self.layout["graphs"]), int(self.layout["calls"])
        out: list[tuple[int, int, int, int | None]] = []
        for g in range(min(graphs, steps)):
            last = max(s for s in range(first, first + steps) if s % graphs == g)
            out += [(g * calls + j, last, j, calls) for j in range(calls)]
        return out

    def figure(self) -> dict[str, Any] | None:
        """The mode's statistics as the line keeps them, computed here from the step times the
        judge was told and bounded by its clock (per call: a graph's step is one replay of its
        `calls` calls, divided as the solution's process divides them, so an honest line's
        figures come out the same to the last bit). The line's own are the solution's process's
        word: one that told the judge its true times and wrote a twentieth of them into its
        line passed unflagged before the judge kept the figure (CPU, `forged_figure`)."""
        if not self.samples_ms:
            return None
        scale = int(self.layout.get("calls") or 1) if self.mode in GRAPH_MODES else 1
        per_call = [t / scale for t in self.samples_ms]
        stats = summarize(per_call, self.mode, 0, 0, 0)
        kept = {name: getattr(stats, name) for name in FIGURE_FIELDS}
        kept["median_halfwidth"] = median_halfwidth(per_call)
        return kept

    def summary(self) -> dict[str, Any]:
        """The judge's account: its clock against the reported time (the sum of the steps, and
        the median times their count, whichever is less: a median is what ranks), the calls
        it checked, and the statistics of the steps it was told, which the line keeps."""
        window = sum(self.windows_ms)
        n = len(self.samples_ms)
        median = statistics.median(self.samples_ms) if n else 0.0
        reported = min(sum(self.samples_ms), median * n)
        allowance = sum(steps * self.allowance_step_ms + BATCH_MARGIN_MS for steps in self.steps)
        bound = RATIO * reported + allowance
        waited = sum(self.waited_ms)
        record: dict[str, Any] = {
            "batches": len(self.windows_ms),
            "window_ms": round(window, 6),
            "reported_ms": round(reported, 6),
            "steps": n,
            "step_median_ms": median,
            "allowance_ms": round(allowance, 6),
            # The least step median this window would have let pass: how much of the figure
            # the judge's clock verifies (near 0 where the harness's own work per step is as
            # long as the call, as for sub-ms calls on the CPU: docs/harness.md).
            "floor_ms": round(max(0.0, window - allowance) / RATIO / n, 6) if n else 0.0,
            "consistent": window <= bound,
            "checked_calls": self.checked
            if self.judged
            else len([p for p in self.picked if p.outputs is not None]),
            "timed_calls": self.seen,
            # Where the checks looked: (batch, position in the batch) of each picked call.
            "picked": [[item.batch, item.slot] for item in self.picked],
        }
        if self.chain_call_ms is not None:
            record["chain_call_ms"] = round(self.chain_call_ms, 6)
        if self.waited_ms:
            record["waited_ms"] = round(waited, 6)
            # The window outgrew the bound only by the time the machine kept the solution's
            # thread waiting for a CPU: a busy machine, not a clock the solution moved. Its
            # figure is still flagged (not comparable), with that cause.
            record["contended"] = window > bound and window - waited <= bound
        if self.error:
            record["error"] = self.error
        return record


def _median_ms(run: Callable[[], Any], device: torch.device, repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        began = time.perf_counter()
        run()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append((time.perf_counter() - began) * 1e3)
    return statistics.median(times)


def judged_layout(
    mode: str,
    declared: Mapping[str, Any],
    fresh: FreshInput | None,
    outputs: list[tuple[tuple[int, ...], torch.dtype]],
    destination_passing: bool,
    device: torch.device,
) -> dict[str, Any]:
    """The layout the judge reads a mode's calls and counts its allowance by. How the calls
    lie in the slots (input copies, graphs, calls per graph) is the solution's process's to
    say, within the harness's own limits, and a lie there only misplaces what the judge reads
    (a wrong answer). What the harness does inside a window beside the calls (the L2 flush,
    the fresh draws, the copy of a returned output into its slot) is the judge's own
    reckoning from the definition, the solution.json and the device: a process that declared
    two thousand draws a step had a slowed clock pass unflagged (CPU, `wide_allowance`)."""

    def bounded(name: str, most: int) -> int:
        value = declared.get(name)
        return min(max(value, 1), most) if isinstance(value, int) else 1

    cap = graph_call_cap(fresh, chained=mode == CHAINED_GRAPH)
    copies, calls = bounded("copies", MAX_INPUT_COPIES), bounded("calls", cap)
    out_bytes = layout_bytes(outputs)
    return {
        "copies": copies,
        "graphs": bounded("graphs", MAX_GRAPHS),
        "calls": calls,
        "flush_bytes": flush_bytes(device) if device.type == "cuda" else 0,
        "draws_per_step": 0 if fresh is None else 1,
        # a chained graph's step draws its rows' mantissa bits (int32), not the rows
        "draws_bits": mode == CHAINED_GRAPH,
        "copy_bytes": 0 if destination_passing or mode in GRAPH_MODES else out_bytes,
        "output_bytes": out_bytes,
    }


def calibrate(
    layout: Mapping[str, Any],
    fresh: FreshInput | None,
    device: torch.device,
    known: dict[tuple[Any, ...], float] | None = None,
    chained_bytes: int | None = None,
) -> float:
    """The honest cost, per step, of what a window holds besides the timed calls, measured by
    the judge itself: the L2 flush, the fresh draws (chained: with the key taken from a call's
    `chained_bytes` of outputs, seeded or keyed by it) and the copy of a returned output.
    `known` keeps each measurement for the job (one flush size per device, a workload's draw in
    each of its modes): the judge measures each once, not in every mode's set-up."""
    known = {} if known is None else known

    def cost(key: tuple[Any, ...], measure: Callable[[], float]) -> float:
        if key not in known:
            known[key] = measure()
        return known[key]

    kind = "cuda" if device.type == "cuda" else "cpu"
    per_step = STEP_MARGIN_MS[kind]
    flush_bytes = int(layout.get("flush_bytes") or 0)
    if flush_bytes and device.type == "cuda":
        per_step += cost(("flush", flush_bytes), lambda: _fill_ms(flush_bytes, device))
    draws = int(layout.get("draws_per_step") or 0)
    if fresh is not None and draws and layout.get("draws_bits"):
        per_step += draws * cost(("bits", fresh.shape), lambda: _bits_ms(fresh, device))
    elif fresh is not None and draws:
        key = ("draw", fresh.shape, fresh.dtype, repr(fresh.init), chained_bytes)
        per_step += draws * cost(key, lambda: _draw_ms(fresh, device, chained_bytes))
    copy_bytes = int(layout.get("copy_bytes") or 0)
    if copy_bytes:
        per_step += cost(("copy", copy_bytes), lambda: _copy_ms(copy_bytes, device))
    return per_step


def _fill_ms(size: int, device: torch.device) -> float:
    buffer = torch.empty(size, dtype=torch.uint8, device=device)
    return _median_ms(buffer.zero_, device) * ALLOWANCE_SLACK


def _draw_ms(fresh: FreshInput, device: torch.device, chained_bytes: int | None = None) -> float:
    """A step's draw as the solution's process makes it (JudgedCalls): plain, or chained on
    `chained_bytes` of outputs, seeded by their key on the host or replayed in a GraphedChain."""
    target = torch.empty(fresh.shape, dtype=fresh.dtype, device=device)
    if chained_bytes is None:
        return _median_ms(lambda: fresh.draw_into(target, 1, 0, 0), device, 3) * ALLOWANCE_SLACK
    before = [torch.zeros(max(chained_bytes, 4), dtype=torch.uint8, device=device)]
    if not keyed_on_host(device):
        chain = GraphedChain(fresh, [(tuple(before[0].shape), torch.uint8)], [target])
        return _median_ms(lambda: chain.draw(before, 1, 0, 0), device, 3) * ALLOWANCE_SLACK

    def draw_chained() -> None:
        key = chain_key(before)
        assert key is not None
        fresh.draw_chained_into(target, 1, 0, 0, key)

    return _median_ms(draw_chained, device, 3) * ALLOWANCE_SLACK


def _bits_ms(fresh: FreshInput, device: torch.device) -> float:
    bits = torch.empty(fresh.shape, dtype=torch.int32, device=device)
    return _median_ms(lambda: fresh.nonce_bits_into(bits, 1, 0, 0), device, 3) * ALLOWANCE_SLACK


def device_key(outputs: list[Any], buffers: KeyBuffers | None = None) -> torch.Tensor | None:
    """chain_key on a device, where the host must not read it: the key a chained graph's
    captured kernels take from a call's outputs (None where there is no tensor output)."""
    tensors = [o.detach() for o in outputs if isinstance(o, torch.Tensor) and o.numel()]
    return mixed_key(tensors, buffers) if tensors else None


def chain_call_ms(
    fresh: FreshInput,
    outputs: list[tuple[tuple[int, ...], torch.dtype]],
    calls: int,
    device: torch.device,
    repeats: int = 7,
) -> float:
    """What the chain alone costs a call of a chained graph of `calls` calls: the same keyed
    draws (each row's bits copied, then keyed by outputs of the workload's layouts, the first by
    0: JudgedCalls._key_row) captured into
    a graph with no call between them, replayed here, on the judge's own context, and timed
    by its own events (the median replay over `calls`). A chained graph's figure less this is
    what its calls cost one after another (docs/harness.md, "Timing integrity", item 3)."""
    held = [torch.zeros(shape, dtype=dtype, device=device) for shape, dtype in outputs]
    rows = torch.empty((calls, *fresh.shape), dtype=fresh.dtype, device=device)
    bits = torch.empty((calls, *fresh.shape), dtype=torch.int32, device=device)
    buffers: KeyBuffers = functools.cache(new_key_buffers)
    zero = torch.zeros((), dtype=torch.int64, device=device)
    keyed = torch.empty(fresh.shape, dtype=torch.int32, device=device)

    def chain() -> None:
        for j in range(calls):
            key = device_key(held, buffers) if j else None
            keyed.copy_(bits[j])
            fresh.keyed_into(rows[j], zero if key is None else key, keyed)

    def draw_bits() -> None:
        fresh.stacked(calls).nonce_bits_into(bits, 1, 0, ROWS_COPY)

    draw_bits()
    graph = captured_graph(chain, device)
    times = []
    for _ in range(repeats):
        draw_bits()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return float(statistics.median(times[1:])) / calls


def _copy_ms(size: int, device: torch.device) -> float:
    src = torch.empty(size, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    return _median_ms(lambda: dst.copy_(src), device) * ALLOWANCE_SLACK


class TimingWitness:
    """The judge's side of the timing windows of one job (see the module docstring)."""

    def __init__(self, device: torch.device, solution_pid: int | None = None) -> None:
        self.device = device
        self.solution_pid = solution_pid
        self.modes: dict[tuple[str, str], ModeWitness] = {}
        self.costs: dict[tuple[Any, ...], float] = {}

    def setup(
        self,
        uuid: str,
        message: Mapping[str, Any],
        fresh: FreshInput | None,
        outputs: list[tuple[tuple[int, ...], torch.dtype]],
        destination_passing: bool,
    ) -> dict[str, Any]:
        """A mode's set-up: the slots mapped, the layout the judge counts by (judged_layout,
        from the declared one and what the judge knows itself: the workload's `outputs`, the
        solution's calling convention) and the allowance calibrated."""
        mode = str(message.get("mode"))
        if self._after_judged(uuid, mode):
            return {"ok": False}
        declared = message.get("layout")
        declared = declared if isinstance(declared, Mapping) else {}
        layout = judged_layout(mode, declared, fresh, outputs, destination_passing, self.device)
        slots: MappedSlots | None = None
        error = None
        try:
            slots = MappedSlots(dict(message.get("slots") or {}), self.device)
        except Exception as exc:
            error = f"the timed calls' outputs could not be mapped: {type(exc).__name__}: {exc}"
        graphed = mode in GRAPH_MODES
        chained = int(layout["output_bytes"]) if not graphed else None
        drawn = fresh.stacked(layout["calls"]) if fresh is not None and graphed else fresh
        step_ms = calibrate(layout, drawn, self.device, self.costs, chained)
        kind = "cuda" if self.device.type == "cuda" else "cpu"
        witness = ModeWitness(mode, layout, slots, step_ms, kind, error=error)
        if mode == CHAINED_GRAPH and fresh is not None and self.device.type == "cuda":
            calls = int(layout["calls"])
            key = ("chain", fresh.shape, fresh.dtype, repr(fresh.init), tuple(outputs), calls)
            if key not in self.costs:
                try:
                    self.costs[key] = chain_call_ms(fresh, outputs, calls, self.device)
                except (RuntimeError, torch.cuda.OutOfMemoryError) as exc:
                    # the judge's own measurement: its failure flags the bound, never the solution
                    witness.error = f"the chain's own cost was not measured: {exc}"[:500]
                torch.cuda.empty_cache()  # its rows go back to the device, not to this cache
            witness.chain_call_ms = self.costs.get(key)
        self.modes[(uuid, mode)] = witness
        return {"ok": error is None}

    def _after_judged(self, uuid: str, mode: str) -> bool:
        """Whether this mode's calls were judged already: a batch (or a set-up) after that is
        one the judge can no longer read, so the mode's figure is flagged, never trusted."""
        witness = self.modes.get((uuid, mode))
        if witness is None or not witness.judged:
            return False
        witness.error = "timed calls went on after the judge had checked this mode's calls"
        return True

    def begin(self, uuid: str, mode: str, first: int) -> int:
        self._after_judged(uuid, mode)
        witness = self.modes[(uuid, mode)]
        nonce = secrets.randbits(62)
        waited = cpu_waits_ns(self.solution_pid)
        witness.open = Window(time.monotonic_ns(), nonce, first, waited)
        return nonce

    def end(self, uuid: str, mode: str, samples_ms: list[float]) -> None:
        ended = time.monotonic_ns()
        self._after_judged(uuid, mode)
        witness = self.modes[(uuid, mode)]
        window, witness.open = witness.open, None
        if window is None:
            witness.error = "a batch ended that the judge never opened"
            return
        samples = [v if math.isfinite(v) and v > 0 else 0.0 for v in samples_ms]
        witness.windows_ms.append((ended - window.began_ns) / 1e6)
        waited = cpu_waits_ns(self.solution_pid)
        if waited is not None and window.waited_ns is not None:
            witness.waited_ms.append(longest_wait_ns(window.waited_ns, waited) / 1e6)
        witness.samples_ms += samples
        witness.steps.append(len(samples))
        batch = len(witness.windows_ms) - 1
        fresh_now = []
        for slot, step, copy, rows in witness.calls_of(window.first, len(samples)):
            if witness.mode == CHAINED_GRAPH and copy == 0 and (rows or 1) > 1:
                # a graph's first call is keyed by nothing: the sample is drawn from the calls
                # whose inputs the chain made, which a batching capture answers wrongly
                continue
            witness.seen += 1
            item = Picked(batch, slot, step, copy, window.nonce, rows=rows)
            if len(witness.picked) < CHECKS:
                witness.picked.append(item)
                fresh_now.append(item)
            else:
                j = witness.rng.randrange(witness.seen)
                if j < CHECKS:
                    witness.picked[j] = item
                    fresh_now.append(item)
        if witness.slots is None:
            return
        for item in fresh_now:
            if item in witness.picked and 0 <= item.slot < witness.slots.count:
                item.outputs = witness.slots.read(item.slot)
                item.chained = witness.mode == CHAINED_GRAPH
                # chained to the step (eager) or the captured call (chained graph) before,
                # where there is one: a chained graph's first call is keyed by 0
                before = item.slot > 0 and (witness.mode == "eager" or item.copy > 0)
                if witness.mode != "graph" and before:
                    key = chain_key(witness.slots.read(item.slot - 1))
                    item.key = int(key) if key is not None else None

    def record(self, uuid: str, mode: str) -> ModeWitness | None:
        return self.modes.get((uuid, mode))

    def forget(self, uuid: str) -> None:
        for key in [k for k in self.modes if k[0] == uuid]:
            witness = self.modes.pop(key)
            witness.slots = None
            witness.picked = []


def adopted_ipc(per_slot: list[list[torch.Tensor]]) -> dict[str, Any]:
    """Slots that are tensors a solution returned while a graph was captured (one list of
    outputs per call), described for the judge through CUDA IPC, each on its own."""
    entries = []
    for outputs in per_slot:
        described = []
        for tensor in outputs:
            shared = tensor.untyped_storage()._share_cuda_()
            described.append(
                {
                    "ipc": [v.hex() if isinstance(v, bytes) else v for v in shared],
                    "offset": tensor.storage_offset(),
                    "shape": list(tensor.shape),
                    "stride": list(tensor.stride()),
                    "dtype": _dtype_name(tensor.dtype),
                }
            )
        entries.append(described)
    return {"kind": "cuda_ipc_each", "count": len(entries), "slots": entries}
