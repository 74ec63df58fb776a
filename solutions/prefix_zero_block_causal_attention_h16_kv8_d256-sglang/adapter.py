"""The segment calls SGLang's engine makes for a multimodal prefill, planned from the
definition's image_ids, in the varlen form of sgl-kernel's FA3 flash_attn_varlen_func. Pure
torch: it runs (and is tested) on the CPU.

The definition's one block-causal operation stands for a sequence of native calls, one per
text or image segment (the interface record's adapter): a text run [s, e) of a row attends
causally to the row's keys 0 .. e - 1, an image segment [s, e) attends to the same keys
without a mask. In FA3's varlen form each segment is one sequence:

    queries  rows s .. e - 1 of the row, at offset b * seq_len + s of q viewed as
             [batch * seq_len, 16, 256]       (cu_seqlens_q[n] = offset, seqused_q[n] = e - s)
    keys     rows 0 .. e - 1 of the same row  (cu_seqlens_k[n] = b * seq_len, seqused_k[n] = e)

FA3 aligns its causal mask to the bottom right, so with causal=True query i of a text run
sees keys 0 .. s + i: exactly the causal rule. An image segment runs with causal=False. The
segments of one kind are batched into one varlen call (FA3 reads a sequence's start from
cu_seqlens and its length from seqused, so the key ranges of one row's segments may overlap
and the query rows of the other kind are skipped), so a row costs two calls at most, both
writing into one output. Text segments may not merge across an image: each ends where the
next image starts.

The plan depends only on image_ids, which the engine knows on the host from its multimodal
metadata before the layer runs: it is built in prepare (one host read of image_ids there,
outside the timed call), like the engine's per-batch attention metadata.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Segment:
    """One native call's worth of rows: positions start .. end - 1 of row `row`."""

    row: int
    start: int
    end: int
    image: bool


@dataclass(frozen=True)
class VarlenCall:
    """The varlen arguments of the segments of one kind (FA3's int32 metadata and host ints)."""

    cu_seqlens_q: torch.Tensor
    cu_seqlens_k: torch.Tensor
    seqused_q: torch.Tensor
    seqused_k: torch.Tensor
    max_seqlen_q: int
    max_seqlen_k: int
    causal: bool


def segments(image_ids: torch.Tensor) -> list[Segment]:
    """The text runs and image segments of every row, in order (one host read)."""
    found = []
    for row, ids in enumerate(image_ids.tolist()):
        start = 0
        for pos in range(1, len(ids) + 1):
            if pos == len(ids) or ids[pos] != ids[start]:
                found.append(Segment(row, start, pos, ids[start] >= 0))
                start = pos
    return found


def varlen_call(
    chosen: list[Segment], seq_len: int, total: int, causal: bool, device: torch.device
) -> VarlenCall:
    """One varlen call over `chosen` (all of one kind) of q viewed as [total, heads, dim]."""

    def int32(values: list[int]) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.int32, device=device)

    return VarlenCall(
        cu_seqlens_q=int32([s.row * seq_len + s.start for s in chosen] + [total]),
        cu_seqlens_k=int32([s.row * seq_len for s in chosen] + [total]),
        seqused_q=int32([s.end - s.start for s in chosen]),
        seqused_k=int32([s.end for s in chosen]),
        max_seqlen_q=max(s.end - s.start for s in chosen),
        max_seqlen_k=max(s.end for s in chosen),
        causal=causal,
    )


def plan(image_ids: torch.Tensor, device: torch.device) -> tuple[VarlenCall, ...]:
    """The calls for one batch: text runs (causal), then image segments (unmasked); a kind
    with no segment has no call."""
    batch, seq_len = image_ids.shape
    found = segments(image_ids)
    calls = []
    for image in (False, True):
        chosen = [s for s in found if s.image == image]
        if chosen:
            calls.append(varlen_call(chosen, seq_len, batch * seq_len, not image, device))
    return tuple(calls)


def packed(x: torch.Tensor) -> torch.Tensor:
    """[batch, seq_len, heads, dim] as FA3's varlen [batch * seq_len, heads, dim] (a view)."""
    return x.reshape(x.shape[0] * x.shape[1], x.shape[2], x.shape[3])
