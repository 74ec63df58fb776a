"""What judged timing's steps around each CPU call do to that call's own wall-clock median.

Since timing integrity (docs/harness.md, "Timed calls are judged calls"), every timed call on
the CPU is preceded by a fresh draw of one input and followed by a copy of its output into a
slot the judge reads. Neither is inside the timed interval, but both touch memory between
calls that used to run back to back. This times a sub-millisecond call like the shipped
dense-attention baseline's (torch SDPA, bf16, batch 2, 24 tokens, 16 heads of 72) through
`time_wall_clock`, with those two steps as the harness takes them (torch's own `normal_` into
the input; a `copy_` into the harness's own memfd slots, `witness.Slots`), and with a parallel
fill that wakes torch's thread pool after the draw (if the pool fell asleep during the draw,
this takes the cost back out of the call).

    python benchmarks/cpu_window_parts.py [--threads N] [--copies 1] [--order none,both,...]

Prints each variant's medians (one per turn) in microseconds. Nothing here is a pass/fail
target: the machine is shared; compare variants within one run.
"""

from __future__ import annotations

import argparse
import math
import statistics
from typing import Any

import torch
import torch.nn.functional as F

from envaudit.harness.timing import NO_WINDOW, Window, time_wall_clock
from envaudit.harness.witness import Slots, slot_count

SCALE = 1.0 / math.sqrt(72)
SLOTS = 1000


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    o = F.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), scale=SCALE
    )
    return o.transpose(1, 2).contiguous()


class Steps(Window):
    """Some of judged timing's steps around each call, with no judge."""

    def __init__(self, copies: list[dict[str, torch.Tensor]], draw: bool, copy: bool, wake: bool):
        self.copies, self.draw, self.copy, self.wake = copies, draw, copy, wake
        self.count = len(copies)
        self.generator = torch.Generator().manual_seed(1)
        layouts = [(tuple(copies[0]["q"].shape), copies[0]["q"].dtype)]
        cpu = torch.device("cpu")
        self.slots = Slots(layouts, min(slot_count(layouts, cpu), SLOTS), cpu)  # the harness's
        self.pool = torch.empty(32768 * torch.get_num_threads(), dtype=torch.uint8)
        self.first = 0

    def open(self, first: int, steps: int) -> None:
        self.first = first

    def prime(self, step: int) -> None:
        if self.draw:
            self.copies[step % self.count]["q"].normal_(generator=self.generator)
        if self.wake:
            self.pool.fill_(step & 1)

    def keep(self, step: int, result: Any) -> None:
        if self.copy:
            self.slots.outputs((step - self.first) % self.slots.count)[0].copy_(result)

    def batch_cap(self) -> int:
        return self.slots.count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: its default)")
    parser.add_argument(
        "--copies", type=int, default=1, help="input copies (the CPU harness keeps one)"
    )
    parser.add_argument("--order", default=",".join(["none", "both", "draw", "copy", "wake"] * 3))
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(0)
    shape = (2, 24, 16, 72)
    copies = [
        {n: torch.randn(shape, generator=g).to(torch.bfloat16) for n in "qkv"}
        for _ in range(args.copies)
    ]
    variants: dict[str, Window] = {
        "none": NO_WINDOW,
        "draw": Steps(copies, draw=True, copy=False, wake=False),
        "copy": Steps(copies, draw=False, copy=True, wake=False),
        "both": Steps(copies, draw=True, copy=True, wake=False),
        "wake": Steps(copies, draw=True, copy=True, wake=True),
    }

    def launch(i: int) -> torch.Tensor:
        c = copies[i]
        return attention(c["q"], c["k"], c["v"])

    got: dict[str, list[float]] = {}
    for name in args.order.split(","):
        stats = time_wall_clock(launch, args.copies, window=variants[name])
        got.setdefault(name, []).append(stats.median_ms * 1e3)
    print(f"torch threads: {torch.get_num_threads()}")
    for name, medians in got.items():
        shown = ", ".join(f"{m:.1f}" for m in medians)
        print(f"{name:5s} medians {shown} us; median {statistics.median(medians):.1f} us")


if __name__ == "__main__":
    main()
