"""Plain PyTorch baseline: block-diagonal (varlen) attention by batching equal-length chunks.

Without a varlen kernel, an engine runs one dense SDPA per chunk; here chunks of equal length
are stacked and run together (an audio encoder cuts clips into fixed windows, so almost every
chunk has the full length and only clip tails differ). For each distinct length L the chunks'
tokens are gathered into [n_chunks, L, heads, dim], attended with
torch.nn.functional.scaled_dot_product_attention in bf16 (no mask, so the flash backend), and
scattered back to their packed positions. cu_seqlens is read on the host to form the groups.
"""

import itertools
import math
from collections import defaultdict

import torch
import torch.nn.functional as F

SCALE = 1.0 / math.sqrt(64)


def run(q, k, v, cu_seqlens):
    bounds = cu_seqlens.tolist()
    starts_by_len = defaultdict(list)
    for start, end in itertools.pairwise(bounds):
        starts_by_len[end - start].append(start)
    out = torch.empty_like(q)
    for length, starts in starts_by_len.items():
        starts_t = torch.tensor(starts, dtype=torch.long, device=q.device)
        idx = (starts_t[:, None] + torch.arange(length, device=q.device)[None, :]).reshape(-1)
        shape = (len(starts), length, q.shape[1], q.shape[2])
        qc = q[idx].view(shape).transpose(1, 2)  # [n_chunks, heads, L, dim]
        kc = k[idx].view(shape).transpose(1, 2)
        vc = v[idx].view(shape).transpose(1, 2)
        o = F.scaled_dot_product_attention(qc, kc, vc, scale=SCALE)
        out[idx] = o.transpose(1, 2).reshape(-1, q.shape[1], q.shape[2])
    return out
