"""Plain PyTorch baseline: chunked (WY / UT-transform) gated delta rule over packed sequences.

A token-by-token recurrence would be thousands of tiny sequential kernels per call, so this
baseline uses the standard chunked form of the gated delta rule, written in plain torch with
float32 math throughout, and batched over sequences, value heads and chunks.

Notation per sequence and value head, with H = S^T (K x V) and chunks of C = 64 tokens; inside
a chunk, gam_i = g_1 + ... + g_i (cumulative log-decay from the chunk start), and H0 is the
state at the chunk start. The recurrence H_i = e^{g_i} (I - b_i k_i k_i^T) H_{i-1} + b_i k_i v_i^T
unrolls to H_i = e^{gam_i} H0 + sum_{j<=i} e^{gam_i - gam_j} k_j u_j^T, where the pseudo-values
u_j solve the unit lower-triangular system
    (I + A) u = b * v - (b * e^{gam} * k) H0,   A_ij = b_i (k_i . k_j) e^{gam_i - gam_j}  (i > j).
Hence, with U = (I + A)^-1 (b v) and W = (I + A)^-1 (b e^{gam} k) (one triangular solve,
independent of the state, done for every chunk at once):
    u        = U - W H0
    o_i      = scale * (e^{gam_i} q_i^T H0 + sum_{j<=i} e^{gam_i - gam_j} (q_i . k_j) u_j)
    H_next   = e^{gam_C} H0 + sum_j e^{gam_C - gam_j} k_j u_j^T
Only the last three lines run sequentially, one step per chunk (a few batched GEMMs each).

Variable lengths: each sequence is padded to the longest one, rounded up to a whole chunk, with
g = 0, beta = 0 and q = k = v = 0 in the padding, which leaves the state unchanged (no decay,
no write), so the state after the last chunk is the state after the sequence's last token.
Chunks never straddle sequences. Value head h uses q/k head h // 2.
"""

import torch

CHUNK = 64


def _pad_chunks(x, index, valid, num_chunks, num_v_heads):
    """[T, H(, D)] -> float32 [num_chunks, N * HV, CHUNK(, D)], zero in the padding."""
    num_seqs = index.shape[0]
    xp = x.float()[index]  # [N, Lp, H(, D)]
    xp = xp * valid.view(*valid.shape, *([1] * (x.dim() - 1))).to(xp.dtype)
    heads = x.shape[1]
    if heads != num_v_heads:  # q/k head h // group serves value head h
        xp = xp.repeat_interleave(num_v_heads // heads, dim=2)
    tail = tuple(x.shape[2:])
    xp = xp.reshape(num_seqs, num_chunks, CHUNK, num_v_heads, *tail)
    xp = xp.transpose(2, 3).transpose(0, 1)  # [nc, N, HV, C(, D)]
    return xp.reshape(num_chunks, num_seqs * num_v_heads, CHUNK, *tail)


def run(q, k, v, g, beta, cu_seqlens, initial_state, scale):
    num_seqs, num_v_heads, dim_v, dim_k = initial_state.shape
    device = q.device

    bounds = cu_seqlens.tolist()
    max_len = max(bounds[n + 1] - bounds[n] for n in range(num_seqs))
    num_chunks = max(1, -(-max_len // CHUNK))
    padded_len = num_chunks * CHUNK

    starts = cu_seqlens[:-1].long().unsqueeze(1)  # [N, 1]
    lengths = (cu_seqlens[1:] - cu_seqlens[:-1]).long().unsqueeze(1)
    offsets = torch.arange(padded_len, device=device).unsqueeze(0)  # [1, Lp]
    valid = offsets < lengths  # [N, Lp]
    index = (starts + offsets).masked_fill(~valid, 0)

    pad = lambda x: _pad_chunks(x, index, valid, num_chunks, num_v_heads)  # noqa: E731
    qc, kc, vc = pad(q), pad(k), pad(v)  # [nc, B', C, D], B' = N * HV
    gc, bc = pad(g), pad(beta)  # [nc, B', C]

    gam = gc.cumsum(dim=-1)  # log-decay from the chunk start, inclusive
    causal = torch.ones(CHUNK, CHUNK, dtype=torch.bool, device=device).tril()
    strict = causal.tril(diagonal=-1)
    gap = gam.unsqueeze(-1) - gam.unsqueeze(-2)  # gam_i - gam_j, [nc, B', C, C]
    decay = torch.exp(gap.masked_fill(~causal, float("-inf")))  # masked before exp: no overflow

    # The UT transform: one batched unit-lower-triangular solve for U and W of every chunk.
    a = torch.matmul(kc, kc.transpose(-1, -2)) * decay * bc.unsqueeze(-1)
    a = a.masked_fill(~strict, 0.0)
    rhs = torch.cat((vc * bc.unsqueeze(-1), kc * (bc * torch.exp(gam)).unsqueeze(-1)), dim=-1)
    solved = torch.linalg.solve_triangular(a, rhs, upper=False, unitriangular=True)
    u_base, w = solved[..., :dim_v].contiguous(), solved[..., dim_v:].contiguous()

    attn = torch.matmul(qc, kc.transpose(-1, -2)) * decay * scale  # causal, incl. diagonal
    q_decayed = qc * (torch.exp(gam) * scale).unsqueeze(-1)
    k_decayed = kc * torch.exp(gam[..., -1:] - gam).unsqueeze(-1)
    chunk_decay = torch.exp(gam[..., -1]).view(num_chunks, -1, 1, 1)  # [nc, B', 1, 1]

    state = initial_state.float().reshape(num_seqs * num_v_heads, dim_v, dim_k)  # read only
    out = torch.empty(num_chunks, num_seqs * num_v_heads, CHUNK, dim_v, dtype=torch.float32, device=device)
    for c in range(num_chunks):
        state_t = state.transpose(1, 2)  # H0 = S^T, [B', K, V]
        u = torch.baddbmm(u_base[c], w[c], state_t, alpha=-1.0)  # U - W H0, [B', C, V]
        out[c] = torch.baddbmm(torch.bmm(attn[c], u), q_decayed[c], state_t)
        state = torch.baddbmm(state * chunk_decay[c], u.transpose(1, 2), k_decayed[c])

    o = out.view(num_chunks, num_seqs, num_v_heads, CHUNK, dim_v).permute(1, 0, 3, 2, 4)
    o = o.reshape(num_seqs * padded_len, num_v_heads, dim_v)[valid.reshape(-1)]
    final_state = state.reshape(num_seqs, num_v_heads, dim_v, dim_k)
    return o.to(torch.bfloat16), final_state
