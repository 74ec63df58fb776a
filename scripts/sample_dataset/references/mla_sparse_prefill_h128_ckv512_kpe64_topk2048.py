"""Sparse MLA prefill (DeepSeek-V3.2 style): many query tokens, each with its own top-k slots.

Shapes: q [num_tokens, 128, 576] bf16 (per head: 512 latent "nope" dims, then 64 RoPE dims),
kv_cache [num_slots, 576] bf16 (one latent head shared by all query heads: 512 latent dims,
then 64 RoPE dims), sparse_indices [num_tokens, 2048] int32, sm_scale a Python float.
Outputs o [num_tokens, 128, 512] bf16 and lse [num_tokens, 128] float32.

Row t of sparse_indices lists the cache rows query token t attends to, in any order; -1 marks
an unused entry. Valid entries come first (padding only at the tail), every row has at least
one valid entry, and the valid entries of a row are distinct. Causality is already encoded
in the selection (a token's row only lists slots of its own sequence at or before its
position); the kernel applies no further mask. Keys are the full 576-dim rows; values are
their first 512 dims. For each token t and head h:
    s_j = sm_scale * dot(q[t, h, :576], kv_cache[idx_j, :576])   over the valid idx_j of row t
    lse[t, h] = log(sum_j exp(s_j))                                 (natural log, float32)
    o[t, h] = sum_j exp(s_j - lse[t, h]) * kv_cache[idx_j, :512]
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
    num_tokens, num_heads, _ = q.shape
    o = torch.empty(num_tokens, num_heads, D_V, dtype=torch.float32, device=q.device)
    lse = torch.empty(num_tokens, num_heads, dtype=torch.float32, device=q.device)
    for t in range(num_tokens):
        o[t], lse[t] = _attend(q[t], kv_cache, sparse_indices[t], sm_scale)
    return o.to(torch.bfloat16), lse
