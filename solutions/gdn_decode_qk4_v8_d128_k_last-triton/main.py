"""Triton Gated DeltaNet decode step (k-last state), one kernel.

Each program owns one (batch, value head) pair and a block of BV rows of that head's 128 x 128
float32 state S (k-last: a row is one value index, its 128 key entries contiguous). Rows of S
are independent in this update, so splitting V across programs is exact. Per program:
    S      = exp(g) * S                       (decay)
    pred   = S @ k                            (row-wise dot over K)
    S      = S + outer(beta * (v - pred), k)  (delta rule)
    o      = scale * (S @ q)                  (read-out with the updated state)
and the updated rows go to the separate output new_state (the input state is never written).
Value head h uses q/k head h // (HV / HK). All math in float32; o is rounded to bf16.

Why it should be fast: the step is pure bandwidth (read 64 KB and write 64 KB of state per head,
everything else is tiny); every state byte is read once and written once in 128-byte-coalesced
rows, nothing else touches memory, and a single launch covers all heads with enough programs
(BV picked from the batch size) to keep every SM streaming.
"""

import torch
import triton
import triton.language as tl

HEAD = 128


@triton.jit
def _gdn_decode_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    g_ptr,
    beta_ptr,
    s_ptr,
    o_ptr,
    ns_ptr,
    scale,
    HV: tl.constexpr,
    HK: tl.constexpr,
    D: tl.constexpr,
    BV: tl.constexpr,
):
    bh = tl.program_id(0)  # b * HV + h
    vb = tl.program_id(1)
    b = bh // HV
    h = bh % HV
    hk = h // (HV // HK)
    offs_k = tl.arange(0, D)
    offs_v = vb * BV + tl.arange(0, BV)
    vmask = offs_v < D
    qk_base = (b * HK + hk).to(tl.int64) * D
    kv = tl.load(k_ptr + qk_base + offs_k).to(tl.float32)
    qv = tl.load(q_ptr + qk_base + offs_k).to(tl.float32)
    vv = tl.load(v_ptr + bh.to(tl.int64) * D + offs_v, mask=vmask, other=0.0).to(tl.float32)
    decay = tl.exp(tl.load(g_ptr + bh))
    beta = tl.load(beta_ptr + bh)

    s_off = bh.to(tl.int64) * D * D + offs_v[:, None] * D + offs_k[None, :]
    smask = vmask[:, None]
    s = tl.load(s_ptr + s_off, mask=smask, other=0.0) * decay
    pred = tl.sum(s * kv[None, :], axis=1)  # [BV]
    delta = beta * (vv - pred)
    s = s + delta[:, None] * kv[None, :]
    o = tl.sum(s * qv[None, :], axis=1) * scale
    tl.store(ns_ptr + s_off, s, mask=smask)
    tl.store(o_ptr + bh.to(tl.int64) * D + offs_v, o.to(tl.bfloat16), mask=vmask)


def run(q, k, v, g, beta, state, scale):
    batch_size, num_q_heads, dim = q.shape
    num_v_heads = v.shape[1]
    assert dim == HEAD and k.shape == q.shape
    assert state.shape == (batch_size, num_v_heads, HEAD, HEAD)
    assert num_v_heads % num_q_heads == 0
    o = torch.empty((batch_size, num_v_heads, HEAD), dtype=torch.bfloat16, device=q.device)
    new_state = torch.empty_like(state, dtype=torch.float32)
    if batch_size == 0:
        return o, new_state
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    g, beta = g.contiguous().float(), beta.contiguous().float()
    state = state.contiguous()
    heads = batch_size * num_v_heads
    bv = 8 if heads < 64 else (16 if heads < 512 else 32)
    _gdn_decode_kernel[(heads, HEAD // bv)](
        q,
        k,
        v,
        g,
        beta,
        state,
        o,
        new_state,
        float(scale),
        HV=num_v_heads,
        HK=num_q_heads,
        D=HEAD,
        BV=bv,
        num_warps=4,
    )
    return o, new_state
