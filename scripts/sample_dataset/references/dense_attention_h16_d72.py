"""Dense (unmasked, non-causal) multi-head self-attention of a SigLIP vision encoder.

Inputs (bfloat16):
  q, k, v: [batch, seq_len, num_heads = 16, head_dim = 72]; row b holds one image's patches.
Output (bfloat16):
  o: [batch, seq_len, 16, 72], same layout as q.

For every batch element b and head h, every query position i attends to every key position j
of the same batch element; there is no mask and no causality:

  s[b, h, i, j] = scale * sum_d q[b, i, h, d] * k[b, j, h, d]      scale = 1 / sqrt(72)
  p[b, h, i, :] = softmax over j of s[b, h, i, :]
  o[b, i, h, :] = sum_j p[b, h, i, j] * v[b, j, h, :]

The scale is fixed by the head dimension and is not an input. The reference computes in float32
from the bfloat16 inputs and rounds to bfloat16 once at the end.
"""

import math

import torch

HEAD_DIM = 72
SCALE = 1.0 / math.sqrt(HEAD_DIM)


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Unmasked attention of one sequence: q, k, v [seq, heads, dim] -> [seq, heads, dim] fp32."""
    scores = torch.einsum("qhd,khd->hqk", q.float(), k.float()) * SCALE
    probs = torch.softmax(scores, dim=-1)
    return torch.einsum("hqk,khd->qhd", probs, v.float())


def run(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(q)
    for b in range(q.shape[0]):  # one image at a time keeps the score matrix small
        out[b] = _attend(q[b], k[b], v[b]).to(torch.bfloat16)
    return out
