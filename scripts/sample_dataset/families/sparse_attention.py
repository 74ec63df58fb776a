"""Sparse and paged decode/prefill attention: sparse GQA, sparse MLA (decode, prefill), mixed MLA.

Four contracts in the shape of the audit's sparse-attention rows:

* `sparse_gqa_decode_...`: Qwen3-8B / Llama-3-8B geometry (32 query heads, 8 KV heads, head dim
  128) over a paged bf16 K/V cache (page size 64); each request attends to 2048 selected
  slots (global slot ids page * 64 + offset), as a top-k token selector would hand them over.
* `mla_sparse_decode_...` / `mla_sparse_prefill_...`: DeepSeek-V3.2 sparse attention (DSA) in
  the absorbed-MLA form FlashMLA's sparse kernels take: 128 heads (the audit combined four
  ranks' 32), 576-dim queries and one shared 576-dim latent cache row per token (the first 512
  dims are also the value), top-2048 slots per query token.
* `mla_mixed_decode_...`: dense MLA decode over a paged latent cache (page size 64) for a batch
  mixing short and long contexts, optionally with one speculative (MTP) token per request.

Shapes: dev batches of 32-128 requests with 1k-32k-token contexts, sized so every workload's
inputs stay under ~2.5 GB of GPU memory (the random caches cost no blob bytes). Index tensors
are int32 blobs and dominate the blob budget (8 KiB per query row at top-k 2048), so the
sparse prefill workloads use 128-256 query tokens rather than full prefill chunks.

Index data is synthetic but shaped like serving data: each request's pages are scattered over
the pool by a random permutation; a sparse selection always holds the most recent 64
positions plus distinct random earlier ones, listed in random order (top-k output is not
sorted), and requests shorter than top-k select every position and pad with -1 at the tail.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from scripts.sample_dataset.builder import DatasetBuilder, DefinitionEntry

TOPK = 2048
PAGE_SIZE = 64
RECENT = 64  # positions right before (and including) the query that every selection keeps
SPARE_PAGES = 8  # unused pages in each pool, so the pool is not exactly the requests' pages

# DeepSeek-V3.2: 1/sqrt(128 + 64) times the YaRN mscale squared (factor 40, mscale_all_dim 1).
MLA_SCALE_PLAIN = 1.0 / math.sqrt(192)
MLA_SCALE_YARN = (0.1 * math.log(40.0) + 1.0) ** 2 / math.sqrt(192)

ATTENTION_TOLERANCE: dict[str, Any] = {
    "atol": 1e-2,
    "rtol": 1e-2,
    "rule": "and",
    "required_matched_ratio": 1.0,
    "per_output": {"lse": {"atol": 1e-3, "rtol": 1e-3, "rule": "and"}},
}

SPARSE_INDEX_CONSTRAINTS = [
    "(sparse_indices[:, 0] >= 0).all()",
    "((sparse_indices[:, 1:] == -1) | (sparse_indices[:, :-1] >= 0)).all()",
    "(sparse_indices >= -1).all()",
]

SPARSE_INDEX_NOTE = (
    "Index rows list slots in any order; -1 entries are padding and appear only at the tail of"
    " a row; every row has at least one valid entry and its valid entries are distinct."
)


def _bf16(shape: list[str], description: str) -> dict[str, Any]:
    return {"shape": shape, "dtype": "bfloat16", "description": description}


def _log_uniform(gen: torch.Generator, count: int, low: int, high: int) -> list[int]:
    """`count` integers spread log-uniformly over [low, high]."""
    u = torch.rand(count, generator=gen, dtype=torch.float64)
    values = torch.exp(math.log(low) + u * (math.log(high) - math.log(low)))
    return [min(high, max(low, round(v))) for v in values.tolist()]


def _page_pool(
    gen: torch.Generator, lengths: list[int], page_size: int = PAGE_SIZE
) -> tuple[int, list[torch.Tensor]]:
    """A pool for every sequence: each gets ceil(len / page_size) pages of a random permutation."""
    needed = [math.ceil(n / page_size) for n in lengths]
    num_pages = sum(needed) + SPARE_PAGES
    perm = torch.randperm(num_pages, generator=gen)
    tables = list(torch.split(perm[: sum(needed)], needed))
    return num_pages, tables


def _select(gen: torch.Generator, visible: int) -> torch.Tensor:
    """Positions a top-k selector keeps among `visible` ones: all if few, else recent + random."""
    if visible <= TOPK:
        chosen = torch.arange(visible)
    else:
        recent = torch.arange(visible - RECENT, visible)
        older = torch.randperm(visible - RECENT, generator=gen)[: TOPK - RECENT]
        chosen = torch.cat([recent, older])
    return chosen[torch.randperm(chosen.numel(), generator=gen)]


def _slot_row(positions: torch.Tensor, pages: torch.Tensor) -> torch.Tensor:
    """Global slot ids (page * PAGE_SIZE + offset) of `positions`, padded with -1 to TOPK."""
    slots = pages[positions // PAGE_SIZE] * PAGE_SIZE + positions % PAGE_SIZE
    row = torch.full((TOPK,), -1, dtype=torch.int32)
    row[: slots.numel()] = slots.to(torch.int32)
    return row


def _decode_indices(seed: int, lengths: list[int]) -> tuple[int, torch.Tensor]:
    """(num_pages, sparse_indices [B, TOPK]) for decode requests of the given context lengths."""
    gen = torch.Generator().manual_seed(seed)
    num_pages, tables = _page_pool(gen, lengths)
    rows = [_slot_row(_select(gen, n), pages) for n, pages in zip(lengths, tables, strict=True)]
    return num_pages, torch.stack(rows)


def _prefill_indices(seed: int, chunks: list[tuple[int, int]]) -> tuple[int, torch.Tensor]:
    """(num_pages, sparse_indices [T, TOPK]) for (context length, new tokens) prefill chunks.

    The new tokens are the last ones of each context; token at position p sees 0..p.
    """
    gen = torch.Generator().manual_seed(seed)
    num_pages, tables = _page_pool(gen, [length for length, _ in chunks])
    rows = []
    for (length, new), pages in zip(chunks, tables, strict=True):
        for position in range(length - new, length):
            rows.append(_slot_row(_select(gen, position + 1), pages))
    return num_pages, torch.stack(rows)


def _block_table(seed: int, lengths: list[int]) -> tuple[int, torch.Tensor]:
    """(num_pages, block_table [B, max_pages]) with unused entries 0."""
    gen = torch.Generator().manual_seed(seed)
    num_pages, tables = _page_pool(gen, lengths)
    max_pages = max(t.numel() for t in tables)
    table = torch.zeros(len(lengths), max_pages, dtype=torch.int32)
    for b, pages in enumerate(tables):
        table[b, : pages.numel()] = pages.to(torch.int32)
    return num_pages, table


def _describe_lengths(lengths: list[int]) -> str:
    return f"{len(lengths)} requests, contexts {min(lengths)}-{max(lengths)} tokens"


def _sparse_gqa(b: DatasetBuilder) -> None:
    entry = b.definition(
        "sparse_gqa_decode_h32_kv8_d128_ps64_topk2048",
        "sparse_attention",
        description=(
            "Sparse GQA decode: one query token per request attends to the 2048 (or fewer) KV"
            " slots a top-k selector chose, read from a paged bf16 K/V cache (page size 64,"
            " slot id = page * 64 + offset). 32 query heads share 8 KV heads (query head h reads"
            " KV head h // 4); head dim 128; scale fixed at 1/sqrt(128). Outputs the attention"
            " output and the natural-log LSE of the scaled scores. The cache snapshot is taken"
            f" after the current token's K/V were written. {SPARSE_INDEX_NOTE}"
            " Tolerance: bf16 output atol=rtol=1e-2 (rule and); lse float32 1e-3."
        ),
        axes={
            "batch_size": "var",
            "num_qo_heads": 32,
            "num_kv_heads": 8,
            "head_dim": 128,
            "num_pages": "var",
            "page_size": PAGE_SIZE,
            "topk": TOPK,
        },
        inputs={
            "q": _bf16(["batch_size", "num_qo_heads", "head_dim"], "Query of the new token."),
            "k_cache": _bf16(
                ["num_pages", "page_size", "num_kv_heads", "head_dim"], "Paged key cache."
            ),
            "v_cache": _bf16(
                ["num_pages", "page_size", "num_kv_heads", "head_dim"], "Paged value cache."
            ),
            "sparse_indices": {
                "shape": ["batch_size", "topk"],
                "dtype": "int32",
                "description": "Selected global slot ids (page * page_size + offset) per"
                " request, shared by all heads; -1 = padding at the tail.",
            },
        },
        outputs={
            "o": _bf16(["batch_size", "num_qo_heads", "head_dim"], "Attention output."),
            "lse": {
                "shape": ["batch_size", "num_qo_heads"],
                "dtype": "float32",
                "description": "Natural-log log-sum-exp of the scaled scores.",
            },
        },
        tolerance=ATTENTION_TOLERANCE,
        constraints=[
            "num_qo_heads % num_kv_heads == 0",
            "(sparse_indices < num_pages * page_size).all()",
            *SPARSE_INDEX_CONSTRAINTS,
        ],
        tags=[
            "family:sparse_attention",
            "kind:sparse_gqa",
            "model:qwen3-8b",
            "stage:decode",
        ],
        flops="4 * batch_size * num_qo_heads * topk * head_dim",
        bytes=(
            "2 * batch_size * (2 * num_qo_heads * head_dim + 2 * topk * num_kv_heads * head_dim)"
            " + 4 * batch_size * (topk + num_qo_heads)"
        ),
    )
    _gqa_workload(b, entry, "smoke-b2", [3000, 700], ["smoke"], seed=101)
    gen = torch.Generator().manual_seed(102)
    _gqa_workload(b, entry, "dev-b32-ctx1k-32k", _log_uniform(gen, 32, 1024, 32768), ["dev"], 103)
    _gqa_workload(b, entry, "dev-b64-ctx8k", [8192] * 64, ["dev"], seed=104)


def _gqa_workload(
    b: DatasetBuilder,
    entry: DefinitionEntry,
    label: str,
    lengths: list[int],
    suites: list[str],
    seed: int,
) -> None:
    num_pages, indices = _decode_indices(seed, lengths)
    b.workload(
        entry,
        label,
        axes={"batch_size": len(lengths), "num_pages": num_pages},
        suites=suites,
        tensors={"sparse_indices": indices},
        provenance=(
            f"Synthetic top-k selection, seed {seed}: {_describe_lengths(lengths)}; pages are a"
            f" random permutation of a {num_pages}-page pool; each row keeps the last {RECENT}"
            " positions plus distinct random earlier ones (all positions when the context is"
            " shorter than 2048, then -1), in random order."
        ),
    )


def _mla_io(rows: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Inputs and outputs shared by the sparse MLA decode and prefill contracts."""
    inputs = {
        "q": _bf16(
            [rows, "num_heads", "head_dim_qk"],
            "Absorbed query: 512 latent dims then 64 RoPE dims per head.",
        ),
        "kv_cache": _bf16(
            ["num_slots", "head_dim_qk"],
            "Latent cache, one row per token slot: 512 latent dims (also the value) then 64"
            " RoPE dims.",
        ),
        "sparse_indices": {
            "shape": [rows, "topk"],
            "dtype": "int32",
            "description": "Selected kv_cache rows per query row; -1 = padding at the tail.",
        },
        "sm_scale": {"shape": None, "dtype": "float32", "description": "Softmax scale."},
    }
    outputs = {
        "o": _bf16([rows, "num_heads", "head_dim_v"], "Attention output in latent space."),
        "lse": {
            "shape": [rows, "num_heads"],
            "dtype": "float32",
            "description": "Natural-log log-sum-exp of the scaled scores.",
        },
    }
    return inputs, outputs


MLA_AXES: dict[str, str | int] = {
    "num_heads": 128,
    "head_dim_qk": 576,
    "head_dim_v": 512,
    "num_slots": "var",
    "topk": TOPK,
}


def _sparse_mla_decode(b: DatasetBuilder) -> None:
    inputs, outputs = _mla_io("batch_size")
    entry = b.definition(
        "mla_sparse_decode_h128_ckv512_kpe64_topk2048",
        "mla",
        description=(
            "DeepSeek-V3.2 sparse MLA decode (FlashMLA sparse-decode semantics, bf16 cache): one"
            " query token per request, 128 heads of 576 dims (512 absorbed latent + 64 RoPE),"
            " attending to up to 2048 selected rows of a single-head latent cache whose first"
            " 512 dims are also the values. Scale is an input (1/sqrt(192), or with DeepSeek's"
            f" YaRN mscale^2 applied). {SPARSE_INDEX_NOTE} Tolerance: bf16 output"
            " atol=rtol=1e-2 (rule and); lse float32 1e-3."
        ),
        axes={"batch_size": "var", **MLA_AXES},
        inputs=inputs,
        outputs=outputs,
        tolerance=ATTENTION_TOLERANCE,
        constraints=["(sparse_indices < num_slots).all()", *SPARSE_INDEX_CONSTRAINTS],
        tags=[
            "family:sparse_attention",
            "kind:sparse_mla",
            "model:deepseek-v3.2",
            "stage:decode",
        ],
        flops="2 * batch_size * num_heads * topk * (head_dim_qk + head_dim_v)",
        bytes=(
            "2 * batch_size * (num_heads * head_dim_qk + topk * head_dim_qk"
            " + num_heads * head_dim_v) + 4 * batch_size * (topk + num_heads)"
        ),
    )
    _mla_decode_workload(b, entry, "smoke-b2", [3000, 700], ["smoke"], 201, MLA_SCALE_PLAIN)
    gen = torch.Generator().manual_seed(202)
    lengths = _log_uniform(gen, 64, 1024, 32768)
    _mla_decode_workload(b, entry, "dev-b64-ctx1k-32k", lengths, ["dev"], 203, MLA_SCALE_PLAIN)
    _mla_decode_workload(
        b, entry, "dev-b128-ctx8k-yarn", [8192] * 128, ["dev"], 204, MLA_SCALE_YARN
    )


def _mla_decode_workload(
    b: DatasetBuilder,
    entry: DefinitionEntry,
    label: str,
    lengths: list[int],
    suites: list[str],
    seed: int,
    scale: float,
) -> None:
    num_pages, indices = _decode_indices(seed, lengths)
    b.workload(
        entry,
        label,
        axes={"batch_size": len(lengths), "num_slots": num_pages * PAGE_SIZE},
        suites=suites,
        scalars={"sm_scale": scale},
        tensors={"sparse_indices": indices},
        provenance=(
            f"Synthetic top-k selection, seed {seed}: {_describe_lengths(lengths)}; each owns"
            f" {PAGE_SIZE}-slot pages drawn by a random permutation of a {num_pages}-page pool;"
            f" each row keeps the last {RECENT} positions plus distinct random earlier ones (all"
            " positions when the context is shorter than 2048, then -1), in random order."
        ),
    )


def _sparse_mla_prefill(b: DatasetBuilder) -> None:
    inputs, outputs = _mla_io("num_tokens")
    entry = b.definition(
        "mla_sparse_prefill_h128_ckv512_kpe64_topk2048",
        "mla",
        description=(
            "DeepSeek-V3.2 sparse MLA prefill (FlashMLA sparse-prefill semantics, bf16): every"
            " query token (128 heads of 576 dims) attends to its own up-to-2048 selected rows"
            " of a single-head latent cache (first 512 dims are the values). Causality is in the"
            " selection: a token's row lists only slots of its own sequence at or before it."
            f" {SPARSE_INDEX_NOTE} Query rows are few (128-256) because each costs 8 KiB of"
            " index blob. Tolerance: bf16 output atol=rtol=1e-2 (rule and); lse float32 1e-3."
        ),
        axes={"num_tokens": "var", **MLA_AXES},
        inputs=inputs,
        outputs=outputs,
        tolerance=ATTENTION_TOLERANCE,
        constraints=["(sparse_indices < num_slots).all()", *SPARSE_INDEX_CONSTRAINTS],
        tags=[
            "family:sparse_attention",
            "kind:sparse_mla",
            "model:deepseek-v3.2",
            "stage:prefill",
        ],
        flops="2 * num_tokens * num_heads * topk * (head_dim_qk + head_dim_v)",
        bytes=(
            "2 * (num_tokens * num_heads * (head_dim_qk + head_dim_v)"
            " + min(num_slots, num_tokens * topk) * head_dim_qk)"
            " + 4 * num_tokens * (topk + num_heads)"
        ),
    )
    chunk_sets: list[tuple[str, list[tuple[int, int]], list[str], int, float]] = [
        ("smoke-t4", [(2100, 3), (50, 1)], ["smoke"], 301, MLA_SCALE_PLAIN),
        ("dev-t128-ctx16k", [(16384, 128)], ["dev"], 302, MLA_SCALE_YARN),
        (
            "dev-t256-ctx1k-32k",
            [(1024, 64), (4096, 64), (8192, 64), (32768, 64)],
            ["dev"],
            303,
            MLA_SCALE_PLAIN,
        ),
    ]
    for label, chunks, suites, seed, scale in chunk_sets:
        num_pages, indices = _prefill_indices(seed, chunks)
        described = ", ".join(f"last {new} of {length}" for length, new in chunks)
        b.workload(
            entry,
            label,
            axes={"num_tokens": indices.shape[0], "num_slots": num_pages * PAGE_SIZE},
            suites=suites,
            scalars={"sm_scale": scale},
            tensors={"sparse_indices": indices},
            provenance=(
                f"Synthetic causal top-k selection, seed {seed}: query tokens are the {described}"
                f" tokens of their sequences, whose {PAGE_SIZE}-slot pages are a random"
                f" permutation of a {num_pages}-page pool; the token at position p keeps"
                f" positions p-{RECENT - 1}..p plus distinct random earlier ones (all of 0..p when"
                " p < 2048, then -1), in random order."
            ),
        )


def _mixed_mla_decode(b: DatasetBuilder) -> None:
    entry = b.definition(
        "mla_mixed_decode_h128_ckv512_kpe64_ps64",
        "mla",
        description=(
            "DeepSeek-V3 MLA decode over a paged latent cache (FlashMLA dense-decode semantics,"
            " bf16, page size 64) for a batch mixing short and long contexts: q_len new tokens"
            " per request (1, or 2 with one MTP draft token), 128 heads of 576 dims (512 absorbed"
            " latent + 64 RoPE), one shared latent cache row per token whose first 512 dims are"
            " the values. cache_seqlens counts the new tokens (already written); query i sits at"
            " position cache_seqlens - q_len + i and attends causally. block_table entries past a"
            " request's last page are 0 and must be ignored; cache rows past its length are"
            " stale. Tolerance: bf16 output atol=rtol=1e-2 (rule and); lse float32 1e-3."
        ),
        axes={
            "batch_size": "var",
            "q_len": "var",
            "num_heads": 128,
            "head_dim_qk": 576,
            "head_dim_v": 512,
            "num_pages": "var",
            "page_size": PAGE_SIZE,
            "max_pages": "var",
        },
        inputs={
            "q": _bf16(
                ["batch_size", "q_len", "num_heads", "head_dim_qk"],
                "Absorbed query: 512 latent dims then 64 RoPE dims per head.",
            ),
            "kv_cache": _bf16(
                ["num_pages", "page_size", "head_dim_qk"],
                "Paged latent cache: 512 latent dims (also the value) then 64 RoPE dims.",
            ),
            "block_table": {
                "shape": ["batch_size", "max_pages"],
                "dtype": "int32",
                "description": "Pages of each request in position order; unused entries 0.",
            },
            "cache_seqlens": {
                "shape": ["batch_size"],
                "dtype": "int32",
                "description": "Tokens in the cache per request, the q_len new ones included.",
            },
            "sm_scale": {"shape": None, "dtype": "float32", "description": "Softmax scale."},
        },
        outputs={
            "o": _bf16(
                ["batch_size", "q_len", "num_heads", "head_dim_v"],
                "Attention output in latent space.",
            ),
            "lse": {
                "shape": ["batch_size", "q_len", "num_heads"],
                "dtype": "float32",
                "description": "Natural-log log-sum-exp of the scaled, causally masked scores.",
            },
        },
        tolerance=ATTENTION_TOLERANCE,
        constraints=[
            "(block_table >= 0).all() and (block_table < num_pages).all()",
            "(cache_seqlens >= q_len).all()",
            "(cache_seqlens <= max_pages * page_size).all()",
        ],
        tags=[
            "family:sparse_attention",
            "kind:mixed_mla",
            "model:deepseek-v3",
            "stage:decode",
        ],
        flops=(
            "2 * q_len * num_heads * (head_dim_qk + head_dim_v) * cache_seqlens.sum()"
            " - q_len * (q_len - 1) * num_heads * (head_dim_qk + head_dim_v) * batch_size"
        ),
        bytes=(
            "2 * (batch_size * q_len * num_heads * (head_dim_qk + head_dim_v)"
            " + cache_seqlens.sum() * head_dim_qk) + 4 * batch_size * (max_pages + 1)"
            " + 4 * batch_size * q_len * num_heads"
        ),
    )
    gen = torch.Generator().manual_seed(402)
    long_short = _log_uniform(gen, 96, 256, 2048) + _log_uniform(gen, 32, 16384, 32768)
    order = torch.randperm(len(long_short), generator=gen).tolist()
    workloads: list[tuple[str, list[int], int, list[str], int, float]] = [
        ("smoke-b3-q2", [100, 700, 1500], 2, ["smoke"], 401, MLA_SCALE_PLAIN),
        ("dev-b64-q1-ctx64-32k", _log_uniform(gen, 64, 64, 32768), 1, ["dev"], 403, MLA_SCALE_YARN),
        (
            "dev-b128-q2-short-long",
            [long_short[i] for i in order],
            2,
            ["dev"],
            404,
            MLA_SCALE_PLAIN,
        ),
    ]
    for label, lengths, q_len, suites, seed, scale in workloads:
        num_pages, table = _block_table(seed, lengths)
        b.workload(
            entry,
            label,
            axes={
                "batch_size": len(lengths),
                "q_len": q_len,
                "num_pages": num_pages,
                "max_pages": table.shape[1],
            },
            suites=suites,
            scalars={"sm_scale": scale},
            tensors={
                "block_table": table,
                "cache_seqlens": torch.tensor(lengths, dtype=torch.int32),
            },
            provenance=(
                f"Synthetic paged batch, seed {seed}: {_describe_lengths(lengths)}; each"
                f" request's pages are a random permutation of a {num_pages}-page pool;"
                " unused block_table entries are 0."
            ),
        )


def build(b: DatasetBuilder) -> None:
    _sparse_gqa(b)
    _sparse_mla_decode(b)
    _sparse_mla_prefill(b)
    _mixed_mla_decode(b)
