"""Dense MLA decode over a paged latent cache, for a batch mixing short and long contexts.

Shapes: q [batch_size, q_len, 128, 576] bf16 (per head: 512 latent "nope" dims, then 64 RoPE
dims; q_len = 1 for plain decode, 2 for one speculative/MTP draft token), kv_cache
[num_pages, 64, 576] bf16 (one latent head: 512 latent dims, then 64 RoPE dims),
block_table [batch_size, max_pages] int32, cache_seqlens [batch_size] int32, sm_scale a
Python float. Outputs o [batch_size, q_len, 128, 512] bf16 and lse [batch_size, q_len, 128]
float32.

Request b has n_b = cache_seqlens[b] tokens in the cache, the q_len new tokens included (the
cache was written before attention). Its token at position p lives in
kv_cache[block_table[b, p // 64], p % 64]; only the first ceil(n_b / 64) entries of its
block_table row are meaningful (the rest are 0 and must not be used), and cache rows past
position n_b - 1 in the last page hold stale data that must not be read as keys.

Query i (0 <= i < q_len) of request b sits at position n_b - q_len + i and attends causally
to positions 0 .. n_b - q_len + i. Keys are full 576-dim rows, values their first 512 dims:
    s_p = sm_scale * dot(q[b, i, h], K_b[p])                  for p <= n_b - q_len + i
    lse[b, i, h] = log(sum_p exp(s_p))                        (natural log, float32)
    o[b, i, h] = sum_p exp(s_p - lse[b, i, h]) * K_b[p, :512]
All arithmetic is float32; o is rounded to bfloat16 at the end.
"""

import torch

D_V = 512  # value dims: the latent part of each cache row


def run(q, kv_cache, block_table, cache_seqlens, sm_scale):
    batch_size, q_len, num_heads, _ = q.shape
    _, page_size, d_qk = kv_cache.shape
    o = torch.empty(batch_size, q_len, num_heads, D_V, dtype=torch.float32, device=q.device)
    lse = torch.empty(batch_size, q_len, num_heads, dtype=torch.float32, device=q.device)
    for b in range(batch_size):
        n = int(cache_seqlens[b])
        pages = block_table[b, : (n + page_size - 1) // page_size].long()
        kv = kv_cache[pages].reshape(-1, d_qk)[:n].float()  # [n, 576], in position order
        scores = torch.einsum("shd,nd->shn", q[b].float(), kv) * sm_scale  # [q_len, H, n]
        query_pos = torch.arange(n - q_len, n, device=q.device).view(q_len, 1, 1)
        key_pos = torch.arange(n, device=q.device).view(1, 1, n)
        scores = scores.masked_fill(key_pos > query_pos, float("-inf"))
        row_lse = torch.logsumexp(scores, dim=-1)
        probs = torch.exp(scores - row_lse.unsqueeze(-1))
        o[b] = torch.einsum("shn,nd->shd", probs, kv[:, :D_V])
        lse[b] = row_lse
    return o.to(torch.bfloat16), lse
