"""Modality-aware MoE router of a multimodal model: sqrt-softplus scores, top-6 routing.

The router projects each token's hidden state (4096) onto 128 experts in float32, scores them
with sqrt(softplus(logit)), and lets a token choose only among the experts of its modality:
experts 0..63 serve text tokens and experts 64..127 image tokens (modality-isolated experts,
as in multimodal MoE models that split the expert pool). It keeps the top 6, normalises their
scores to sum 1 and multiplies by a routed scaling factor. Token counts cover decode batches
(1, 64) and prefill chunks with interleaved image spans (4096, 16384).

Expert IDs are compared exactly, so the logits must not depend on summation order: hidden
states are drawn as integers in [-2, 2] and every workload stores the same router weight, whose
entries are integers in [-3, 3] times 2**-7 (exact in bf16). Every logit is then a multiple of
2**-7 below 2**8 in magnitude, exact in float32 for any accumulation order, while its spread
(std about 1.4) matches a trained router's, so softplus is exercised where it curves. The
stored weight is 1 MB per workload, which is why this family has only five workloads.
"""

from __future__ import annotations

import torch

from scripts.sample_dataset.builder import DatasetBuilder

NAME = "moe_router_mm_sqrtsoftplus_e128_h4096_topk6"
HIDDEN = 4096
EXPERTS = 128
TOPK = 6
ROUTED_SCALING = 2.5
WEIGHT_SEED = 31


def _router_weight() -> torch.Tensor:
    gen = torch.Generator().manual_seed(WEIGHT_SEED)
    ints = torch.randint(-3, 4, (EXPERTS, HIDDEN), generator=gen)
    return (ints.to(torch.float32) * 2.0**-7).to(torch.bfloat16)


def _modality(num_tokens: int, image_spans: list[tuple[int, int]]) -> torch.Tensor:
    is_image = torch.zeros(num_tokens, dtype=torch.bool)
    for start, length in image_spans:
        is_image[start : start + length] = True
    return is_image


def _random_spans(num_tokens: int, span: int, count: int, seed: int) -> list[tuple[int, int]]:
    """`count` non-overlapping image spans of `span` tokens at random positions."""
    gen = torch.Generator().manual_seed(seed)
    slots = num_tokens // span
    chosen = torch.randperm(slots, generator=gen)[:count].sort().values.tolist()
    return [(slot * span, span) for slot in chosen]


def build(b: DatasetBuilder) -> None:
    entry = b.definition(
        NAME,
        "moe_router",
        description=(
            "Modality-aware MoE router: logits = hidden @ weight^T in float32, scores = "
            "sqrt(softplus(logits)); text tokens (is_image False) may pick only experts 0..63, "
            "image tokens only experts 64..127; take the top 6 allowed scores (ties: lower "
            "expert ID wins), return their IDs ascending and weights = score / (sum of the 6 "
            "scores) * routed_scaling_factor in the same order. IDs must match exactly; "
            "weights are float32 held to 1e-5. The sample hidden states and router weight are "
            "integer multiples of powers of two so that logits are exact in float32 under any "
            "summation order (a kernel must still be correct for any bf16 input)."
        ),
        axes={"num_tokens": "var", "hidden_size": HIDDEN, "num_experts": EXPERTS, "topk": TOPK},
        inputs={
            "hidden": {
                "shape": ["num_tokens", "hidden_size"],
                "dtype": "bfloat16",
                "init": {"dist": "randint", "low": -2, "high": 3},
                "description": "Token hidden states.",
            },
            "weight": {
                "shape": ["num_experts", "hidden_size"],
                "dtype": "bfloat16",
                "description": "Router projection; experts 0..63 text, 64..127 image.",
            },
            "is_image": {
                "shape": ["num_tokens"],
                "dtype": "bool",
                "description": "True for image tokens (route to experts 64..127), else text.",
            },
            "routed_scaling_factor": {
                "shape": None,
                "dtype": "float32",
                "description": "Multiplies the normalised top-6 weights.",
            },
        },
        outputs={
            "topk_ids": {
                "shape": ["num_tokens", "topk"],
                "dtype": "int64",
                "description": "Selected expert IDs, ascending.",
            },
            "topk_weights": {
                "shape": ["num_tokens", "topk"],
                "dtype": "float32",
                "description": "Normalised, scaled weight of each selected expert.",
            },
        },
        tolerance={
            "atol": 1e-5,
            "rtol": 1e-5,
            "rule": "and",
            "required_matched_ratio": 1.0,
            "per_output": {
                "topk_ids": {
                    "atol": 0.0,
                    "rtol": 0.0,
                    "rule": "and",
                    "required_matched_ratio": 1.0,
                },
                "topk_weights": {
                    "atol": 1e-5,
                    "rtol": 1e-5,
                    "rule": "and",
                    "required_matched_ratio": 1.0,
                },
            },
        },
        constraints=[
            "num_experts % 2 == 0",
            "num_experts // 2 >= topk",
            "routed_scaling_factor > 0",
        ],
        tags=["family:moe_router", "model:multimodal-moe", "stage:prefill", "stage:decode"],
        # Projection (2 H per expert) plus softplus, sqrt and masking per expert.
        flops="num_tokens * num_experts * (2 * hidden_size + 4)",
        bytes=(
            "num_tokens * (hidden_size * 2 + 1 + topk * (8 + 4)) + num_experts * hidden_size * 2"
        ),
    )
    weight = _router_weight()
    cases = [
        ("smoke-t5", 5, [(2, 2)], ["smoke"], "tokens 2-3 are image tokens."),
        ("dev-t64", 64, [(0, 16), (40, 8)], ["dev"], "image tokens 0-15 and 40-47."),
        (
            "dev-t4096",
            4096,
            _random_spans(4096, 256, 6, seed=32),
            ["dev"],
            "six 256-token image spans at random 256-aligned slots (seed 32).",
        ),
        ("t1", 1, [], [], "a single text token."),
        (
            "t16384",
            16384,
            _random_spans(16384, 1024, 10, seed=33),
            [],
            "ten 1024-token image spans at random 1024-aligned slots (seed 33).",
        ),
    ]
    for label, tokens, spans, suites, note in cases:
        b.workload(
            entry,
            label,
            axes={"num_tokens": tokens},
            suites=suites,
            scalars={"routed_scaling_factor": ROUTED_SCALING},
            tensors={"weight": weight, "is_image": _modality(tokens, spans)},
            provenance=(
                f"Synthetic router weight: integers in [-3, 3] times 2**-7 (seed {WEIGHT_SEED}),"
                f" exact in bf16. Synthetic modality mask: {note}"
            ),
        )
