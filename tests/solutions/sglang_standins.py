"""Pure-torch stand-ins of the SGLang calls the `-sglang` solutions make, written from the
calls' documented contracts (argument layouts, dtypes, masks), so that each solution's whole
main.py (adapter and call wiring) runs on the CPU against the definition's reference.

Each stand-in also checks what the native call would refuse or misread: int32 metadata,
contiguous last dimensions, lengths that stay inside their tensors. They are slow and exact:
float32 attention, one sequence at a time. What they cannot show is the native kernels' own
numerics and limits (head dims, alignment, launch bounds): that is the GPU run's business.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

import torch


def _int32(name: str, t: torch.Tensor) -> None:
    assert t.dtype == torch.int32, f"{name} must be int32, got {t.dtype}"


def attend(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, causal: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """One sequence: q [lq, hq, d], k/v [lk, hkv, d]; query head h reads KV head
    h // (hq // hkv); causal aligned to the bottom right (FA3/FA4: query i sees keys
    j <= i + lk - lq). Returns (out [lq, hq, d] float32, lse [hq, lq])."""
    group = q.shape[1] // k.shape[1]
    kf = k.float().repeat_interleave(group, dim=1)
    vf = v.float().repeat_interleave(group, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q.float(), kf) * scale
    if causal:
        lq, lk = q.shape[0], k.shape[0]
        rows = torch.arange(lq).view(-1, 1) + (lk - lq)
        scores = scores.masked_fill(torch.arange(lk).view(1, -1) > rows, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    out = torch.einsum("hqk,khd->qhd", torch.exp(scores - lse.unsqueeze(-1)), vf)
    return out, lse


def fa3_with_kvcache(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    *,
    page_table: torch.Tensor,
    cache_seqlens: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    max_seqlen_q: int,
    softmax_scale: float | None = None,
    causal: bool = False,
    return_softmax_lse: bool = False,
    **rest: Any,
) -> Any:
    """sgl_kernel.flash_attn.flash_attn_with_kvcache, paged cache and varlen queries only:
    request b's queries are q[cu_seqlens_q[b]:cu_seqlens_q[b + 1]], its keys the first
    cache_seqlens[b] slots of the pages page_table[b, :] lists. LSE is [heads, total_q]."""
    assert rest.get("k") is None and rest.get("v") is None, "the engine does not append k/v"
    for name, t in (("page_table", page_table), ("cache_seqlens", cache_seqlens)):
        _int32(name, t)
    _int32("cu_seqlens_q", cu_seqlens_q)
    assert k_cache.stride(-1) == 1 and v_cache.stride(-1) == 1 and q.stride(-1) == 1
    page_size = k_cache.shape[1]
    scale = softmax_scale if softmax_scale is not None else q.shape[-1] ** -0.5
    out = torch.zeros(q.shape, dtype=torch.float32)
    lse = torch.zeros(q.shape[1], q.shape[0], dtype=torch.float32)
    starts = cu_seqlens_q.tolist()
    for b, length in enumerate(cache_seqlens.tolist()):
        lq = starts[b + 1] - starts[b]
        assert 0 < lq <= max_seqlen_q
        pages = page_table[b, : (length + page_size - 1) // page_size].long()
        assert (pages >= 0).all(), "a page the kernel reads is -1"

        def keys(cache: torch.Tensor, pages: torch.Tensor = pages, n: int = length):
            return cache[pages].reshape(-1, cache.shape[2], cache.shape[3])[:n]

        rows = slice(starts[b], starts[b + 1])
        out[rows], lse[:, rows] = attend(q[rows], keys(k_cache), keys(v_cache), scale, causal)
    result = out.to(q.dtype)
    return (result, lse) if return_softmax_lse else result


def fa3_varlen(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    max_seqlen_q: int | None = None,
    max_seqlen_k: int | None = None,
    seqused_q: torch.Tensor | None = None,
    seqused_k: torch.Tensor | None = None,
    softmax_scale: float | None = None,
    causal: bool = False,
    out: torch.Tensor | None = None,
    **_: Any,
) -> torch.Tensor:
    """sgl_kernel.flash_attn.flash_attn_varlen_func (also the FA4 varlen call): sequence n
    starts at cu_seqlens[n] and is seqused[n] long when seqused is given, else runs to
    cu_seqlens[n + 1]. Only the rows of the sequences are written."""
    assert max_seqlen_q is not None and max_seqlen_k is not None, "FA3 needs both maxima"
    for name, t in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
        _int32(name, t)
    scale = softmax_scale if softmax_scale is not None else q.shape[-1] ** -0.5
    result = out if out is not None else torch.zeros_like(q)

    def spans(cu: torch.Tensor, used: torch.Tensor | None, bound: int) -> list[tuple[int, int]]:
        bounds = cu.tolist()
        starts = bounds[:-1]
        lengths = [b - a for a, b in itertools.pairwise(bounds)] if used is None else used.tolist()
        assert all(0 < n <= bound for n in lengths), (lengths, bound)
        return [(a, a + n) for a, n in zip(starts, lengths, strict=True)]

    for (qa, qb), (ka, kb) in zip(
        spans(cu_seqlens_q, seqused_q, max_seqlen_q),
        spans(cu_seqlens_k, seqused_k, max_seqlen_k),
        strict=True,
    ):
        assert qb <= q.shape[0] and kb <= k.shape[0]
        part, _ = attend(q[qa:qb], k[ka:kb], v[ka:kb], scale, causal)
        result[qa:qb] = part.to(result.dtype)
    return result


class VisionFlash4AttentionStandIn:
    """srt/layers/attention/vision.VisionFlash4Attention: cu_seqlens=None means equal-length
    images (arange(bsz + 1) * seq_len); max_seqlen given by the caller is used as is."""

    def forward(self, q, k, v, cu_seqlens, bsz, seq_len, softmax_scale=None, **kwargs):
        if cu_seqlens is None:
            cu_seqlens = torch.arange(bsz + 1, dtype=torch.int32) * seq_len
        max_seqlen = kwargs.get("max_seqlen")
        lengths = cu_seqlens[1:] - cu_seqlens[:-1]
        assert max_seqlen == int(lengths.max()), "max_seqlen is not the longest sequence"
        return fa3_varlen(
            q, k, v, cu_seqlens.to(torch.int32), cu_seqlens.to(torch.int32),
            max_seqlen, max_seqlen, softmax_scale=softmax_scale,
        )  # fmt: skip


def fp8_paged_mqa_logits(
    q_fp8, kv_pages, gates, context_lens, block_table, schedule, max_seq_len, clean_logits
):
    """deep_gemm.fp8_paged_mqa_logits for next_n = 1, read from the index-key pool's bytes
    (per page: 64 * 128 e4m3 values, then 64 float32 scales):
    logits[b, j] = sum_h gates[b, h] * relu(q_fp8[b, 0, h] . k_fp8[j]) * k_scale[j]."""
    assert q_fp8.dtype == torch.float8_e4m3fn and q_fp8.shape[1] == 1
    assert kv_pages.dtype == torch.uint8 and kv_pages.shape[1:] == (64, 1, 132)
    _int32("context_lens", context_lens)
    _int32("block_table", block_table)
    assert context_lens.shape == (q_fp8.shape[0], 1) and not clean_logits
    flat = kv_pages.reshape(kv_pages.shape[0], -1)
    values = flat[:, : 64 * 128].contiguous().view(torch.float8_e4m3fn).float().view(-1, 64, 128)
    scales = flat[:, 64 * 128 :].contiguous().view(torch.float32).view(-1, 64)
    logits = torch.full((q_fp8.shape[0], max_seq_len), float("nan"))  # garbage past a row
    for b, length in enumerate(context_lens.view(-1).tolist()):
        pages = block_table[b, : (length + 63) // 64].long()
        keys = values[pages].reshape(-1, 128)[:length]
        dots = torch.relu(q_fp8[b, 0].float() @ keys.T)  # [heads, length]
        logits[b, :length] = (gates[b].view(-1, 1) * dots).sum(dim=0) * scales[pages].reshape(-1)[
            :length
        ]
    return logits


def fast_topk_v2(score: torch.Tensor, lengths: torch.Tensor, topk: int) -> torch.Tensor:
    """sgl_kernel.fast_topk_v2: the top `topk` of score[b, :lengths[b]], unordered, -1 filled.
    Among tied scores at the cut it keeps the HIGHER positions, the opposite of the
    definition's rule, so that the solution must restore the order itself."""
    _int32("lengths", lengths)
    out = torch.full((score.shape[0], topk), -1, dtype=torch.int32)
    for b, length in enumerate(lengths.tolist()):
        row = score[b, :length]
        flipped = torch.sort(row.flip(0), descending=True, stable=True).indices[:topk]
        chosen = (length - 1 - flipped).flip(0)  # unordered: reversed
        out[b, : chosen.numel()] = chosen.to(torch.int32)
    return out


def moe_fused_gate(
    scores, bias, topk, scoring_func, *, bias_alt, input_ids, bias_alt_token_id,
    renormalize, renormalize_epsilon, routed_scaling_factor,
    apply_routed_scaling_factor_on_output, sqrtsoftplus_log1p, **_: Any,
):  # fmt: skip
    """sglang.kernels.ops.moe.moe_fused_gate for scoring_func="sqrtsoftplus" with a per-token
    bias choice: ids by descending biased score (lowest id on ties), weights from the unbiased
    scores, renormalised over the chosen ones (sum + epsilon), times the scaling on output."""
    assert scoring_func == "sqrtsoftplus" and renormalize and apply_routed_scaling_factor_on_output
    assert scores.dtype == torch.float32 and input_ids.dtype == torch.int32
    raw = torch.sqrt(torch.log1p(torch.exp(scores))) if sqrtsoftplus_log1p else None
    assert raw is not None
    row_bias = torch.where((input_ids == bias_alt_token_id).view(-1, 1), bias_alt, bias)
    ids = torch.sort(raw + row_bias, dim=1, descending=True, stable=True).indices[:, :topk]
    chosen = torch.gather(raw, 1, ids)
    weights = chosen / (chosen.sum(dim=1, keepdim=True) + renormalize_epsilon)
    return weights * routed_scaling_factor, ids.to(torch.int32)


def _module(name: str, **attributes: Any) -> ModuleType:
    module = ModuleType(name)
    module.__dict__.update(attributes)
    return module


def fake_modules() -> dict[str, ModuleType]:
    """sys.modules entries that stand in for every import the `-sglang` solutions make."""
    modules = {
        name: _module(name)
        for name in (
            "sglang", "sglang.srt", "sglang.srt.layers", "sglang.srt.layers.attention",
            "sglang.srt.layers.attention.dsa", "sglang.kernels", "sglang.kernels.ops",
            "sglang.kernels.ops.moe",
        )
    }  # fmt: skip
    modules["sgl_kernel"] = _module("sgl_kernel", fast_topk_v2=fast_topk_v2)
    modules["sgl_kernel.flash_attn"] = _module(
        "sgl_kernel.flash_attn",
        flash_attn_with_kvcache=fa3_with_kvcache,
        flash_attn_varlen_func=fa3_varlen,
    )
    modules["sglang.srt.layers.attention.vision"] = _module(
        "sglang.srt.layers.attention.vision", VisionFlash4Attention=VisionFlash4AttentionStandIn
    )
    modules["sglang.srt.layers.attention.dsa.utils"] = _module(
        "sglang.srt.layers.attention.dsa.utils",
        resolve_fp8_paged_mqa_logits_fn=lambda: fp8_paged_mqa_logits,
        resolve_paged_mqa_logits_metadata_fn=lambda: lambda lens, block, sms: torch.zeros(1),
        resolve_num_sms=lambda: 132,
    )
    modules["sglang.kernels.ops.moe.moe_fused_gate"] = _module(
        "sglang.kernels.ops.moe.moe_fused_gate", moe_fused_gate=moe_fused_gate
    )
    return modules


@contextmanager
def standing_in() -> Iterator[None]:
    """The fake modules in sys.modules for the duration; everything imported meanwhile (the
    solutions' own `adapter` modules included) is dropped afterwards, so the next solution's
    `from adapter import` finds its own file."""
    import sys

    before = set(sys.modules)
    sys.modules.update(fake_modules())
    try:
        yield
    finally:
        for name in set(sys.modules) - before:
            del sys.modules[name]
