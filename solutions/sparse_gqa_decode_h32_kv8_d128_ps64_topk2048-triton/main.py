"""Sparse GQA decode over a paged KV cache: Triton split-K ("flash-decoding") kernel + merge.

Decode reads 2048 gathered K and V rows per (request, KV head) and does little arithmetic on
them, so the job is to keep enough independent gathers in flight. The caches are viewed as
[num_pages * 64, 8, 128] rows (slot = page * 64 + offset), and

1. `_split_kernel`, grid (batch, kv_heads, NUM_SPLITS): each program takes one request, one KV
   head and a 256-entry slice of the request's slot list. It loads the 4 query heads that share
   the KV head (padded to 16 rows for tl.dot), gathers K/V rows 64 slots at a time through
   sparse_indices (entries of -1 are masked: no load, score -inf), and keeps an online softmax
   in base 2 (fp32 scores, fp32 accumulator, bf16 probabilities into the P @ V tensor-core dot).
   It writes the slice's normalised partial output and its log2-sum-exp; a slice with no valid
   entry writes lse = -inf.
2. `_merge_kernel`, grid (batch, kv_heads): combines the slices of the 4 heads with weights
   2^(lse_s - lse), writes o in bf16 and lse converted to the natural log (as the reference).

2048 / 256 = 8 slices per (request, KV head) gives 64 * batch programs, i.e. 2048 programs or
more at the dev batch sizes, enough to cover the H100's 132 SMs several times over.
"""

import math
import os

import torch
import triton
import triton.language as tl

NUM_QO_HEADS = 32
NUM_KV_HEADS = 8
GROUP = NUM_QO_HEADS // NUM_KV_HEADS
HEAD_DIM = 128
TOPK = 2048
SPLIT = 256  # slot-list entries per program
BLOCK_N = 64  # slots gathered per loop step
GROUP_PAD = 16  # query rows per program (tl.dot needs M >= 16)
LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453
_INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"


@triton.jit
def _split_kernel(
    Q,
    K,
    V,
    IDX,
    O_PART,
    LSE_PART,
    stride_qb,
    stride_qh,
    stride_ks,
    stride_kh,
    stride_vs,
    stride_vh,
    stride_ib,
    qk_scale_log2,
    SPLIT: tl.constexpr,
    BLOCK_N: tl.constexpr,
    GROUP: tl.constexpr,
    GROUP_PAD: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    INTERPRET: tl.constexpr,
):
    b = tl.program_id(0)
    kvh = tl.program_id(1)
    split = tl.program_id(2)
    num_kv_heads = tl.num_programs(1)
    num_splits = tl.num_programs(2)

    offs_g = tl.arange(0, GROUP_PAD)
    offs_d = tl.arange(0, HEAD_DIM)
    g_ok = offs_g < GROUP
    q_ptrs = Q + b * stride_qb + (kvh * GROUP + offs_g)[:, None] * stride_qh + offs_d[None, :]
    q = tl.load(q_ptrs, mask=g_ok[:, None], other=0.0)

    m_i = tl.full([GROUP_PAD], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([GROUP_PAD], dtype=tl.float32)
    acc = tl.zeros([GROUP_PAD, HEAD_DIM], dtype=tl.float32)

    idx_base = IDX + b * stride_ib + split * SPLIT
    k_base = K + kvh * stride_kh
    v_base = V + kvh * stride_vh
    for n0 in range(0, SPLIT, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        slot = tl.load(idx_base + offs_n)
        valid = slot >= 0
        rows = tl.where(valid, slot, 0).to(tl.int64)
        k = tl.load(
            k_base + rows[:, None] * stride_ks + offs_d[None, :], mask=valid[:, None], other=0.0
        )
        if INTERPRET:  # the CPU interpreter's tl.dot mishandles bf16: same math in fp32
            s = tl.dot(q.to(tl.float32), tl.trans(k.to(tl.float32)))
        else:
            s = tl.dot(q, tl.trans(k))
        s = s * qk_scale_log2  # [GROUP_PAD, BLOCK_N], log2 units
        s = tl.where(valid[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)  # all-masked so far: keep p = 0
        alpha = tl.exp2(m_i - m_ref)
        p = tl.exp2(s - m_ref[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(
            v_base + rows[:, None] * stride_vs + offs_d[None, :], mask=valid[:, None], other=0.0
        )
        if INTERPRET:
            pv = tl.dot(p.to(v.dtype).to(tl.float32), v.to(tl.float32))
        else:
            pv = tl.dot(p.to(v.dtype), v)
        acc = acc * alpha[:, None] + pv
        m_i = m_new

    has_any = l_i > 0.0
    out = acc / tl.where(has_any, l_i, 1.0)[:, None]
    lse2 = tl.where(has_any, m_i + tl.log2(tl.where(has_any, l_i, 1.0)), float("-inf"))
    part = (b * num_kv_heads + kvh) * num_splits + split  # [B, KVH, SPLITS, GROUP, (D)]
    o_ptrs = O_PART + (part * GROUP + offs_g)[:, None] * HEAD_DIM + offs_d[None, :]
    tl.store(o_ptrs, out, mask=g_ok[:, None])
    tl.store(LSE_PART + part * GROUP + offs_g, lse2, mask=g_ok)


@triton.jit
def _merge_kernel(
    O_PART,
    LSE_PART,
    OUT,
    LSE_OUT,
    stride_ob,
    stride_oh,
    stride_lb,
    NUM_SPLITS: tl.constexpr,
    GROUP: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    LN2_C: tl.constexpr,
):
    b = tl.program_id(0)
    kvh = tl.program_id(1)
    num_kv_heads = tl.num_programs(1)
    offs_g = tl.arange(0, GROUP)
    offs_d = tl.arange(0, HEAD_DIM)
    base = (b * num_kv_heads + kvh) * NUM_SPLITS

    m = tl.full([GROUP], float("-inf"), dtype=tl.float32)
    for s in tl.static_range(NUM_SPLITS):
        m = tl.maximum(m, tl.load(LSE_PART + (base + s) * GROUP + offs_g))
    # Slice 0 always holds a valid entry (sparse_indices[:, 0] >= 0), so m is finite.
    den = tl.zeros([GROUP], dtype=tl.float32)
    acc = tl.zeros([GROUP, HEAD_DIM], dtype=tl.float32)
    for s in tl.static_range(NUM_SPLITS):
        w = tl.exp2(tl.load(LSE_PART + (base + s) * GROUP + offs_g) - m)
        o_s = tl.load(O_PART + ((base + s) * GROUP + offs_g)[:, None] * HEAD_DIM + offs_d[None, :])
        den += w
        acc += w[:, None] * o_s
    out = acc / den[:, None]
    heads = kvh * GROUP + offs_g
    o_ptrs = OUT + b * stride_ob + heads[:, None] * stride_oh + offs_d[None, :]
    tl.store(o_ptrs, out.to(OUT.dtype.element_ty))
    tl.store(LSE_OUT + b * stride_lb + heads, (m + tl.log2(den)) * LN2_C)


def run(q, k_cache, v_cache, sparse_indices):
    batch = q.shape[0]
    num_pages, page_size, num_kv_heads, head_dim = k_cache.shape
    assert (num_kv_heads, head_dim, q.shape[1]) == (NUM_KV_HEADS, HEAD_DIM, NUM_QO_HEADS)
    topk = sparse_indices.shape[1]
    assert topk % SPLIT == 0
    num_splits = topk // SPLIT
    keys = k_cache.reshape(num_pages * page_size, num_kv_heads, head_dim)
    values = v_cache.reshape(num_pages * page_size, num_kv_heads, head_dim)
    idx = sparse_indices if sparse_indices.stride(1) == 1 else sparse_indices.contiguous()
    q = q if q.stride(2) == 1 else q.contiguous()

    o_part = torch.empty(
        batch, num_kv_heads, num_splits, GROUP, head_dim, dtype=torch.float32, device=q.device
    )
    lse_part = torch.empty(
        batch, num_kv_heads, num_splits, GROUP, dtype=torch.float32, device=q.device
    )
    _split_kernel[(batch, num_kv_heads, num_splits)](
        q,
        keys,
        values,
        idx,
        o_part,
        lse_part,
        q.stride(0),
        q.stride(1),
        keys.stride(0),
        keys.stride(1),
        values.stride(0),
        values.stride(1),
        idx.stride(0),
        LOG2E / math.sqrt(head_dim),
        SPLIT=SPLIT,
        BLOCK_N=BLOCK_N,
        GROUP=GROUP,
        GROUP_PAD=GROUP_PAD,
        HEAD_DIM=head_dim,
        INTERPRET=_INTERPRET,
        num_warps=4,
        num_stages=2,
    )

    o = torch.empty(batch, NUM_QO_HEADS, head_dim, dtype=torch.bfloat16, device=q.device)
    lse = torch.empty(batch, NUM_QO_HEADS, dtype=torch.float32, device=q.device)
    _merge_kernel[(batch, num_kv_heads)](
        o_part,
        lse_part,
        o,
        lse,
        o.stride(0),
        o.stride(1),
        lse.stride(0),
        NUM_SPLITS=num_splits,
        GROUP=GROUP,
        HEAD_DIM=head_dim,
        LN2_C=LN2,
        num_warps=4,
    )
    return o, lse
