"""QSA index: lightning-indexer scoring of a request's cached keys, then a top-2048 selection.

Query-sparse attention picks, per decoding request, the 2048 cached tokens that the main
attention will read. The scoring follows DeepSeek-V3.2's lightning indexer (64 indexer heads of
dim 128, one shared key per token, score = sum_h w_h * relu(q_h . k)); keys live in a paged
cache with 64-token pages, as in serving engines. Dev shapes are realistic decode batches:
16 requests with 8k-32k contexts, 64 requests with mixed contexts (including an empty and a
short request).

Selected IDs are compared exactly, so the scores must not depend on summation order: q, k and
the head weights are drawn as small integers (exact in bf16 / float32), which makes every score
an exact integer in float32 whatever order a kernel adds in. Integer scores also tie often,
so the tie rule (lower position wins) is exercised on every row; one workload also zeroes the
weights of some rows, so that every score of those rows ties.
"""

from __future__ import annotations

import torch

from scripts.sample_dataset.builder import DatasetBuilder, DefinitionEntry

NAME = "qsa_index_h64_d128_ps64_topk2048"
PAGE = 64
TOPK = 2048
HEADS = 64
DIM = 128
# Small-integer draws: |q . k| <= 128 * 9 and |score| <= 64 * 2 * 1152, far below 2**24.
Q_INIT = {"dist": "randint", "low": -3, "high": 4}
K_INIT = {"dist": "randint", "low": -3, "high": 4}
W_INIT = {"dist": "randint", "low": -2, "high": 3}


def _define(b: DatasetBuilder) -> DefinitionEntry:
    return b.definition(
        NAME,
        "qsa_index",
        description=(
            "QSA index selection (DeepSeek-V3.2 lightning-indexer scoring): for request b and "
            "each live token position j < seq_lens[b] (key k_cache[page_table[b, j // 64], "
            "j % 64]), score = sum_h weights[b, h] * relu(q[b, h] . key) in float32; output "
            "the row-local positions (not cache slots) of the top min(2048, seq_lens[b]) "
            "scores, ties won by the lower position, sorted ascending, padded with -1. IDs "
            "must match exactly. The sample inputs are small integers so that every score is "
            "exact in float32 under any summation order (a kernel must still be correct for "
            "any bf16 input); integer scores tie often, which exercises the tie rule."
        ),
        axes={
            "batch_size": "var",
            "num_index_heads": HEADS,
            "index_head_dim": DIM,
            "num_pages": "var",
            "page_size": PAGE,
            "max_num_pages": "var",
            "topk": TOPK,
        },
        inputs={
            "q": {
                "shape": ["batch_size", "num_index_heads", "index_head_dim"],
                "dtype": "bfloat16",
                "init": Q_INIT,
                "description": "Indexer query of each request's decode token.",
            },
            "weights": {
                "shape": ["batch_size", "num_index_heads"],
                "dtype": "float32",
                "init": W_INIT,
                "description": "Per-head score weights (may be negative or zero).",
            },
            "k_cache": {
                "shape": ["num_pages", "page_size", "index_head_dim"],
                "dtype": "bfloat16",
                "init": K_INIT,
                "description": "Paged indexer keys, one key per token shared by all heads.",
            },
            "page_table": {
                "shape": ["batch_size", "max_num_pages"],
                "dtype": "int32",
                "description": (
                    "Pages of each request in token order; entries from "
                    "ceil(seq_lens[b] / page_size) on are -1."
                ),
            },
            "seq_lens": {
                "shape": ["batch_size"],
                "dtype": "int32",
                "description": "Live tokens per request (0 allowed).",
            },
        },
        outputs={
            "topk_indices": {
                "shape": ["batch_size", "topk"],
                "dtype": "int32",
                "description": (
                    "Row-local token positions of the top-k scores (ties: lower position "
                    "first), ascending, then -1 padding."
                ),
            },
        },
        tolerance={"atol": 0.0, "rtol": 0.0, "rule": "and", "required_matched_ratio": 1.0},
        constraints=[
            "(seq_lens >= 0).all() and (seq_lens <= max_num_pages * page_size).all()",
            "((page_table >= -1) & (page_table < num_pages)).all()",
            "((page_table >= 0).sum(1) == (seq_lens + page_size - 1) // page_size).all()",
            "((page_table[:, :-1] >= 0) | (page_table[:, 1:] < 0)).all()",
        ],
        tags=["family:qsa_index", "model:deepseek-v3.2", "stage:decode"],
        # Upper bounds over the padded page table: q . k (2D), relu, weight, sum per head.
        flops=(
            "batch_size * max_num_pages * page_size * num_index_heads * (2 * index_head_dim + 3)"
        ),
        bytes=(
            "batch_size * (num_index_heads * (index_head_dim * 2 + 4) + max_num_pages * 4 + 4"
            " + topk * 4) + batch_size * max_num_pages * page_size * index_head_dim * 2"
        ),
    )


def _page_table(lengths: list[int], spare_pages: int, seed: int) -> tuple[torch.Tensor, int]:
    """Give each request its own pages, drawn from a shuffled pool; pad rows with -1.

    Returns the table and the pool size (the pages all requests need plus `spare_pages`
    unused ones, as in a cache that is not full).
    """
    needed = [(n + PAGE - 1) // PAGE for n in lengths]
    num_pages = sum(needed) + spare_pages
    gen = torch.Generator().manual_seed(seed)
    pool = torch.randperm(num_pages, generator=gen).to(torch.int32)
    table = torch.full((len(lengths), max(max(needed), 1)), -1, dtype=torch.int32)
    start = 0
    for row, count in enumerate(needed):
        table[row, :count] = pool[start : start + count]
        start += count
    return table, num_pages


def _add(
    b: DatasetBuilder,
    entry: DefinitionEntry,
    label: str,
    lengths: list[int],
    suites: list[str],
    seed: int,
    note: str,
    weights: torch.Tensor | None = None,
) -> None:
    table, num_pages = _page_table(lengths, spare_pages=7, seed=seed)
    tensors = {"page_table": table, "seq_lens": torch.tensor(lengths, dtype=torch.int32)}
    provenance = (
        f"Synthetic page table: {note} Each request owns distinct pages drawn from a random "
        f"permutation of the pool (seed {seed}), 7 pool pages unused, -1 padding."
    )
    if weights is not None:
        tensors["weights"] = weights
        provenance += (
            f" Weights: integers in [-2, 2] (seed {seed}), rows with zero weights tie every score."
        )
    b.workload(
        entry,
        label,
        axes={
            "batch_size": len(lengths),
            "num_pages": num_pages,
            "max_num_pages": table.shape[1],
        },
        suites=suites,
        tensors=tensors,
        provenance=provenance,
    )


def _random_lengths(count: int, low: int, high: int, seed: int) -> list[int]:
    gen = torch.Generator().manual_seed(seed)
    lengths: list[int] = torch.randint(low, high + 1, (count,), generator=gen).tolist()
    return lengths


def _tied_weights(batch: int, zero_rows: list[int], seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    weights = torch.randint(-2, 3, (batch, HEADS), generator=gen).to(torch.float32)
    weights[zero_rows] = 0.0
    return weights


def build(b: DatasetBuilder) -> None:
    entry = _define(b)
    # Smoke: an all-tied row, a random row, an empty row, a short row, exactly topk, topk + 1.
    smoke_lengths = [2500, 3000, 0, 100, TOPK, TOPK + 1]
    _add(
        b,
        entry,
        "smoke-edge-b6",
        smoke_lengths,
        ["smoke"],
        seed=21,
        note=f"edge rows with lengths {smoke_lengths} (row 0 all-tied via zero weights).",
        weights=_tied_weights(len(smoke_lengths), [0], seed=21),
    )
    long_lengths = [*_random_lengths(15, 8192, 32768, seed=22), 32768]
    _add(
        b,
        entry,
        "dev-b16-ctx8k-32k",
        long_lengths,
        ["dev"],
        seed=22,
        note="16 requests with contexts drawn uniformly from 8k-32k tokens, one of 32768.",
    )
    mixed = _random_lengths(64, 1, 16384, seed=23)
    mixed[5], mixed[9], mixed[10] = 0, 700, TOPK
    _add(
        b,
        entry,
        "dev-b64-mixed",
        mixed,
        ["dev"],
        seed=23,
        note="64 requests with contexts of 1-16k tokens; row 5 empty, row 9 short (700), "
        "row 10 exactly 2048.",
    )
    tie_lengths = [8192] * 32
    _add(
        b,
        entry,
        "b32-ctx8k-ties",
        tie_lengths,
        [],
        seed=24,
        note="32 requests of 8192 tokens; rows 0 and 7 all-tied via zero weights.",
        weights=_tied_weights(len(tie_lengths), [0, 7], seed=24),
    )
    _add(b, entry, "b1-ctx32k", [32768], [], seed=25, note="one request of 32768 tokens.")
