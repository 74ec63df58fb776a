"""Plain PyTorch baseline: sparse GQA decode as gather + matmul/softmax over the selected slots.

The selected slots of every request are gathered from the paged caches (viewed flat as
[num_pages * 64, 8, 128]; padding entries -1 read slot 0 and are masked out), so each request
has a dense [2048, 8, 128] K and V. Scores are one batched matmul per KV head for its 4 query
heads, computed in float32 from the bf16 values because the LSE is an output with a 1e-3
tolerance (SDPA does not return it); softmax via logsumexp, then probs @ V, rounded to bf16.
Vectorised over the batch, no Python loop.
"""

import math

import torch

SCALE = 1.0 / math.sqrt(128)


def run(q, k_cache, v_cache, sparse_indices):
    batch, qo_heads, dim = q.shape
    kv_heads = k_cache.shape[2]
    group = qo_heads // kv_heads
    slots = sparse_indices.long().clamp(min=0)  # [b, topk]
    keys = k_cache.view(-1, kv_heads, dim)[slots].float()  # [b, topk, kv_heads, dim]
    values = v_cache.view(-1, kv_heads, dim)[slots].float()
    qg = q.float().view(batch, kv_heads, group, dim)  # query head h = kv head h // group
    scores = torch.matmul(qg, keys.permute(0, 2, 3, 1)) * SCALE  # [b, kv_heads, group, topk]
    padding = (sparse_indices < 0)[:, None, None, :]
    scores = scores.masked_fill(padding, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    probs = torch.exp(scores - lse[..., None])
    o = torch.matmul(probs, values.transpose(1, 2))  # [b, kv_heads, group, dim]
    return o.reshape(batch, qo_heads, dim).to(torch.bfloat16), lse.reshape(batch, qo_heads)
