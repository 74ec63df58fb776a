"""The layout SGLang's FA3 extend path hands sgl-kernel's flash_attn_with_kvcache, built from
the definition's dense tensors. Pure torch: it runs (and is tested) on the CPU.

SGLang never passes the prefix as a dense tensor. Its KV pool holds every token of every
request, and the FA3 backend (FlashAttentionBackend.forward_extend in
srt/layers/attention/flashattention_backend.py) reads it through a page table:

    k_cache, v_cache  the pool viewed as [num_pages, page_size, kv_heads, head_dim]
    page_table        [batch, pages of the longest request] int32, request b's pages in order
    cache_seqlens     [batch] int32, all keys of request b: prefix and this chunk
    cu_seqlens_q      [batch + 1] int32, the chunk's queries packed as [total_q, heads, dim]
    cu_seqlens_k      [batch + 1] int32, cumulative cache_seqlens (passed as cu_seqlens_k_new)
    max_seqlen_q      the longest chunk, a host int

The engine writes the chunk's K/V into the pool before attention, so by the time the kernel
runs, the pool holds prefix and chunk side by side. Here the pool is this adapter's own buffer:
`plan` sizes it and builds the index tensors (they depend on the shapes alone), and
`write_pool` copies prefix and chunk K/V into it on every call: a copy of all keys and values,
the price of starting from dense tensors instead of an engine's pool. Request b owns the
consecutive pages b * pages_per_request ..; a page's tail past the request's keys is never
read, since cache_seqlens bounds every request.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

PAGE_SIZE = 1
"""SGLang's default page size on CUDA (the server argument page_size resolves to 1 there), so
the FA3 backend's page table lists one slot per token."""


@dataclass(frozen=True)
class PagedExtend:
    """The pool and the metadata of one extend call, as FA3's extend path receives them."""

    k_pool: torch.Tensor
    v_pool: torch.Tensor
    page_table: torch.Tensor
    cache_seqlens: torch.Tensor
    cu_seqlens_q: torch.Tensor
    cu_seqlens_k: torch.Tensor
    max_seqlen_q: int
    prefix_len: int


def plan(q: torch.Tensor, prefix_k: torch.Tensor, page_size: int = PAGE_SIZE) -> PagedExtend:
    """Allocate the pool for q's chunk after prefix_k's prefix and build the index tensors
    (shape-only work, done outside the timed call in prepare)."""
    batch, q_len, _, _ = q.shape
    prefix_len, kv_heads, head_dim = prefix_k.shape[1], prefix_k.shape[2], prefix_k.shape[3]
    keys = prefix_len + q_len
    pages = (keys + page_size - 1) // page_size
    device = q.device

    def pool() -> torch.Tensor:
        flat = torch.empty(
            batch * pages * page_size, kv_heads, head_dim, dtype=q.dtype, device=device
        )
        return flat.view(batch * pages, page_size, kv_heads, head_dim)

    def int32(values: torch.Tensor) -> torch.Tensor:
        return values.to(device=device, dtype=torch.int32)

    page_table = torch.arange(batch * pages, device=device).view(batch, pages)
    per_request = torch.arange(batch + 1, device=device)
    return PagedExtend(
        k_pool=pool(),
        v_pool=pool(),
        page_table=int32(page_table),
        cache_seqlens=int32(torch.full((batch,), keys, device=device)),
        cu_seqlens_q=int32(per_request * q_len),
        cu_seqlens_k=int32(per_request * keys),
        max_seqlen_q=q_len,
        prefix_len=prefix_len,
    )


def request_rows(pool: torch.Tensor, batch: int) -> torch.Tensor:
    """The pool as [batch, slots per request, kv_heads, head_dim] (a view): request b's
    token t sits at slot t of row b, because its pages are consecutive."""
    return pool.view(batch, -1, pool.shape[2], pool.shape[3])


def write_pool(
    paged: PagedExtend,
    prefix_k: torch.Tensor,
    prefix_v: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
) -> None:
    """Copy every request's prefix, then its chunk, into the pool (what the engine's KV cache
    holds when FA3 runs: the prefix from earlier steps, the chunk written just before)."""
    batch, prefix_len, q_len = k.shape[0], paged.prefix_len, k.shape[1]
    for pool, prefix, chunk in ((paged.k_pool, prefix_k, k), (paged.v_pool, prefix_v, v)):
        rows = request_rows(pool, batch)
        rows[:, :prefix_len].copy_(prefix)
        rows[:, prefix_len : prefix_len + q_len].copy_(chunk)


def packed_queries(q: torch.Tensor) -> torch.Tensor:
    """q [batch, q_len, heads, dim] as FA3's varlen [total_q, heads, dim] (a view)."""
    return q.reshape(q.shape[0] * q.shape[1], q.shape[2], q.shape[3])
