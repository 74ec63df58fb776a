"""Triton QSA index (lightning-indexer) top-2048 selection: a scoring kernel, then an exact
deterministic radix select and an ordered compaction, each spread over row segments.

1. _qsa_score: one program per (request, group of 4 pages). The request's 64 x 128 bf16 query
   block stays on chip; each live page's 64 keys are gathered through the page table, scored as
   one tl.dot (bf16 operands, float32 accumulation: exact products), then
   score = sum_h weights[h] * relu(dot) in float32 (element-wise, no TF32), -0.0 -> +0.0.
   Scores go to a float32 [B, max_pages * 64] workspace; positions >= seq_len are never read.
2. Rows are cut into S segments (S chosen from the batch size so that ~2 programs per SM
   share the work). Scores map to order-preserving uint32 keys. For rows longer than 2048, the
   key of rank 2048 (the threshold) is found by an MSD radix select in 4 launches of 8 bits:
   _qsa_radix_pass (one program per row segment) writes the segment's 256-bin tl.histogram of
   the next digit among the keys that share the digits decided so far; every program replays
   the earlier decisions from the stored per-segment histograms (_decide: sum over segments,
   suffix sums, largest digit whose count still reaches 2048), so no atomics are needed and
   the result is deterministic. The same histograms give, per segment, #(key > threshold) and
   #(key == threshold).
3. _qsa_compact (one program per row segment): from those per-segment counts, the segment's
   first output slot is (#greater in earlier segments) + min(#ties in earlier segments, need),
   with need = 2048 - #(key > threshold); it keeps key > threshold plus ties whose row-wide
   rank (earlier segments' ties + in-segment cumsum) is < need, so lower positions win ties,
   and writes them at ascending slots (cumsum). Rows of <= 2048 positions keep everything;
   the tail of each row is -1.
   No sort, no data-dependent host sync, fully deterministic.

Why it should be fast: the scoring reads every live key exactly once (the indexer is bound by
the K-cache gather) with the 64 heads' dot products on tensor cores, and the selection re-reads
only the L2-resident float32 scores (4 B per token) five times, spread over many SMs even for a
single long row, instead of sorting each row twice as a sort-based top-k does.
"""

import os

import torch
import triton
import triton.language as tl

TOPK = 2048
PAGES_PER_PROGRAM = 4
SELECT_BLOCK = 2048
MAX_SEGMENTS = 32

# TRITON_INTERPRET=1 (CPU validation): the interpreter mis-evaluates tl.dot on bf16 operands, so
# they are widened to float32 first there (the products are exact either way).
_INTERPRET = os.environ.get("TRITON_INTERPRET", "0") in ("1", "true", "True")


@triton.jit
def _qsa_score(
    q_ptr,
    w_ptr,
    k_ptr,
    pt_ptr,
    len_ptr,
    s_ptr,
    M,
    s_stride,
    H: tl.constexpr,
    D: tl.constexpr,
    PS: tl.constexpr,
    PPP: tl.constexpr,
    UPCAST: tl.constexpr,
):
    b = tl.program_id(0)
    pg0 = tl.program_id(1) * PPP
    length = tl.load(len_ptr + b)
    offs_h = tl.arange(0, H)
    offs_d = tl.arange(0, D)
    offs_p = tl.arange(0, PS)
    b64 = b.to(tl.int64)
    qb = tl.load(q_ptr + b64 * (H * D) + offs_h[:, None] * D + offs_d[None, :])  # [H, D]
    if UPCAST:
        qb = qb.to(tl.float32)
    wv = tl.load(w_ptr + b64 * H + offs_h)  # [H] float32
    live_pages = tl.cdiv(length, PS) - pg0
    n_pages = tl.minimum(tl.maximum(live_pages, 0), PPP)
    for i in range(0, n_pages):
        pg = pg0 + i
        page = tl.load(pt_ptr + b64 * M + pg, mask=pg < M, other=0)
        page = tl.maximum(page, 0).to(tl.int64)
        pos = pg * PS + offs_p
        pmask = pos < length
        keys = tl.load(
            k_ptr + page * (PS * D) + offs_p[:, None] * D + offs_d[None, :],
            mask=pmask[:, None],
            other=0.0,
        )  # [PS, D]
        if UPCAST:
            keys = keys.to(tl.float32)
        # [PS tokens, H heads]: the head sum below stays inside each warp's rows
        dots = tl.dot(keys, tl.trans(qb))
        score = tl.sum(tl.maximum(dots, 0.0) * wv[None, :], axis=1)  # [PS]
        score = tl.where(score == 0.0, 0.0, score)  # -0.0 -> +0.0
        tl.store(s_ptr + b64 * s_stride + pos, score, mask=pmask)


@triton.jit
def _score_key(score):
    """Order-preserving uint32 key of a float32 score (+0.0 and -0.0 map to the same key)."""
    score = tl.where(score == 0.0, 0.0, score)
    bits = score.to(tl.int32, bitcast=True)
    ordered = bits ^ ((bits >> 31) & 0x7FFFFFFF)  # signed order of the floats
    return (ordered ^ -2147483648).to(tl.uint32, bitcast=True)  # flip the sign bit: unsigned


@triton.jit
def _decide(h_ptr, b, B, S, PASSES: tl.constexpr, K: tl.constexpr, S_BLOCK: tl.constexpr):
    """Replay the digit decisions of the first PASSES radix passes of row b.

    h_ptr holds per-segment 256-bin digit histograms [4, B, S, 256] of the keys that share the
    digits decided before that pass. Returns the decided key prefix, `above` = #(keys greater
    than every key with that prefix), and per segment the number of such greater keys and of
    keys equal to the prefix (the latter is only meaningful after all 4 passes).
    """
    bins = tl.arange(0, 256)
    segs = tl.arange(0, S_BLOCK)
    prefix = tl.full((), 0, tl.uint32)
    above = tl.full((), 0, tl.int32)
    seg_gt = tl.zeros((S_BLOCK,), dtype=tl.int32)
    seg_eq = tl.zeros((S_BLOCK,), dtype=tl.int32)
    for p in tl.static_range(PASSES):
        base = (p * B + b).to(tl.int64) * S * 256
        tile = tl.load(
            h_ptr + base + segs[:, None] * 256 + bins[None, :], mask=(segs < S)[:, None], other=0
        )  # [S_BLOCK, 256]
        hist = tl.sum(tile, axis=0)
        suffix = tl.cumsum(hist, axis=0, reverse=True)  # #(digit >= d), non-increasing
        d = tl.sum((above + suffix >= K).to(tl.int32), axis=0) - 1  # >= 0 by the invariant
        above += tl.sum(tl.where(bins == d + 1, suffix, 0), axis=0)  # + #(digit > d)
        prefix = prefix | (d.to(tl.uint32) << (24 - 8 * p))
        seg_gt += tl.sum(tl.where(bins[None, :] > d, tile, 0), axis=1)
        seg_eq = tl.sum(tl.where(bins[None, :] == d, tile, 0), axis=1)
    return prefix, above, seg_gt, seg_eq


@triton.jit
def _qsa_radix_pass(
    s_ptr,
    len_ptr,
    h_ptr,
    B,
    S,
    seg_len,
    s_stride,
    PASS: tl.constexpr,
    K: tl.constexpr,
    S_BLOCK: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """Histogram of digit PASS (bits 31-8*PASS .. 24-8*PASS) of one row segment's keys that
    share the digits decided by the earlier passes (rows longer than K only)."""
    b = tl.program_id(0)
    s = tl.program_id(1)
    length = tl.load(len_ptr + b)
    if length > K:
        prefix, _above, _seg_gt, _seg_eq = _decide(h_ptr, b, B, S, PASS, K, S_BLOCK)
        SHIFT: tl.constexpr = 24 - 8 * PASS
        row_ptr = s_ptr + b.to(tl.int64) * s_stride
        lo = s * seg_len
        hi = tl.minimum(lo + seg_len, length)
        hist = tl.zeros((256,), dtype=tl.int32)
        for j0 in range(lo, hi, BLOCK):
            offs = j0 + tl.arange(0, BLOCK)
            m = offs < hi
            u = _score_key(tl.load(row_ptr + offs, mask=m, other=0.0))
            digit = ((u >> SHIFT) & 0xFF).to(tl.int32)
            if PASS > 0:
                m = m & ((u >> (SHIFT + 8)) == (prefix >> (SHIFT + 8)))
            hist += tl.histogram(digit, 256, mask=m)
        tl.store(h_ptr + ((PASS * B + b).to(tl.int64) * S + s) * 256 + tl.arange(0, 256), hist)


@triton.jit
def _qsa_compact(
    s_ptr,
    len_ptr,
    h_ptr,
    out_ptr,
    B,
    S,
    seg_len,
    s_stride,
    K: tl.constexpr,
    S_BLOCK: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """Write row segment s's selected positions, ascending, at their final output slots."""
    b = tl.program_id(0)
    s = tl.program_id(1)
    b64 = b.to(tl.int64)
    length = tl.load(len_ptr + b)
    out_row = out_ptr + b64 * K
    if s == 0:  # -1 padding after the min(length, K) selected positions
        n_sel = tl.minimum(length, K)
        for i0 in range(0, K, BLOCK):
            idx = i0 + tl.arange(0, BLOCK)
            tl.store(
                out_row + idx, tl.full((BLOCK,), -1, tl.int32), mask=(idx >= n_sel) & (idx < K)
            )
    lo = s * seg_len
    hi = tl.minimum(lo + seg_len, length)
    take_all = length <= K
    thr = tl.full((), 0, tl.uint32)
    need = tl.full((), K, tl.int32)
    base_out = lo  # every earlier position is kept when the row is taken whole
    base_tie = tl.full((), 0, tl.int32)
    if not take_all:
        thr, above, seg_gt, seg_eq = _decide(h_ptr, b, B, S, 4, K, S_BLOCK)
        need = K - above  # ties at the threshold to keep, lowest positions first
        earlier = tl.arange(0, S_BLOCK) < s
        base_tie = tl.sum(tl.where(earlier, seg_eq, 0), axis=0)
        base_out = tl.sum(tl.where(earlier, seg_gt, 0), axis=0) + tl.minimum(base_tie, need)
    row_ptr = s_ptr + b64 * s_stride
    for j0 in range(lo, hi, BLOCK):
        offs = j0 + tl.arange(0, BLOCK)
        m = offs < hi
        u = _score_key(tl.load(row_ptr + offs, mask=m, other=0.0))
        tie = (u == thr) & m
        tie_i = tie.to(tl.int32)
        tie_rank = base_tie + tl.cumsum(tie_i, axis=0) - 1
        keep = m & (take_all | (u > thr) | (tie & (tie_rank < need)))
        keep_i = keep.to(tl.int32)
        slot = base_out + tl.cumsum(keep_i, axis=0) - 1
        tl.store(out_row + slot, offs, mask=keep & (slot < K))
        base_out += tl.sum(keep_i, axis=0)
        base_tie += tl.sum(tie_i, axis=0)


def run(q, weights, k_cache, page_table, seq_lens):
    batch_size, num_heads, dim = q.shape
    page_size = k_cache.shape[1]
    max_pages = page_table.shape[1]
    device = q.device
    out = torch.empty((batch_size, TOPK), dtype=torch.int32, device=device)
    if batch_size == 0:
        return out
    q = q.contiguous()
    weights = weights.contiguous().float()
    k_cache = k_cache.contiguous()
    page_table = page_table.contiguous().to(torch.int32)
    lens = seq_lens.contiguous().to(torch.int32)
    row_len = max(max_pages * page_size, 1)
    scores = torch.empty((batch_size, row_len), dtype=torch.float32, device=device)
    if max_pages > 0:
        grid = (batch_size, triton.cdiv(max_pages, PAGES_PER_PROGRAM))
        _qsa_score[grid](
            q,
            weights,
            k_cache,
            page_table,
            lens,
            scores,
            max_pages,
            row_len,
            H=num_heads,
            D=dim,
            PS=page_size,
            PPP=PAGES_PER_PROGRAM,
            UPCAST=_INTERPRET,
            num_warps=4,
        )
    # rows are cut into segments so that ~2 programs per SM share the selection work
    segs = max(1, min(triton.cdiv(row_len, SELECT_BLOCK), 264 // batch_size, MAX_SEGMENTS))
    seg_len = triton.cdiv(triton.cdiv(row_len, segs), SELECT_BLOCK) * SELECT_BLOCK
    segs = triton.cdiv(row_len, seg_len)
    s_block = max(2, triton.next_power_of_2(segs))
    hists = torch.empty((4, batch_size, segs, 256), dtype=torch.int32, device=device)
    for radix_pass in range(4):
        _qsa_radix_pass[(batch_size, segs)](
            scores,
            lens,
            hists,
            batch_size,
            segs,
            seg_len,
            row_len,
            PASS=radix_pass,
            K=TOPK,
            S_BLOCK=s_block,
            BLOCK=SELECT_BLOCK,
            num_warps=8,
        )
    _qsa_compact[(batch_size, segs)](
        scores,
        lens,
        hists,
        out,
        batch_size,
        segs,
        seg_len,
        row_len,
        K=TOPK,
        S_BLOCK=s_block,
        BLOCK=SELECT_BLOCK,
        num_warps=8,
    )
    return out
