"""Gated DeltaNet decode (Qwen3-Next linear attention, one tensor-parallel slice of 4 ranks).

One new token per sequence. Shapes (B = batch_size):
    q, k   [B, 4, 128] bf16      query / key, 4 q/k heads of dim K = 128
    v      [B, 8, 128] bf16      value, 8 value heads of dim V = 128
    g      [B, 8] float32        log-space decay gate (g <= 0): the state is multiplied by exp(g)
    beta   [B, 8] float32        delta-rule write strength, 0 < beta < 1
    state  [B, 8, 128, 128] float32   recurrent state, "k-last" layout [B, HV, V, K]:
                                      state[b, h] is a V x K matrix S (value dim first)
    scale  Python float          multiplies q (the workloads use 1/sqrt(128))
Outputs: o [B, 8, 128] bf16 and new_state [B, 8, 128, 128] float32 (same k-last layout).

Grouped value attention: value head h (0..7) reads q/k head h // 2. Q/K L2 normalisation is
NOT part of this operator: q and k are used exactly as given. `state` is read-only (the new
state goes to the separate output `new_state`). For every b and value head h, with
S = state[b, h] (V x K), k_t = k[b, h // 2], q_t = q[b, h // 2], v_t = v[b, h]:
    S     = exp(g[b, h]) * S                              decay
    S     = S + beta[b, h] * outer(v_t - S @ k_t, k_t)    delta rule (S @ k_t is a V-vector)
    o[b, h]         = scale * (S @ q_t)                   read-out with the updated state
    new_state[b, h] = S
All arithmetic is float32 (q, k, v widened from bf16); o is rounded to bf16 at the end.
"""

import torch


def run(q, k, v, g, beta, state, scale):
    num_v_heads = v.shape[1]
    group = num_v_heads // q.shape[1]  # value heads per q/k head
    qf = q.float().repeat_interleave(group, dim=1)  # [B, HV, K]: head h -> q/k head h // group
    kf = k.float().repeat_interleave(group, dim=1)
    vf = v.float()  # [B, HV, V]
    s = state.float() * torch.exp(g.float())[:, :, None, None]  # [B, HV, V, K]
    pred = torch.matmul(s, kf.unsqueeze(-1)).squeeze(-1)  # S @ k: [B, HV, V]
    delta = beta.float().unsqueeze(-1) * (vf - pred)  # [B, HV, V]
    s = s + delta.unsqueeze(-1) * kf.unsqueeze(-2)  # rank-1 update outer(delta, k)
    o = torch.matmul(s, qf.unsqueeze(-1)).squeeze(-1) * scale  # [B, HV, V]
    return o.to(torch.bfloat16), s
