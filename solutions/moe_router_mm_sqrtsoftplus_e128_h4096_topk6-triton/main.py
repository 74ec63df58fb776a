"""Triton MoE router: bf16 projection with float32 accumulation fused with sqrt-softplus top-6.

Approach
  * One Triton GEMM kernel computes logits = hidden @ weight^T for a block of BM tokens and all
    128 experts at once (tl.dot on the bf16 operands, float32 accumulator; bf16 products are
    exact in float32, so only the summation order differs from the reference).
  * Large batches (>= ~100 token tiles): the routing epilogue runs inside the GEMM kernel on the
    float32 accumulator, so logits never touch memory.
  * Small batches (decode): the K dimension is split over up to 64 programs so that enough SMs
    stream the 1 MB router weight; each split writes float32 partial logits, and a second small
    kernel loads all splits of a few tokens at once, sums them with a fixed reduction tree
    (deterministic) and runs the same epilogue.
  * Epilogue per token (float32): score = sqrt(softplus(logit)) with softplus = x for x > 20,
    else log1p(exp(x)) (torch's formula; libdevice expf/log1pf and a correctly rounded sqrt
    on the GPU: the functions torch's CUDA softplus and sqrt use); experts of the other modality are
    masked; six rounds of "max, then the lowest expert ID holding it" pick the top 6 with the
    lower-ID tie rule (each round's max is the picked expert's score); a 12-comparator sorting
    network puts the six (ID, score) pairs in ascending-ID order, and
    weights = score / sum(chosen scores) * routed_scaling_factor.

Why it should be fast: the router is bound by reading hidden (8 KB per token); the fused path
reads hidden once and the 1 MB weight from L2, with no float32 logits round trip, no sort and a
single launch; decode sizes use split-K so the weight is streamed by many SMs at once.
"""

import os

import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

TOP_K = 6
HIDDEN = 4096
EXPERTS = 128
BK = 64

# The interpreter (TRITON_INTERPRET=1, CPU validation) has no libdevice (an accurate log1p built
# from tl.log stands in) and mis-evaluates tl.dot on bf16 operands (they are widened to float32
# there first, which gives the same exact products).
_PRECISE = os.environ.get("TRITON_INTERPRET", "0") not in ("1", "true", "True")


@triton.jit
def _sqrt_softplus(x, PRECISE: tl.constexpr):
    """sqrt(softplus(x)) exactly as torch computes it (threshold 20, log1p(exp(x)))."""
    small = tl.minimum(x, 20.0)  # keeps exp finite on the branch that is not taken
    if PRECISE:
        sp = libdevice.log1p(libdevice.exp(small))
        sp = tl.where(x > 20.0, x, sp)
        return tl.sqrt_rn(sp)
    else:
        y = tl.exp(small)
        u = 1.0 + y
        # log1p(y) = log(u) * y / (u - 1), exact enough when u rounds to 1 (then it is y)
        lp = tl.where(u == 1.0, y, tl.log(u) * (y / tl.where(u == 1.0, 1.0, u - 1.0)))
        sp = tl.where(x > 20.0, x, lp)
        return tl.sqrt(sp)


@triton.jit
def _pick(cand, eidx, E: tl.constexpr):
    """Best remaining expert per row (lowest ID among equal scores); removes it from cand."""
    best = tl.max(cand, axis=1)  # [BT]
    first = tl.min(tl.where(cand == best[:, None], eidx, E), axis=1)  # [BT] int32
    cand = tl.where(eidx == first[:, None], float("-inf"), cand)
    return first, best, cand


@triton.jit
def _cx(ia, sa, ib, sb):
    """Compare-exchange of (id, score) pairs so that the lower ID comes first."""
    swap = ib < ia
    lo_i, lo_s = tl.where(swap, ib, ia), tl.where(swap, sb, sa)
    hi_i, hi_s = tl.where(swap, ia, ib), tl.where(swap, sa, sb)
    return lo_i, lo_s, hi_i, hi_s


@triton.jit
def _route_store(
    logits,
    offs_t,
    tmask,
    img_ptr,
    ids_ptr,
    wts_ptr,
    factor,
    E: tl.constexpr,
    TOPK: tl.constexpr,
    PRECISE: tl.constexpr,
):
    """Top-6 routing of a [BT, E] float32 logit tile; writes ids (int64) and weights (fp32)."""
    tl.static_assert(TOPK == 6)
    img = tl.load(img_ptr + offs_t, mask=tmask, other=0) != 0  # [BT]
    eidx = tl.arange(0, E)[None, :]  # [1, E]
    allowed = (eidx >= E // 2) == img[:, None]
    cand = tl.where(allowed, _sqrt_softplus(logits, PRECISE), float("-inf"))
    # six rounds of (max, lowest ID at the max): the picked score is exactly that expert's score
    i0, s0, cand = _pick(cand, eidx, E)
    i1, s1, cand = _pick(cand, eidx, E)
    i2, s2, cand = _pick(cand, eidx, E)
    i3, s3, cand = _pick(cand, eidx, E)
    i4, s4, cand = _pick(cand, eidx, E)
    i5, s5, cand = _pick(cand, eidx, E)
    # ascending IDs: an optimal 12-comparator sorting network for 6 elements
    i0, s0, i5, s5 = _cx(i0, s0, i5, s5)
    i1, s1, i3, s3 = _cx(i1, s1, i3, s3)
    i2, s2, i4, s4 = _cx(i2, s2, i4, s4)
    i1, s1, i2, s2 = _cx(i1, s1, i2, s2)
    i3, s3, i4, s4 = _cx(i3, s3, i4, s4)
    i0, s0, i3, s3 = _cx(i0, s0, i3, s3)
    i2, s2, i5, s5 = _cx(i2, s2, i5, s5)
    i0, s0, i1, s1 = _cx(i0, s0, i1, s1)
    i2, s2, i3, s3 = _cx(i2, s2, i3, s3)
    i4, s4, i5, s5 = _cx(i4, s4, i5, s5)
    i1, s1, i2, s2 = _cx(i1, s1, i2, s2)
    i3, s3, i4, s4 = _cx(i3, s3, i4, s4)
    total = s0 + s1 + s2 + s3 + s4 + s5
    base = offs_t.to(tl.int64) * TOPK
    tl.store(ids_ptr + base + 0, i0.to(tl.int64), mask=tmask)
    tl.store(ids_ptr + base + 1, i1.to(tl.int64), mask=tmask)
    tl.store(ids_ptr + base + 2, i2.to(tl.int64), mask=tmask)
    tl.store(ids_ptr + base + 3, i3.to(tl.int64), mask=tmask)
    tl.store(ids_ptr + base + 4, i4.to(tl.int64), mask=tmask)
    tl.store(ids_ptr + base + 5, i5.to(tl.int64), mask=tmask)
    tl.store(wts_ptr + base + 0, tl.div_rn(s0, total) * factor, mask=tmask)
    tl.store(wts_ptr + base + 1, tl.div_rn(s1, total) * factor, mask=tmask)
    tl.store(wts_ptr + base + 2, tl.div_rn(s2, total) * factor, mask=tmask)
    tl.store(wts_ptr + base + 3, tl.div_rn(s3, total) * factor, mask=tmask)
    tl.store(wts_ptr + base + 4, tl.div_rn(s4, total) * factor, mask=tmask)
    tl.store(wts_ptr + base + 5, tl.div_rn(s5, total) * factor, mask=tmask)


@triton.jit
def _router_gemm_kernel(
    h_ptr,
    w_ptr,
    img_ptr,
    part_ptr,
    ids_ptr,
    wts_ptr,
    T,
    factor,
    stride_h,
    stride_w,
    K: tl.constexpr,
    E: tl.constexpr,
    BM: tl.constexpr,
    BK: tl.constexpr,
    SPLIT_K: tl.constexpr,
    TOPK: tl.constexpr,
    PRECISE: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_k = tl.program_id(1)
    offs_t = pid_m * BM + tl.arange(0, BM)
    tmask = offs_t < T
    offs_e = tl.arange(0, E)
    k_len: tl.constexpr = K // SPLIT_K
    k0 = pid_k * k_len
    a_ptrs = h_ptr + offs_t.to(tl.int64)[:, None] * stride_h + (k0 + tl.arange(0, BK))[None, :]
    b_ptrs = w_ptr + offs_e.to(tl.int64)[:, None] * stride_w + (k0 + tl.arange(0, BK))[None, :]
    acc = tl.zeros((BM, E), dtype=tl.float32)
    for _ in range(0, k_len, BK):
        a = tl.load(a_ptrs, mask=tmask[:, None], other=0.0)
        b = tl.load(b_ptrs)
        if not PRECISE:
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, tl.trans(b), acc)
        a_ptrs += BK
        b_ptrs += BK
    if SPLIT_K == 1:
        _route_store(acc, offs_t, tmask, img_ptr, ids_ptr, wts_ptr, factor, E, TOPK, PRECISE)
    else:
        p_ptrs = part_ptr + (pid_k * T + offs_t).to(tl.int64)[:, None] * E + offs_e[None, :]
        tl.store(p_ptrs, acc, mask=tmask[:, None])


@triton.jit
def _router_finish_kernel(
    part_ptr,
    img_ptr,
    ids_ptr,
    wts_ptr,
    T,
    factor,
    E: tl.constexpr,
    BT: tl.constexpr,
    SPLIT_K: tl.constexpr,
    TOPK: tl.constexpr,
    PRECISE: tl.constexpr,
):
    offs_t = tl.program_id(0) * BT + tl.arange(0, BT)
    tmask = offs_t < T
    offs_s = tl.arange(0, SPLIT_K)[:, None, None]
    offs_e = tl.arange(0, E)[None, None, :]
    # all split-K partials of BT tokens in one load, summed by a fixed reduction tree
    p_ptrs = part_ptr + (offs_s * T + offs_t[None, :, None]).to(tl.int64) * E + offs_e
    parts = tl.load(p_ptrs, mask=tmask[None, :, None], other=0.0)  # [SPLIT_K, BT, E]
    logits = tl.sum(parts, axis=0)
    _route_store(logits, offs_t, tmask, img_ptr, ids_ptr, wts_ptr, factor, E, TOPK, PRECISE)


def _plan(num_tokens):
    """(BM, SPLIT_K, num_warps, num_stages) for a batch of num_tokens."""
    if num_tokens >= 8192:
        bm, warps, stages = 128, 8, 3
    else:
        bm = 16 if num_tokens <= 16 else (32 if num_tokens <= 32 else 64)
        warps, stages = 4, 4
    tiles = triton.cdiv(num_tokens, bm)
    split = 1
    if tiles < 100:
        target = max(1, min(HIDDEN // BK, 264 // tiles))
        while split * 2 <= target:
            split *= 2
    return bm, split, warps, stages


def run(hidden, weight, is_image, routed_scaling_factor):
    num_tokens, hidden_size = hidden.shape
    num_experts = weight.shape[0]
    assert hidden_size == HIDDEN and num_experts == EXPERTS and weight.shape[1] == HIDDEN
    device = hidden.device
    topk_ids = torch.empty((num_tokens, TOP_K), dtype=torch.int64, device=device)
    topk_weights = torch.empty((num_tokens, TOP_K), dtype=torch.float32, device=device)
    if num_tokens == 0:
        return topk_ids, topk_weights
    hidden = hidden.contiguous()
    weight = weight.contiguous()
    img = is_image.contiguous().view(torch.uint8)
    factor = float(routed_scaling_factor)
    bm, split, warps, stages = _plan(num_tokens)
    part = hidden  # unused placeholder when the epilogue is fused
    if split > 1:
        part = torch.empty((split, num_tokens, EXPERTS), dtype=torch.float32, device=device)
    grid = (triton.cdiv(num_tokens, bm), split)
    _router_gemm_kernel[grid](
        hidden,
        weight,
        img,
        part,
        topk_ids,
        topk_weights,
        num_tokens,
        factor,
        hidden.stride(0),
        weight.stride(0),
        K=HIDDEN,
        E=EXPERTS,
        BM=bm,
        BK=BK,
        SPLIT_K=split,
        TOPK=TOP_K,
        PRECISE=_PRECISE,
        num_warps=warps,
        num_stages=stages,
    )
    if split > 1:
        bt = max(1, min(16, 8192 // (split * EXPERTS)))  # <= 8192 partial values per program
        _router_finish_kernel[(triton.cdiv(num_tokens, bt),)](
            part,
            img,
            topk_ids,
            topk_weights,
            num_tokens,
            factor,
            E=EXPERTS,
            BT=bt,
            SPLIT_K=split,
            TOPK=TOP_K,
            PRECISE=_PRECISE,
            num_warps=8,
        )
    return topk_ids, topk_weights
