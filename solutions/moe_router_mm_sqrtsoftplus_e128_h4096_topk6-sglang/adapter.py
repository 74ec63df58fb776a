"""The operands SGLang's modality-aware router kernel takes, built from the definition's
inputs, and the definition's outputs built from the kernel's. Pure torch: it runs (and is
tested) on the CPU.

SGLang routes vision-language MoE tokens with moe_fused_gate's per-token bias choice
(kernels/ops/moe/moe_fused_gate.py, called by vision_topk in srt/multimodal/dsv41/
vl_routing.py): every token adds `bias` to its sqrt-softplus scores before the top-k, or
`bias_alt` when its input id equals `bias_alt_token_id`; the weights come from the unbiased
scores. The definition's modality rule is such a bias pair: text tokens add 0 to experts
0..63 and a large negative to 64..127, image tokens the other way round, with is_image as the
per-token id (1 = image) and bias_alt_token_id = 1. A barred expert's score plus the bias is
below every allowed one (scores are >= 0), so with 64 allowed experts and top 6 it is never
chosen, and the kernel's ties go to the lower expert id, as the definition's do.

Around the kernel:
  before  logits = hidden @ weight^T in float32: the definition folds the router's gate
          projection in; SGLang runs it as a separate GEMM before the kernel
  after   the kernel's ids come in selection order as int32 with their weights beside them;
          the definition wants ids ascending as int64 with the weights in the same order:
          a sort of the six ids per token and a gather of the weights.
"""

from __future__ import annotations

import torch

BARRED = -1.0e30
"""Added to the score of an expert the token's modality may not use."""

IMAGE_TOKEN = 1
"""The per-token id that selects bias_alt (the image bias): is_image as int32."""


def modality_biases(num_experts: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(bias for text tokens, bias_alt for image tokens), float32 [num_experts] each."""
    image_expert = torch.arange(num_experts, device=device) >= num_experts // 2
    barred = torch.full((num_experts,), BARRED, dtype=torch.float32, device=device)
    zero = torch.zeros(num_experts, dtype=torch.float32, device=device)
    return torch.where(image_expert, barred, zero), torch.where(image_expert, zero, barred)


def router_logits(hidden: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """The gate projection the definition folds in, in float32 as the definition computes it."""
    return hidden.float() @ weight.float().T


def token_ids(is_image: torch.Tensor) -> torch.Tensor:
    """is_image as the per-token ids the kernel compares with bias_alt_token_id."""
    return is_image.to(torch.int32) * IMAGE_TOKEN


def ascending(weights: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The kernel's (weights, ids) in selection order -> (ids ascending as int64, weights
    in the same order as float32)."""
    order = torch.argsort(ids.to(torch.int64), dim=1)
    return torch.gather(ids.to(torch.int64), 1, order), torch.gather(weights.float(), 1, order)
