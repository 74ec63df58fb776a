"""BF16 GEMMs: three dense projections (nn.Linear layout) and two MoE grouped GEMMs.

Dense: Qwen3-8B's projections (hidden 4096, intermediate 12288, 32 query / 8 KV heads of 128):
`gemm_bf16_n12288_k4096` (gate or up projection, the audit's shape), `gemm_bf16_n4096_k12288`
(down projection) and `gemm_bf16_n6144_k4096` (fused QKV). M is the engine's batch and
sequence dimensions flattened, from 1-token decode to 16k-token prefill batches.

Grouped: Qwen3-235B-A22B's expert GEMMs (hidden 4096, moe_intermediate 1536, 128 experts,
top-8): fused gate+up (N = 2 * 1536, K = 4096) and down (N = 4096, K = 1536). As in the audit,
all expert shards' rows are combined into one task with padding removed: rows are sorted by
expert and `m_offsets` (int32, num_experts + 1) gives each expert's contiguous row range.
The number of experts is a var axis (64 in the dev shapes, i.e. half the model's experts on one
rank of a 2-way expert-parallel deployment) so the CPU smoke workload can use 4. Expert loads
are skewed as real routing is: Zipf(0.5) weights (the busiest expert gets ~4x the mean) and a
few experts with no rows at all.

Random inputs: activations N(0, 1) (post-norm scale), weights N(0, 0.02) (the usual init
scale), so outputs are O(1) and the relative tolerance is meaningful.
"""

from __future__ import annotations

from typing import Any

import torch

from scripts.sample_dataset.builder import DatasetBuilder

WEIGHT_INIT = {"dist": "normal", "mean": 0.0, "std": 0.02}

# Output rounding alone differs by up to half a bf16 ulp (2^-9 relative, 2^-8 at worst across
# a binade edge) between two correct FP32-accumulating kernels; 1e-2 leaves room for that and
# for FP32 summation-order differences (split-K, different tile orders), while any BF16
# accumulation over K >= 1536 fails.
GEMM_TOLERANCE: dict[str, Any] = {
    "atol": 1e-2,
    "rtol": 1e-2,
    "rule": "and",
    "required_matched_ratio": 1.0,
}
TOLERANCE_NOTE = (
    " Tolerance atol=rtol=1e-2 (rule and): output values are O(1) with these inputs, so this"
    " admits bf16 output rounding plus any FP32 summation order, and rejects BF16 accumulation."
)

DENSE_M_DEV = [16, 4096]
DENSE_M_ALL = [1, 128, 1024, 16384]

DENSE = [
    (12288, 4096, "gate or up projection (hidden 4096 to intermediate 12288)"),
    (4096, 12288, "down projection (intermediate 12288 to hidden 4096)"),
    (6144, 4096, "fused QKV projection ((32 + 8 + 8) heads x 128)"),
]


def _dense(b: DatasetBuilder, n: int, k: int, what: str) -> None:
    entry = b.definition(
        f"gemm_bf16_n{n}_k{k}",
        "gemm",
        description=(
            f"Dense BF16 GEMM out[M, {n}] = a[M, {k}] @ b[{n}, {k}]^T (weight in nn.Linear"
            f" layout), Qwen3-8B's {what}; FP32 accumulation, one rounding to bf16. M is the"
            f" flattened batch*sequence dimension.{TOLERANCE_NOTE}"
        ),
        axes={"M": "var", "N": n, "K": k},
        inputs={
            "a": {"shape": ["M", "K"], "dtype": "bfloat16", "description": "Activations."},
            "b": {
                "shape": ["N", "K"],
                "dtype": "bfloat16",
                "description": "Weight, nn.Linear layout (row n = output feature n).",
                "init": WEIGHT_INIT,
            },
        },
        outputs={"out": {"shape": ["M", "N"], "dtype": "bfloat16", "description": "a @ b^T."}},
        tolerance=GEMM_TOLERANCE,
        constraints=["M >= 1"],
        tags=["family:gemm", "kind:dense_gemm", "model:qwen3-8b"],
        flops="2 * M * N * K",
        bytes="2 * (M * K + N * K + M * N)",
    )
    b.workload(entry, "smoke-m4", axes={"M": 4}, suites=["smoke"])
    for m in DENSE_M_DEV:
        b.workload(entry, f"dev-m{m}", axes={"M": m}, suites=["dev"])
    for m in DENSE_M_ALL:
        b.workload(entry, f"m{m}", axes={"M": m}, suites=[])


def _skewed_offsets(seed: int, num_experts: int, rows: int, empty: int) -> torch.Tensor:
    """m_offsets [num_experts + 1] for `rows` routed rows with Zipf(0.5)-skewed expert loads.

    Experts are ranked by a random permutation; expert of rank r gets weight 1 / (r + 1)^0.5,
    except `empty` randomly chosen experts that get none. Rows are drawn multinomially.
    """
    gen = torch.Generator().manual_seed(seed)
    ranks = torch.randperm(num_experts, generator=gen).double()
    weights = (ranks + 1.0) ** -0.5
    weights[torch.randperm(num_experts, generator=gen)[:empty]] = 0.0
    picks = torch.multinomial(weights, rows, replacement=True, generator=gen)
    counts = torch.bincount(picks, minlength=num_experts)
    offsets = torch.zeros(num_experts + 1, dtype=torch.int32)
    offsets[1:] = torch.cumsum(counts, 0).to(torch.int32)
    return offsets


GROUPED = [
    ("gate_up", 3072, 4096, "fused expert gate+up projection (hidden 4096 to 2 x 1536)"),
    ("down", 4096, 1536, "expert down projection (moe_intermediate 1536 to hidden 4096)"),
]

# (label, num_experts, rows, experts forced empty, suites); rows = routed (token, expert) pairs.
GROUPED_WORKLOADS: list[tuple[str, int, int, int, list[str]]] = [
    ("dev-e64-m512", 64, 512, 4, ["dev"]),
    ("dev-e64-m8192", 64, 8192, 4, ["dev"]),
    ("e32-m256", 32, 256, 2, []),
    ("e64-m16384", 64, 16384, 4, []),
]


def _grouped(b: DatasetBuilder, kind: str, n: int, k: int, what: str, seed: int) -> None:
    entry = b.definition(
        f"grouped_gemm_bf16_{kind}_n{n}_k{k}",
        "gemm",
        description=(
            f"MoE grouped BF16 GEMM, Qwen3-235B-A22B's {what}: rows of a[M, {k}] are sorted by"
            f" expert and expert e owns rows m_offsets[e]..m_offsets[e+1]-1, for which"
            f" out = a @ w[e]^T (w[e] is [{n}, {k}], nn.Linear layout). All expert shards"
            " combined into one task, no padding; experts may own zero rows; FP32"
            " accumulation, one rounding to bf16. bytes counts every expert's weight (an"
            f" approximation: experts with no rows need not be read).{TOLERANCE_NOTE}"
        ),
        axes={"M": "var", "N": n, "K": k, "num_experts": "var", "len_m_offsets": "var"},
        inputs={
            "a": {
                "shape": ["M", "K"],
                "dtype": "bfloat16",
                "description": "Routed token rows, sorted by expert.",
            },
            "w": {
                "shape": ["num_experts", "N", "K"],
                "dtype": "bfloat16",
                "description": "Expert weights, each in nn.Linear layout.",
                "init": WEIGHT_INIT,
            },
            "m_offsets": {
                "shape": ["len_m_offsets"],
                "dtype": "int32",
                "description": "Expert e owns rows m_offsets[e] .. m_offsets[e + 1] - 1.",
            },
        },
        outputs={
            "out": {
                "shape": ["M", "N"],
                "dtype": "bfloat16",
                "description": "Per-row a @ w[expert of the row]^T.",
            }
        },
        tolerance=GEMM_TOLERANCE,
        constraints=[
            "len_m_offsets == num_experts + 1",
            "m_offsets[0] == 0",
            "m_offsets[-1] == M",
            "(m_offsets[1:] >= m_offsets[:-1]).all()",
        ],
        tags=["family:gemm", "kind:grouped_gemm", "model:qwen3-235b-a22b"],
        flops="2 * M * N * K",
        bytes="2 * (M * K + num_experts * N * K + M * N) + 4 * len_m_offsets",
    )
    smoke = torch.tensor([0, 13, 13, 33, 40], dtype=torch.int32)
    b.workload(
        entry,
        "smoke-e4-m40",
        axes={"M": 40, "num_experts": 4, "len_m_offsets": 5},
        suites=["smoke"],
        tensors={"m_offsets": smoke},
        provenance="Hand-written expert loads 13, 0, 20, 7 (expert 1 empty).",
    )
    for i, (label, experts, rows, empty, suites) in enumerate(GROUPED_WORKLOADS):
        offsets = _skewed_offsets(seed + i, experts, rows, empty)
        b.workload(
            entry,
            label,
            axes={"M": rows, "num_experts": experts, "len_m_offsets": experts + 1},
            suites=suites,
            tensors={"m_offsets": offsets},
            provenance=(
                f"Synthetic skewed routing, seed {seed + i}: {rows} rows drawn multinomially over"
                f" {experts} experts with Zipf(0.5) weights in a random order, {empty} experts"
                " forced empty."
            ),
        )


def build(b: DatasetBuilder) -> None:
    for n, k, what in DENSE:
        _dense(b, n, k, what)
    for i, (kind, n, k, what) in enumerate(GROUPED):
        _grouped(b, kind, n, k, what, seed=500 + 10 * i)
