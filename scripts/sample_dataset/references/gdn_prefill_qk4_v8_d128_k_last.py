"""Gated DeltaNet prefill over packed variable-length sequences (Qwen3-Next, TP=4 slice).

Shapes (T = total_seq_len, N = num_seqs):
    q, k          [T, 4, 128] bf16     query / key, 4 q/k heads of dim K = 128
    v             [T, 8, 128] bf16     value, 8 value heads of dim V = 128
    g             [T, 8] float32       log-space decay gate per token and value head (g <= 0)
    beta          [T, 8] float32       delta-rule write strength, 0 < beta < 1
    cu_seqlens    [N + 1] int32        sequence n owns tokens cu_seqlens[n] .. cu_seqlens[n+1]-1;
                                       cu_seqlens[0] = 0, cu_seqlens[N] = T, every length >= 1
    initial_state [N, 8, 128, 128] float32   state before each sequence's first token,
                                             "k-last" layout [N, HV, V, K] (value dim first)
    scale         Python float         multiplies q (the workloads use 1/sqrt(128))
Outputs: o [T, 8, 128] bf16 and final_state [N, 8, 128, 128] float32 (state after each
sequence's last token, same k-last layout).

Grouped value attention: value head h (0..7) reads q/k head h // 2. Q/K L2 normalisation is
NOT part of this operator: q and k are used exactly as given. Sequences are independent. For
sequence n and value head h, start from S = initial_state[n, h] (a V x K matrix) and for each
token t of the sequence in order, with k_t = k[t, h // 2], q_t = q[t, h // 2], v_t = v[t, h]:
    S       = exp(g[t, h]) * S                              decay
    S       = S + beta[t, h] * outer(v_t - S @ k_t, k_t)    delta rule (S @ k_t is a V-vector)
    o[t, h] = scale * (S @ q_t)                             read-out with the updated state
and final_state[n, h] = S after the last token. All arithmetic is float32 (inputs widened from
bf16); o is rounded to bf16 at the end. Chunked (WY / UT-transform) kernels compute the same
recurrence in a different order; the tolerance allows for their bf16 intermediates.
"""

import torch


def _step(s, q_t, k_t, v_t, g_t, beta_t, scale):
    """One token, all value heads: s [HV, V, K], q_t/k_t [HV, K], v_t [HV, V], g_t/beta_t [HV]."""
    s = s * torch.exp(g_t)[:, None, None]
    pred = torch.bmm(s, k_t.unsqueeze(-1)).squeeze(-1)  # S @ k: [HV, V]
    delta = beta_t.unsqueeze(-1) * (v_t - pred)
    s = s + delta.unsqueeze(-1) * k_t.unsqueeze(-2)  # rank-1 update outer(delta, k)
    o_t = torch.bmm(s, q_t.unsqueeze(-1)).squeeze(-1) * scale  # [HV, V]
    return s, o_t


def run(q, k, v, g, beta, cu_seqlens, initial_state, scale):
    num_v_heads = v.shape[1]
    group = num_v_heads // q.shape[1]  # value heads per q/k head
    qf = q.float().repeat_interleave(group, dim=1)  # [T, HV, K]: head h -> q/k head h // group
    kf = k.float().repeat_interleave(group, dim=1)
    vf = v.float()
    gf = g.float()
    bf = beta.float()
    o = torch.empty(v.shape, dtype=torch.float32, device=v.device)
    final_state = torch.empty_like(initial_state, dtype=torch.float32)
    bounds = [int(x) for x in cu_seqlens.tolist()]
    for n in range(len(bounds) - 1):
        s = initial_state[n].float()
        for t in range(bounds[n], bounds[n + 1]):
            s, o[t] = _step(s, qf[t], kf[t], vf[t], gf[t], bf[t], scale)
        final_state[n] = s
    return o.to(torch.bfloat16), final_state
