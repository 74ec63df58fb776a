"""SGLang 0.5.22's own leaf for multimodal prefill with an empty cache: sgl-kernel 0.4.9's FA3
flash_attn_varlen_func, once for the text runs (causal) and once for the image segments
(unmasked), in the varlen form SGLang's FA3 backend uses for prefill
(FlashAttentionBackend.forward_extend, srt/layers/attention/flashattention_backend.py):

    flash_attn_varlen_func(
        q=q.view(-1, 16, 256), k=k.view(-1, 8, 256), v=v.view(-1, 8, 256),
        cu_seqlens_q=..., cu_seqlens_k=..., max_seqlen_q=..., max_seqlen_k=...,
        seqused_q=..., seqused_k=..., softmax_scale=1/16, causal=..., out=out)

The definition's single block-causal operation stands for the engine's sequence of text and
image segment calls (interface record: one definition call is several native calls). The
leaf is the same; batching a kind's segments into one varlen call is this adapter's choice
(adapter.py says how the segments become sequences). Both calls write into one output
buffer: FA3 writes only the rows of its sequences. num_splits is the wrapper's default (1).
GQA 16/8: query head h reads KV head h // 2, FA3's mapping and the definition's.

The segment plan reads image_ids on the host, in prepare (the engine has the multimodal
layout on the host before the layer runs); the timed call is the two FA3 launches.
"""

import math

import torch
from sgl_kernel.flash_attn import flash_attn_varlen_func

# isort: split
from adapter import VarlenCall, packed, plan

SCALE = 1.0 / math.sqrt(256)


def prepare(q, k, v, image_ids) -> tuple[VarlenCall, ...]:
    return plan(image_ids, q.device)


def run(q, k, v, image_ids, prepared: tuple[VarlenCall, ...] | None = None) -> torch.Tensor:
    calls = prepared if prepared is not None else plan(image_ids, q.device)
    q_rows, k_rows, v_rows = packed(q), packed(k), packed(v)
    out = torch.empty_like(q_rows)
    for call in calls:
        flash_attn_varlen_func(
            q_rows,
            k_rows,
            v_rows,
            cu_seqlens_q=call.cu_seqlens_q,
            cu_seqlens_k=call.cu_seqlens_k,
            max_seqlen_q=call.max_seqlen_q,
            max_seqlen_k=call.max_seqlen_k,
            seqused_q=call.seqused_q,
            seqused_k=call.seqused_k,
            softmax_scale=SCALE,
            causal=call.causal,
            out=out,
        )
    return out.view(q.shape)
