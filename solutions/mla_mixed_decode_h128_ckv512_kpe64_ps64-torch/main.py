"""Plain PyTorch baseline: paged MLA decode by gathering pages into padded per-bucket batches.

Without a paged-attention kernel, an engine gathers each request's pages through block_table
into a contiguous [request, pages * 64, 576] latent K (first 512 dims are V) and runs dense
attention with a mask. Padding every request to the longest context would multiply the work
for a short/long mix, so requests are bucketed by page count rounded up to a power of two
(padding at most 2x) and each bucket is one batched step, split further so that a step gathers
at most 2^20 cache rows (bounding its float32 copies to a few GB). Positions past a query's
causal limit (n - q_len + i), including stale rows and the unused block_table entries (0), are
masked with -inf. Scores are computed in float32 from the bf16 values, because the LSE is an
output with a 1e-3 tolerance and SDPA neither returns it nor takes a 576-dim head; softmax via
logsumexp, then probs @ V, rounded to bf16. cache_seqlens is read on the host to form buckets.
"""

from collections import defaultdict

import torch

D_V = 512
MAX_ROWS_PER_STEP = 1 << 20


def _attend(q, kv_cache, block_table, cache_seqlens, reqs, num_pages, sm_scale):
    """Outputs (bf16 o, float32 lse) of the requests `reqs`, padded to num_pages pages each."""
    n = reqs.shape[0]
    q_len, heads, d_qk = q.shape[1:]
    keys = num_pages * kv_cache.shape[1]
    kv = kv_cache[block_table[reqs, :num_pages].long()].view(n, keys, d_qk).float()
    scores = torch.matmul(q[reqs].float().view(n, q_len * heads, d_qk), kv.transpose(1, 2))
    scores = (scores * sm_scale).view(n, q_len, heads, keys)
    # Query i of a request with n_b cached tokens sees positions 0 .. n_b - q_len + i.
    last = cache_seqlens[reqs].long()[:, None] - q_len + torch.arange(q_len, device=q.device)
    hidden = torch.arange(keys, device=q.device)[None, None, :] > last[:, :, None]
    scores.masked_fill_(hidden[:, :, None, :], float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)  # [n, q_len, heads]
    probs = torch.exp(scores - lse[..., None]).view(n, q_len * heads, keys)
    o = torch.matmul(probs, kv[..., :D_V]).view(n, q_len, heads, D_V)
    return o.to(torch.bfloat16), lse


def run(q, kv_cache, block_table, cache_seqlens, sm_scale):
    batch, q_len, heads, _ = q.shape
    page_size = kv_cache.shape[1]
    o = torch.empty(batch, q_len, heads, D_V, dtype=torch.bfloat16, device=q.device)
    lse = torch.empty(batch, q_len, heads, dtype=torch.float32, device=q.device)
    pages = [(n + page_size - 1) // page_size for n in cache_seqlens.tolist()]
    buckets = defaultdict(list)
    for b, p in enumerate(pages):
        buckets[1 << (p - 1).bit_length()].append(b)
    for _, members in sorted(buckets.items()):
        per_step = max(1, MAX_ROWS_PER_STEP // (max(pages[b] for b in members) * page_size))
        for first in range(0, len(members), per_step):
            step = members[first : first + per_step]
            reqs = torch.tensor(step, dtype=torch.long, device=q.device)
            num_pages = max(pages[b] for b in step)
            o_step, lse_step = _attend(
                q, kv_cache, block_table, cache_seqlens, reqs, num_pages, sm_scale
            )
            o[reqs] = o_step
            lse[reqs] = lse_step
    return o, lse
