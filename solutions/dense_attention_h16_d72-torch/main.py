"""Plain PyTorch baseline: dense non-causal attention through scaled_dot_product_attention.

What a vision encoder in a serving engine runs without custom kernels: the [batch, seq, heads,
dim] tensors are viewed as [batch, heads, seq, dim] (a transpose, no copy) and handed to
torch.nn.functional.scaled_dot_product_attention in bf16 with no mask, so PyTorch dispatches
to its fused attention kernel (FlashAttention-2 / cuDNN / memory-efficient on CUDA, the flash
CPU kernel on CPU). The result is transposed back and made contiguous.
"""

import math

import torch.nn.functional as F

SCALE = 1.0 / math.sqrt(72)


def run(q, k, v):
    o = F.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), scale=SCALE
    )
    return o.transpose(1, 2).contiguous()
