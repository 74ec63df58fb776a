"""The FP8 inputs SGLang's DSA indexer scores, made from the definition's bf16 tensors, and
the definition's ordered ids made from the indexer's unordered top-k. Pure torch: it runs
(and is tested) on the CPU.

THE CONVERSION CHANGES THE NUMBERS IN GENERAL. SGLang's indexer (Indexer._get_topk_paged,
srt/layers/attention/dsa/dsa_indexer.py) never sees bf16 q or keys: it scores FP8 e4m3
values with one float32 scale per 128-value block (each query head of a token, each key),
produced by its own quantizer (act_quant, kernels/ops/attention/dsa/triton_kernel.py). The
definition's inputs are bf16, so they are quantized here with that quantizer's rule in its
power-of-two form (scale_fmt set, as DeepSeek-V3.2 configures it):

    scale = 2 ** ceil(log2(max(amax, 1e-4) / 448)),   x_fp8 = e4m3(clamp(x / scale, +-448))

A bf16 value survives this only when x / scale has at most 4 significant bits and lies in
e4m3's range. The definition's sample inputs are small integers (-3 .. 3), for which it does:
x / scale is x times a power of two (x * 128 for amax 2 or 3, x * 256 for amax 1), exactly
representable, and every product and partial sum of the scores then stays exact in float32.
For general bf16 inputs the scores change and the selected ids may differ: that is the
indexer's precision, not this adapter's error, and a failing line then says so.

The layouts are those of the engine's index-key pool and DeepGEMM's fp8_paged_mqa_logits:
    q_fp8    [batch, 1, 64, 128] e4m3 (one decode token per request: next_n = 1)
    gates    [batch, 64] float32: the definition's per-head weights times the query scales
             (the engine folds q's scale into the head gates the same way)
    kv pages [num_pages, 64 * (128 + 4)] uint8: per page, the 64 tokens' 128 e4m3 bytes, then
             their 64 float32 scales; viewed as [num_pages, 64, 1, 132] for the call
    context  seq_lens as [batch, 1] int32; block table = the definition's page table as is
             (its -1 tail is never read: the kernel stops at context_lens)

The engine's top-k (sgl-kernel fast_topk_v2) returns the chosen positions unordered, and among
equal scores at the cut it keeps any of them. The definition wants the lower position to win
ties and the ids ascending. `ordered_topk` keeps the native selection's threshold (its lowest
chosen score), takes every position scoring above it and then the lowest positions scoring
exactly at it, and writes them ascending with -1 padding: the native top-k decides the cut,
a deterministic compaction the order.
"""

from __future__ import annotations

import torch

FP8_MAX = 448.0
AMAX_FLOOR = 1e-4
TOPK = 2048


def quantize_blocks(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x [..., 128] as e4m3 values and one power-of-two float32 scale per row of 128."""
    amax = x.float().abs().amax(dim=-1, keepdim=True).clamp(min=AMAX_FLOOR)
    scale = torch.exp2(torch.ceil(torch.log2(amax / FP8_MAX)))
    values = (x.float() / scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return values, scale.squeeze(-1)


def indexer_query(q: torch.Tensor, weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """q [batch, 64, 128] bf16 -> q_fp8 [batch, 1, 64, 128]; weights [batch, 64] -> the head
    gates with each head's query scale folded in (relu(s * x) = s * relu(x) for s > 0)."""
    values, scale = quantize_blocks(q)
    return values.unsqueeze(1), weights.float() * scale


def index_key_pages(k_cache: torch.Tensor) -> torch.Tensor:
    """k_cache [num_pages, 64, 128] bf16 -> the index-key pool [num_pages, 64, 1, 132] uint8:
    each page's 64 * 128 e4m3 bytes, then its 64 float32 scales."""
    pages, page_size, dim = k_cache.shape
    values, scale = quantize_blocks(k_cache)
    pool = torch.empty(pages, page_size * (dim + 4), dtype=torch.uint8, device=k_cache.device)
    pool[:, : page_size * dim] = values.view(torch.uint8).reshape(pages, page_size * dim)
    pool[:, page_size * dim :] = scale.contiguous().view(torch.uint8).reshape(pages, -1)
    return pool.view(pages, page_size, 1, dim + 4)


def context_lens(seq_lens: torch.Tensor) -> torch.Tensor:
    """seq_lens [batch] as the [batch, next_n = 1] int32 the scorer and its scheduler take."""
    return seq_lens.to(torch.int32).view(-1, 1).contiguous()


def ordered_topk(
    logits: torch.Tensor, native_ids: torch.Tensor, seq_lens: torch.Tensor
) -> torch.Tensor:
    """The definition's ids from the native selection: the top min(2048, seq_len) live
    positions, ties to the lower position, ascending, -1 padded (see the module docstring)."""
    batch, width = logits.shape
    positions = torch.arange(width, device=logits.device).expand(batch, width)
    live = positions < seq_lens.to(torch.int64).view(-1, 1)
    chosen = native_ids.to(torch.int64)
    valid = (chosen >= 0) & (chosen < seq_lens.to(torch.int64).view(-1, 1))
    picked = torch.gather(logits, 1, chosen.clamp(min=0, max=width - 1))
    threshold = torch.where(valid, picked, torch.full_like(picked, float("inf"))).amin(dim=1)
    above = live & (logits > threshold.view(-1, 1))
    ties = live & (logits == threshold.view(-1, 1))
    room = seq_lens.to(torch.int64).clamp(max=TOPK) - above.sum(dim=1)
    keep = above | (ties & (torch.cumsum(ties.to(torch.int64), dim=1) <= room.view(-1, 1)))
    order = torch.where(keep, positions, torch.full_like(positions, width))
    ranked = torch.sort(order, dim=1).values[:, :TOPK]
    if ranked.shape[1] < TOPK:
        ranked = torch.nn.functional.pad(ranked, (0, TOPK - ranked.shape[1]), value=width)
    return torch.where(ranked < width, ranked, torch.full_like(ranked, -1)).to(torch.int32)
