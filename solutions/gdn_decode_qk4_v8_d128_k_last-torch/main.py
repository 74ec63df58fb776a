"""Plain PyTorch baseline: one Gated DeltaNet decode step, vectorised over batch and heads.

The step is rewritten so the old state S (k-last, V x K per value head) is read by a single
batched GEMM against [k, q] before anything is written:
    a = exp(g),   Sk = S @ k,   Sq = S @ q                 (one bmm: S @ [k q])
    delta     = beta * (v - a * Sk)                        (the delta rule's V-vector)
    new_state = a * S + outer(delta, k)                    (fresh tensor, `state` untouched)
    o         = scale * (a * Sq + delta * (k . q))         (= scale * new_state @ q)
All in float32; value head h uses q/k head h // 2 (q and k are repeated to the 8 value heads,
a small [B, 8, 128] copy). o is rounded to bf16 at the end.
"""

import torch


def run(q, k, v, g, beta, state, scale):
    batch_size, num_v_heads, dim_v, dim_k = state.shape
    group = num_v_heads // q.shape[1]  # value heads per q/k head
    qf = q.float().repeat_interleave(group, dim=1)  # [B, HV, K]
    kf = k.float().repeat_interleave(group, dim=1)
    vf = v.float()  # [B, HV, V]
    decay = torch.exp(g.float())  # [B, HV]

    s = state.float().reshape(batch_size * num_v_heads, dim_v, dim_k)
    kq = torch.stack((kf, qf), dim=-1).reshape(batch_size * num_v_heads, dim_k, 2)
    s_kq = torch.bmm(s, kq).reshape(batch_size, num_v_heads, dim_v, 2)  # [..., 0] = S k, [..., 1] = S q
    s_k, s_q = s_kq[..., 0], s_kq[..., 1]

    a = decay.unsqueeze(-1)  # [B, HV, 1]
    delta = beta.float().unsqueeze(-1) * (vf - a * s_k)  # [B, HV, V]
    k_dot_q = (kf * qf).sum(dim=-1, keepdim=True)  # [B, HV, 1]
    o = (a * s_q + delta * k_dot_q) * scale

    new_state = s * decay.reshape(-1, 1, 1)
    new_state.baddbmm_(delta.reshape(-1, dim_v, 1), kf.reshape(-1, 1, dim_k))  # += outer(delta, k)
    return o.to(torch.bfloat16), new_state.reshape(batch_size, num_v_heads, dim_v, dim_k)
