"""What SGLang's vision attention backend receives for a batch of equal-length images, built
from the definition's [batch, seq_len, 16, 72] tensors. Pure torch: it runs (and is tested)
on the CPU.

VisionAttention (srt/layers/attention/vision.py) hands its backend q, k and v packed as
[batch * seq_len, heads, head_dim] with bsz, seq_len, max_seqlen and softmax_scale =
head_dim ** -0.5. With cu_seqlens=None, VisionFlash4Attention.forward makes
cu_seqlens = 0, seq_len, 2 * seq_len, .. itself (a cached int32 tensor per shape) and runs
FA4's varlen call with it for queries and keys: every image is one sequence, so the images
never see each other. The definition's fixed-length batch is exactly that; the adapter is two
views.
"""

from __future__ import annotations

import torch


def packed(x: torch.Tensor) -> torch.Tensor:
    """[batch, seq_len, heads, dim] as [batch * seq_len, heads, dim] (a view)."""
    return x.reshape(x.shape[0] * x.shape[1], x.shape[2], x.shape[3])


def image_starts(batch: int, seq_len: int, device: torch.device) -> torch.Tensor:
    """The cu_seqlens the backend builds for equal-length images (for the CPU stand-in: the
    backend builds its own)."""
    return torch.arange(batch + 1, dtype=torch.int32, device=device) * seq_len
