"""SGLang 0.5.22's own indexer scoring and top-k for QSA index selection: the decode path of
Indexer._get_topk_paged (srt/layers/attention/dsa/dsa_indexer.py; nsa/nsa_indexer.py is a
shim that re-exports it), on FP8 inputs converted from the definition's bf16 ones.

READ adapter.py FIRST: the engine's indexer scores FP8 e4m3 queries and keys with per-block
scales, never bf16. The definition's bf16 inputs are quantized with the engine's own rule
(power-of-two scales); that is exact for the definition's sample inputs (small integers) and
changes the scores of general bf16 inputs, so on such inputs this solution may select other
ids than the definition. It does not hide that: no bf16 path of this indexer exists to call.

The engine's calls, in order, with SGLang's own resolvers (dsa/utils.py), which pick
DeepGEMM (sgl-deep-gemm) unless SGLANG_FP8_PAGED_MQA_LOGITS_TORCH is set:

    schedule = resolve_paged_mqa_logits_metadata_fn()(context_lens, 64, resolve_num_sms())
    logits = resolve_fp8_paged_mqa_logits_fn()(
        q_fp8, kv_pages, gates, context_lens, block_table, schedule, max_seq_len,
        clean_logits=False)                                  # [batch, max_num_pages * 64] fp32
    ids = sgl_kernel.fast_topk_v2(logits, seq_lens, 2048)    # unordered row-local positions

(_get_topk_paged scores through _chunked_fp8_paged_mqa_logits, which calls the scorer
directly while batch <= SM count, as here; its top-k is the backend's topk_func, sgl-kernel's
fast_topk_v2, when the top-k is not fused with the page-table transform: the definition wants
row-local positions, not cache slots.) The schedule depends only on seq_lens and the engine
builds it once per batch (init_forward_metadata): here in prepare. The logits are scored for
positions j of a row through its block table, so a row-local position is a column of logits.
adapter.ordered_topk turns the native unordered selection into the definition's ids
(ascending, ties to the lower position), keeping the native cut.
"""

import torch
from sgl_kernel import fast_topk_v2
from sglang.srt.layers.attention.dsa.utils import (
    resolve_fp8_paged_mqa_logits_fn,
    resolve_num_sms,
    resolve_paged_mqa_logits_metadata_fn,
)

# isort: split
from adapter import TOPK, context_lens, index_key_pages, indexer_query, ordered_topk

PAGE_SIZE = 64


def prepare(q, weights, k_cache, page_table, seq_lens) -> torch.Tensor:
    schedule = resolve_paged_mqa_logits_metadata_fn()
    return schedule(context_lens(seq_lens), PAGE_SIZE, resolve_num_sms())


def run(q, weights, k_cache, page_table, seq_lens, prepared: torch.Tensor | None = None):
    lens = context_lens(seq_lens)
    if prepared is None:
        prepared = prepare(q, weights, k_cache, page_table, seq_lens)
    q_fp8, gates = indexer_query(q, weights)
    logits = resolve_fp8_paged_mqa_logits_fn()(
        q_fp8,
        index_key_pages(k_cache),
        gates,
        lens,
        page_table,
        prepared,
        page_table.shape[1] * PAGE_SIZE,
        clean_logits=False,
    )
    native_ids = fast_topk_v2(logits, lens.view(-1), TOPK)
    return ordered_topk(logits, native_ids, seq_lens)
