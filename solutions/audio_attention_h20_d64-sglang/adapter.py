"""What SGLang's vision attention backend receives for packed audio chunks. Pure torch: it
runs (and is tested) on the CPU.

The definition's layout is already the backend's: q, k, v [total_tokens, 20, 64] with chunk
c owning rows cu_seqlens[c] .. cu_seqlens[c + 1] - 1, and int32 cu_seqlens on the device,
which VisionFlash4Attention.forward passes to FA4 for queries and keys alike. What the
backend also needs is max_seqlen, the longest chunk as a host int: without it the backend
reads it from cu_seqlens on the device in every layer (a device-to-host sync per call). An
encoder computes it once per forward and passes it to every layer; here prepare does that,
outside the timed call.
"""

from __future__ import annotations

import torch


def longest_chunk(cu_seqlens: torch.Tensor) -> int:
    """The longest chunk of cu_seqlens (one host read, in prepare)."""
    return int((cu_seqlens[1:] - cu_seqlens[:-1]).max().item())
