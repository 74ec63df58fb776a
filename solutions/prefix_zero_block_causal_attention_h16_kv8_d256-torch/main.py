"""Plain PyTorch baseline: block-causal multimodal prefill as SDPA with a boolean mask.

The visibility mask of the definition (causal, or same image segment) is built densely per batch
row from image_ids, [batch, 1, seq, seq] bool (32 MiB at batch 2 x 4096), and passed to
torch.nn.functional.scaled_dot_product_attention in bf16. A custom mask rules out the flash
backend, and the memory-efficient backend that takes masks does not take enable_gqa, so the 8
KV heads are expanded to the 16 query heads with repeat_interleave first (what Hugging Face's
SDPA path does when a mask is present).
"""

import math

import torch
import torch.nn.functional as F

SCALE = 1.0 / math.sqrt(256)


def run(q, k, v, image_ids):
    seq_len = q.shape[1]
    group = q.shape[2] // k.shape[2]
    pos = torch.arange(seq_len, device=q.device)
    causal = pos[None, :] <= pos[:, None]  # [seq, seq]: key j visible to query i if j <= i
    ids = image_ids.long()
    same_image = (ids[:, :, None] >= 0) & (ids[:, :, None] == ids[:, None, :])  # [b, seq, seq]
    mask = (causal[None] | same_image)[:, None]  # [b, 1, seq, seq], broadcast over heads
    keys = k.transpose(1, 2).repeat_interleave(group, dim=1)  # query head h reads KV head h // 2
    values = v.transpose(1, 2).repeat_interleave(group, dim=1)
    o = F.scaled_dot_product_attention(q.transpose(1, 2), keys, values, attn_mask=mask, scale=SCALE)
    return o.transpose(1, 2).contiguous()
