"""Cached-prefix attention with full visibility (Gemma 3 global layer, image chunk), GQA.

Inputs (bfloat16), in the engine's positional order:
  q:        [batch, q_len, num_qo_heads = 16, head_dim = 256]  queries of the current chunk
  prefix_k: [batch, prefix_len, num_kv_heads = 8, 256]         keys already in the KV cache
  prefix_v: [batch, prefix_len, 8, 256]
  k:        [batch, q_len, 8, 256]                             keys of the current chunk
  v:        [batch, q_len, 8, 256]
Output (bfloat16):
  o: [batch, q_len, 16, 256], same layout as q.

For batch element b the key/value sequence is the concatenation along the sequence axis
K[b] = [prefix_k[b]; k[b]] and V[b] = [prefix_v[b]; v[b]] (prefix positions first), of length
prefix_len + q_len. Every query sees every one of those keys: there is no causal or other mask
(the current chunk is one image, whose tokens attend to each other bidirectionally).
Grouped-query attention: query head h reads KV head h // 2 (16 / 8 = 2 query heads per KV head).

  s[b, h, i, j] = scale * sum_d q[b, i, h, d] * K[b, j, h // 2, d]   scale = 1 / sqrt(256)
  p[b, h, i, :] = softmax over j of s[b, h, i, :]
  o[b, i, h, :] = sum_j p[b, h, i, j] * V[b, j, h // 2, :]

The scale is fixed by the head dimension and is not an input. The reference computes in float32
and rounds to bfloat16 once at the end.
"""

import math

import torch

HEAD_DIM = 256
SCALE = 1.0 / math.sqrt(HEAD_DIM)


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Unmasked GQA of one sequence: q [sq, hq, d], k/v [skv, hkv, d] -> [sq, hq, d] fp32."""
    group = q.shape[1] // k.shape[1]
    k = k.float().repeat_interleave(group, dim=1)  # head h of the result is KV head h // group
    v = v.float().repeat_interleave(group, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q.float(), k) * SCALE
    probs = torch.softmax(scores, dim=-1)
    return torch.einsum("hqk,khd->qhd", probs, v)


def run(
    q: torch.Tensor,
    prefix_k: torch.Tensor,
    prefix_v: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
) -> torch.Tensor:
    out = torch.empty_like(q)
    for b in range(q.shape[0]):
        keys = torch.cat([prefix_k[b], k[b]], dim=0)
        values = torch.cat([prefix_v[b], v[b]], dim=0)
        out[b] = _attend(q[b], keys, values).to(torch.bfloat16)
    return out
