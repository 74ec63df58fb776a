"""Block-diagonal (chunked) self-attention of a Whisper-style audio encoder, packed tokens.

Inputs:
  q, k, v:    [total_tokens, num_heads = 20, head_dim = 64], bfloat16. Tokens of every chunk of
              every audio clip, packed back to back.
  cu_seqlens: [num_chunks + 1], int32. Chunk c owns tokens cu_seqlens[c] .. cu_seqlens[c+1]-1;
              cu_seqlens[0] == 0, cu_seqlens[-1] == total_tokens, and every chunk is non-empty.
Output (bfloat16):
  o: [total_tokens, 20, 64], same layout as q.

Each chunk attends to itself only, without a causal mask: for a query token i of chunk c and
every head h,

  s[h, i, j] = scale * sum_d q[i, h, d] * k[j, h, d]   for j in chunk c   scale = 1 / sqrt(64)
  p[h, i, :] = softmax over the keys j of chunk c of s[h, i, :]
  o[i, h, :] = sum_{j in chunk c} p[h, i, j] * v[j, h, :]

Tokens of different chunks never interact (a block-diagonal mask). The scale is fixed by the
head dimension and is not an input. The reference computes in float32 and rounds to bfloat16
once at the end.
"""

import math

import torch

HEAD_DIM = 64
SCALE = 1.0 / math.sqrt(HEAD_DIM)


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Unmasked attention of one chunk: q, k, v [len, heads, dim] -> [len, heads, dim] fp32."""
    scores = torch.einsum("qhd,khd->hqk", q.float(), k.float()) * SCALE
    probs = torch.softmax(scores, dim=-1)
    return torch.einsum("hqk,khd->qhd", probs, v.float())


def run(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens: torch.Tensor
) -> torch.Tensor:
    out = torch.empty_like(q)
    bounds = cu_seqlens.tolist()
    for chunk in range(len(bounds) - 1):
        start, end = bounds[chunk], bounds[chunk + 1]
        out[start:end] = _attend(q[start:end], k[start:end], v[start:end]).to(torch.bfloat16)
    return out
