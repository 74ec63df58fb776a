"""Sparse GQA decode over a paged KV cache: each request attends only to its selected slots.

Shapes: q [batch_size, 32, 128], k_cache / v_cache [num_pages, 64, 8, 128] (bf16),
sparse_indices [batch_size, 2048] int32. Outputs o [batch_size, 32, 128] bf16 and
lse [batch_size, 32] float32.

A slot id s addresses row (s // 64, s % 64) of the caches, i.e. slot = page * 64 + offset;
equivalently the caches are viewed as [num_pages * 64, 8, 128]. Row b of sparse_indices lists
the slots request b attends to, in any order; -1 marks an unused entry. Valid entries come
first (padding only at the tail), every row has at least one valid entry, and the valid
entries of a row are distinct. The same selection is used by every head of the request.

Query head h reads KV head h // 4 (32 query heads share 8 KV heads in groups of 4 consecutive
heads). With scale = 1 / sqrt(128), for each request b and query head h:
    s_j = scale * dot(q[b, h], K[slot_j, h // 4])        over the valid slots j of row b
    lse[b, h] = log(sum_j exp(s_j))                        (natural log, float32)
    o[b, h] = sum_j exp(s_j - lse[b, h]) * V[slot_j, h // 4]
All arithmetic is float32; o is rounded to bfloat16 at the end.
"""

import math

import torch

GROUP = 4  # query heads per KV head


def run(q, k_cache, v_cache, sparse_indices):
    batch_size, num_qo_heads, head_dim = q.shape
    num_pages, page_size, num_kv_heads, _ = k_cache.shape
    scale = 1.0 / math.sqrt(head_dim)
    keys = k_cache.reshape(num_pages * page_size, num_kv_heads, head_dim)
    values = v_cache.reshape(num_pages * page_size, num_kv_heads, head_dim)
    o = torch.empty(batch_size, num_qo_heads, head_dim, dtype=torch.float32, device=q.device)
    lse = torch.empty(batch_size, num_qo_heads, dtype=torch.float32, device=q.device)
    for b in range(batch_size):
        row = sparse_indices[b].long()
        slots = row[row >= 0]
        k = keys[slots].float()  # [n, kv_heads, D]
        v = values[slots].float()
        qb = q[b].float().reshape(num_kv_heads, GROUP, head_dim)
        scores = torch.einsum("hgd,nhd->hgn", qb, k) * scale  # [kv_heads, GROUP, n]
        row_lse = torch.logsumexp(scores, dim=-1)
        probs = torch.exp(scores - row_lse.unsqueeze(-1))
        out = torch.einsum("hgn,nhd->hgd", probs, v)
        o[b] = out.reshape(num_qo_heads, head_dim)
        lse[b] = row_lse.reshape(num_qo_heads)
    return o.to(torch.bfloat16), lse
