"""FlashAttention 4 (flash-attn-4 4.0.0b35, CuTe DSL): packed block-diagonal attention, d 64.

Library call (flash_attn/cute/interface.py):
    out, _ = flash_attn.cute.flash_attn_varlen_func(
        q, k, v, cu_seqlens_q=cu_seqlens, cu_seqlens_k=cu_seqlens,
        softmax_scale=1/8, causal=False)

The definition's packed layout is FA4's varlen layout: q, k, v [total_tokens, 20, 64] with
chunk c owning rows cu_seqlens[c] .. cu_seqlens[c+1]-1, and cu_seqlens an int32 contiguous
[num_chunks + 1] tensor, used as is for both queries and keys. Each chunk is its own sequence
of the varlen call, so the block-diagonal mask is structural: no key block outside a query's
chunk is ever loaded and nothing is masked except the ragged ends of a chunk. Non-causal, MHA
(20 query heads on 20 KV heads). The output is [total_tokens, 20, 64] bf16, returned as is.

max_seqlen_q / max_seqlen_k are left unset: knowing them would need a host read of cu_seqlens,
and FA4's SM90 forward does not need them (its varlen tile scheduler walks the tiles from
total_tokens and cu_seqlens on the device; the bounds only steer split-KV, which SM90 lacks).
With more than 256 chunks FA4 first runs two tiny kernels that turn cu_seqlens into a
tile -> chunk lookup for the scheduler. The SM90 config for head dim 64 is a 192 x 128 tile.
"""

import math

import torch
from flash_attn.cute import flash_attn_varlen_func

HEAD_DIM = 64
SCALE = 1.0 / math.sqrt(HEAD_DIM)


def run(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens: torch.Tensor
) -> torch.Tensor:
    out, _ = flash_attn_varlen_func(
        q,
        k,
        v,
        cu_seqlens_q=cu_seqlens,
        cu_seqlens_k=cu_seqlens,
        softmax_scale=SCALE,
        causal=False,
    )
    return out
