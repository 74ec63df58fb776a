"""Plain PyTorch baseline: cached-prefix attention as concat + one GQA SDPA call.

The cached prefix K/V and the chunk's own K/V are concatenated along the sequence axis (what an
engine without a paged/cascade kernel does), then the chunk's queries attend to all of them with
torch.nn.functional.scaled_dot_product_attention in bf16, no mask (the chunk is bidirectional
and sees the whole prefix). GQA (16 query heads on 8 KV heads) goes through SDPA's
enable_gqa=True, which the flash backend handles without materialising repeated K/V.
"""

import math

import torch
import torch.nn.functional as F

SCALE = 1.0 / math.sqrt(256)


def run(q, prefix_k, prefix_v, k, v):
    keys = torch.cat([prefix_k, k], dim=1).transpose(1, 2)  # [b, kv_heads, prefix + q_len, d]
    values = torch.cat([prefix_v, v], dim=1).transpose(1, 2)
    o = F.scaled_dot_product_attention(
        q.transpose(1, 2), keys, values, scale=SCALE, enable_gqa=True
    )
    return o.transpose(1, 2).contiguous()
