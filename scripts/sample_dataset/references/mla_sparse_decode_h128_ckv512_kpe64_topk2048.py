"""Sparse MLA decode (DeepSeek-V3.2 style): one query token per request, top-k selected slots.

Shapes: q [batch_size, 128, 576] bf16 (per head: 512 latent "nope" dims, then 64 RoPE dims),
kv_cache [num_slots, 576] bf16 (one latent head shared by all query heads: 512 latent dims,
then 64 RoPE dims), sparse_indices [batch_size, 2048] int32, sm_scale a Python float.
Outputs o [batch_size, 128, 512] bf16 and lse [batch_size, 128] float32.

Row b of sparse_indices lists the cache rows request b attends to, in any order; -1 marks an
unused entry. Valid entries come first (padding only at the tail), every row has at least one
valid entry, and the valid entries of a row are distinct. Keys are the full 576-dim rows;
values are their first 512 dims. For each request b and head h:
    s_j = sm_scale * dot(q[b, h, :576], kv_cache[idx_j, :576])   over the valid idx_j of row b
    lse[b, h] = log(sum_j exp(s_j))                                 (natural log, float32)
    o[b, h] = sum_j exp(s_j - lse[b, h]) * kv_cache[idx_j, :512]
All arithmetic is float32; o is rounded to bfloat16 at the end.
"""

import torch

D_V = 512  # value dims: the latent part of each cache row


def _attend(q_rows, kv_cache, row, sm_scale):
    """Attention of q_rows [H, 576] over the cache rows listed in `row` (-1 entries skipped)."""
    row = row.long()
    kv = kv_cache[row[row >= 0]].float()  # [n, 576]
    scores = (q_rows.float() @ kv.T) * sm_scale  # [H, n]
    lse = torch.logsumexp(scores, dim=-1)
    probs = torch.exp(scores - lse.unsqueeze(-1))
    return probs @ kv[:, :D_V], lse


def run(q, kv_cache, sparse_indices, sm_scale):
    batch_size, num_heads, _ = q.shape
    o = torch.empty(batch_size, num_heads, D_V, dtype=torch.float32, device=q.device)
    lse = torch.empty(batch_size, num_heads, dtype=torch.float32, device=q.device)
    for b in range(batch_size):
        o[b], lse[b] = _attend(q[b], kv_cache, sparse_indices[b], sm_scale)
    return o.to(torch.bfloat16), lse
