"""Block-causal attention over interleaved text and image tokens, empty cached prefix, GQA.

This is a Gemma 3 global-attention layer prefilling a multimodal prompt from scratch (the cached
prefix has length zero, hence "prefix zero"): text tokens are causal, and the tokens of one
image attend to each other bidirectionally.

Inputs:
  q:         [batch, seq_len, num_qo_heads = 16, head_dim = 256], bfloat16
  k, v:      [batch, seq_len, num_kv_heads = 8, 256], bfloat16
  image_ids: [batch, seq_len], int32. -1 marks a text token; a value n >= 0 marks a token of
             image segment n. Segments are numbered 0, 1, 2, ... in order of appearance over the
             row-major flattened [batch, seq_len] tensor, and each segment is one contiguous run
             of positions inside one row (the definition's constraints check this).
Output (bfloat16):
  o: [batch, seq_len, 16, 256], same layout as q.

Mask, per batch element b: query position i may attend key position j if and only if
  j <= i                                                        (causal), or
  image_ids[b, i] >= 0 and image_ids[b, j] == image_ids[b, i]   (same image segment).
So a text token sees itself and every earlier token; an image token sees everything before its
image segment and the whole segment, including the segment's later tokens. Every query sees at
least itself, so no softmax row is empty. Sequences of different batch elements never mix.
Grouped-query attention: query head h reads KV head h // 2.

  s[b, h, i, j] = scale * sum_d q[b, i, h, d] * k[b, j, h // 2, d]  if visible, else -inf
  scale = 1 / sqrt(256)
  p[b, h, i, :] = softmax over j of s[b, h, i, :]
  o[b, i, h, :] = sum_j p[b, h, i, j] * v[b, j, h // 2, :]

The scale is fixed by the head dimension and is not an input. The reference computes in float32
and rounds to bfloat16 once at the end.
"""

import math

import torch

HEAD_DIM = 256
SCALE = 1.0 / math.sqrt(HEAD_DIM)


def _visible(ids: torch.Tensor) -> torch.Tensor:
    """[seq, seq] bool mask of one row: entry (i, j) is True when query i may attend key j."""
    positions = torch.arange(ids.shape[0], device=ids.device)
    causal = positions[None, :] <= positions[:, None]
    same_image = (ids[:, None] >= 0) & (ids[:, None] == ids[None, :])
    return causal | same_image


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, visible: torch.Tensor):
    """Masked GQA of one sequence: q [s, hq, d], k/v [s, hkv, d] -> [s, hq, d] fp32."""
    group = q.shape[1] // k.shape[1]
    k = k.float().repeat_interleave(group, dim=1)  # head h of the result is KV head h // group
    v = v.float().repeat_interleave(group, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q.float(), k) * SCALE
    scores = scores.masked_fill(~visible, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    return torch.einsum("hqk,khd->qhd", probs, v)


def run(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, image_ids: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(q)
    for b in range(q.shape[0]):
        visible = _visible(image_ids[b].to(torch.int64))
        out[b] = _attend(q[b], k[b], v[b], visible).to(torch.bfloat16)
    return out
