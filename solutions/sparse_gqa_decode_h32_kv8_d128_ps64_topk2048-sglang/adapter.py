"""The layout SGLang's sparse (DSA) FA3 path hands sgl-kernel's flash_attn_with_kvcache for a
decode step, built from the definition's paged cache and top-k slot rows. Pure torch: it runs
(and is tested) on the CPU.

SGLang's sparse-attention backend (DSA, srt/layers/attention/dsa_backend.py, _forward_fa3)
attends a token's top-k selection by treating the selected slot ids as a page table of page
size 1: every slot is a page of one token. The definition's slot id is page * 64 + offset in
a [num_pages, 64, 8, 128] cache, which is row slot of the same cache viewed as
[num_pages * 64, 1, 8, 128]: a view, no copy. The remaining metadata is the FA3 decode form
of the backend (FlashAttentionBackend.forward_decode): one query per request, packed as
[batch, 32, 128], cu_seqlens_q = 0, 1, .., batch, max_seqlen_q = 1.

cache_seqlens is the number of valid (non -1) entries of each row: FA3 reads only the first
cache_seqlens entries of a page-table row, and the definition puts its -1 padding at the tail,
so the padding is never dereferenced (the engine passes its -1 padded top-k rows the same way).
Entries may come in any order: attention does not depend on the keys' order.

FA3 returns the log-sum-exp of a varlen call as [heads, total_q]; the engine transposes it to
[total_q, heads] (softmax_lse.T.contiguous()), which is the definition's [batch, 32].
"""

from __future__ import annotations

import torch


def slot_pages(cache: torch.Tensor) -> torch.Tensor:
    """[num_pages, 64, kv_heads, dim] as [num_pages * 64, 1, kv_heads, dim]: slot s is page s
    of one token (a view)."""
    pages, page_size, kv_heads, dim = cache.shape
    return cache.view(pages * page_size, 1, kv_heads, dim)


def query_starts(batch: int, device: torch.device) -> torch.Tensor:
    """cu_seqlens_q of one query per request (shape-only: built in prepare)."""
    return torch.arange(batch + 1, dtype=torch.int32, device=device)


def selected_counts(sparse_indices: torch.Tensor) -> torch.Tensor:
    """cache_seqlens: the valid entries of each row (the -1 padding sits at the tail)."""
    return (sparse_indices >= 0).sum(dim=1, dtype=torch.int32)


def lse_rows(softmax_lse: torch.Tensor) -> torch.Tensor:
    """FA3's varlen LSE [heads, total_q] as [total_q, heads], as the engine turns it."""
    return softmax_lse.T.contiguous()
