"""SGLang 0.5.22's own vision attention path for the SigLIP encoder's attention:
VisionFlash4Attention.forward (srt/layers/attention/vision.py), which calls SGLang's vendored
FlashAttention 4 (kernels/ops/attention/flash_attention_v4.flash_attn_varlen_func, a CuTe DSL
kernel) as

    flash_attn_varlen_func(q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu,
                           max_seqlen_q=max_seqlen, max_seqlen_k=max_seqlen,
                           softmax_scale=softmax_scale)      (through flash_attn_func(..., ver=4))

called here as VisionAttention calls its backend: q, k, v packed as [batch * seq_len, 16, 72],
cu_seqlens=None (the backend makes arange(batch + 1) * seq_len itself, cached per shape),
bsz, seq_len, max_seqlen=seq_len (VisionAttention passes the encoder's max_seqlen, so no
device-to-host read happens per layer) and softmax_scale = 72 ** -0.5. The result
[batch * seq_len, 16, 72] is viewed back as [batch, seq_len, 16, 72].

The whole module path is imported (vision.py imports flashinfer and sgl-kernel on CUDA), as
the engine's encoder does; adapter.py holds the two views.
"""

import math

import torch
from sglang.srt.layers.attention.vision import VisionFlash4Attention

# isort: split
from adapter import packed

SCALE = 1.0 / math.sqrt(72)
_BACKEND = VisionFlash4Attention()


def run(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    batch, seq_len = q.shape[0], q.shape[1]
    out = _BACKEND.forward(
        packed(q),
        packed(k),
        packed(v),
        cu_seqlens=None,
        bsz=batch,
        seq_len=seq_len,
        softmax_scale=SCALE,
        max_seqlen=seq_len,
    )
    return out.view(q.shape)
