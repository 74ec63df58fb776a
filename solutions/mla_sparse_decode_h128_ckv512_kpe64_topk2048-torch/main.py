"""Plain PyTorch baseline: sparse MLA decode as gather + batched matmul/softmax.

The selected latent rows of every request are gathered from the cache (padding entries -1 read
row 0 and are masked out), giving a dense [batch, 2048, 576] K whose first 512 dims are V.
Scores are one batched matmul (128 heads x 2048 rows per request) in float32 from the bf16
values, because the LSE is an output with a 1e-3 tolerance and SDPA neither returns it nor takes
a 576-dim head; softmax via logsumexp, then probs @ V, rounded to bf16. No Python loop.
"""

import torch

D_V = 512


def run(q, kv_cache, sparse_indices, sm_scale):
    kv = kv_cache[sparse_indices.long().clamp(min=0)].float()  # [b, topk, 576]
    scores = torch.matmul(q.float(), kv.transpose(1, 2)) * sm_scale  # [b, heads, topk]
    scores = scores.masked_fill((sparse_indices < 0)[:, None, :], float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    probs = torch.exp(scores - lse[..., None])
    o = torch.matmul(probs, kv[..., :D_V])  # [b, heads, 512]
    return o.to(torch.bfloat16), lse
