"""Triton MoE router: bf16 projection with float32 accumulation fused with sqrt-softplus top-6.

Approach
  * One Triton GEMM kernel computes logits = hidden @ weight^T for a block of BM tokens and all
    128 experts at once (tl.dot on the bf16 operands, float32 accumulator; bf16 products are
    exact in float32, so only the summation order differs from the reference).
  * Large batches (>= ~100 token tiles): the routing epilogue runs inside the GEMM kernel on the
    float32 accumulator, so logits never touch memory.
  * Small batches (decode): the K dimension is split over up to 64 programs so that enough SMs
    stream the 1 MB router weight; each split writes float32 partial logits, and a second small
    kernel sums the splits in a fixed order (deterministic) and runs the same epilogue.
  * Epilogue per token (float32): score = sqrt(softplus(logit)) with softplus = x for x > 20,
    else log1p(exp(x)) (torch's formula; libdevice exp/log1p and a correctly rounded sqrt on the
    GPU, so scores match torch's CUDA kernel bit for bit); experts of the other modality are
    masked; six rounds of "max, then the lowest expert ID holding it" pick the top 6 with the
    lower-ID tie rule; the chosen set's ascending order comes from an inclusive cumsum over the
    selection mask, and weights = score / sum(chosen scores) * routed_scaling_factor.

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

# The interpreter (TRITON_INTERPRET=1, CPU validation) has no libdevice: it uses an accurate
# log1p built from tl.log instead.
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
def _route_store(logits, offs_t, tmask, img_ptr, ids_ptr, wts_ptr, factor,
                 E: tl.constexpr, TOPK: tl.constexpr, PRECISE: tl.constexpr):
    """Top-k routing of a [BT, E] float32 logit tile; writes ids (int64) and weights (fp32)."""
    score = _sqrt_softplus(logits, PRECISE)
    img = tl.load(img_ptr + offs_t, mask=tmask, other=0) != 0  # [BT]
    eidx = tl.arange(0, E)[None, :]  # [1, E]
    allowed = (eidx >= E // 2) == img[:, None]
    neg_inf = float("-inf")
    cand = tl.where(allowed, score, neg_inf)
    chosen = eidx < 0  # all False, [1, E] broadcast below
    chosen = chosen & allowed
    for _ in tl.static_range(TOPK):
        best = tl.max(cand, axis=1)  # [BT]
        at_best = cand == best[:, None]
        first = tl.min(tl.where(at_best, eidx, E), axis=1)  # lowest expert ID holding the max
        hit = eidx == first[:, None]
        chosen = chosen | hit
        cand = tl.where(hit, neg_inf, cand)
    # ascending-ID slot of each chosen expert = (number of chosen experts up to it) - 1
    slot = tl.cumsum(chosen.to(tl.int32), axis=1) - 1
    total = tl.sum(tl.where(chosen, score, 0.0), axis=1)  # [BT]
    w = tl.div_rn(score, total[:, None]) * factor
    rows = offs_t.to(tl.int64)[:, None] * TOPK
    smask = chosen & tmask[:, None]
    tl.store(ids_ptr + rows + slot, (eidx + tl.zeros_like(slot)).to(tl.int64), mask=smask)
    tl.store(wts_ptr + rows + slot, w, mask=smask)


@triton.jit
def _router_gemm_kernel(h_ptr, w_ptr, img_ptr, part_ptr, ids_ptr, wts_ptr,
                        T, factor, stride_h, stride_w,
                        K: tl.constexpr, E: tl.constexpr, BM: tl.constexpr, BK: tl.constexpr,
                        SPLIT_K: tl.constexpr, TOPK: tl.constexpr, PRECISE: tl.constexpr):
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
        acc = tl.dot(a, tl.trans(b), acc)
        a_ptrs += BK
        b_ptrs += BK
    if SPLIT_K == 1:
        _route_store(acc, offs_t, tmask, img_ptr, ids_ptr, wts_ptr, factor, E, TOPK, PRECISE)
    else:
        p_ptrs = (part_ptr + (pid_k * T + offs_t).to(tl.int64)[:, None] * E + offs_e[None, :])
        tl.store(p_ptrs, acc, mask=tmask[:, None])


@triton.jit
def _router_finish_kernel(part_ptr, img_ptr, ids_ptr, wts_ptr, T, factor,
                          E: tl.constexpr, BT: tl.constexpr, SPLIT_K: tl.constexpr,
                          TOPK: tl.constexpr, PRECISE: tl.constexpr):
    offs_t = tl.program_id(0) * BT + tl.arange(0, BT)
    tmask = offs_t < T
    offs_e = tl.arange(0, E)
    logits = tl.zeros((BT, E), dtype=tl.float32)
    for s in range(SPLIT_K):  # fixed order: deterministic
        p_ptrs = part_ptr + (s * T + offs_t).to(tl.int64)[:, None] * E + offs_e[None, :]
        logits += tl.load(p_ptrs, mask=tmask[:, None], other=0.0)
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
        hidden, weight, img, part, topk_ids, topk_weights,
        num_tokens, factor, hidden.stride(0), weight.stride(0),
        K=HIDDEN, E=EXPERTS, BM=bm, BK=BK, SPLIT_K=split, TOPK=TOP_K, PRECISE=_PRECISE,
        num_warps=warps, num_stages=stages,
    )
    if split > 1:
        bt = 16 if num_tokens <= 16 else 32
        _router_finish_kernel[(triton.cdiv(num_tokens, bt),)](
            part, img, topk_ids, topk_weights, num_tokens, factor,
            E=EXPERTS, BT=bt, SPLIT_K=split, TOPK=TOP_K, PRECISE=_PRECISE, num_warps=4,
        )
    return topk_ids, topk_weights
