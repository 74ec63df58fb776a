"""SGLang 0.5.22's own vision attention path for the audio encoder's chunked attention:
VisionFlash4Attention.forward (srt/layers/attention/vision.py), which calls SGLang's vendored
FlashAttention 4 (kernels/ops/attention/flash_attention_v4.flash_attn_varlen_func, a CuTe DSL
kernel) as

    flash_attn_varlen_func(q, k, v, cu_seqlens_q=cu_seqlens, cu_seqlens_k=cu_seqlens,
                           max_seqlen_q=max_seqlen, max_seqlen_k=max_seqlen,
                           softmax_scale=softmax_scale)      (through flash_attn_func(..., ver=4))

called here as VisionAttention calls its backend: q, k, v [total_tokens, 20, 64] as given,
the definition's int32 cu_seqlens, softmax_scale = 64 ** -0.5 and max_seqlen, the longest
chunk, computed once in prepare as an encoder computes it once per forward (without it the
backend would read it from the device in every call). bsz and seq_len are unused when
cu_seqlens is given; they are passed as one packed sequence. Every chunk is one sequence of
FA4's varlen call, so the block-diagonal mask is the call's structure. The output
[total_tokens, 20, 64] is returned as is.

The whole module path is imported (vision.py imports flashinfer and sgl-kernel on CUDA), as
the engine's encoder does.
"""

import math

import torch
from sglang.srt.layers.attention.vision import VisionFlash4Attention

# isort: split
from adapter import longest_chunk

SCALE = 1.0 / math.sqrt(64)
_BACKEND = VisionFlash4Attention()


def prepare(q, k, v, cu_seqlens) -> int:
    return longest_chunk(cu_seqlens)


def run(q, k, v, cu_seqlens, prepared: int | None = None) -> torch.Tensor:
    max_seqlen = prepared if prepared is not None else longest_chunk(cu_seqlens)
    return _BACKEND.forward(
        q,
        k,
        v,
        cu_seqlens=cu_seqlens,
        bsz=1,
        seq_len=q.shape[0],
        softmax_scale=SCALE,
        max_seqlen=max_seqlen,
    )
