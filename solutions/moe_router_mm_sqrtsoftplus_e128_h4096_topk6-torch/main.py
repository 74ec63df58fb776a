"""Plain PyTorch baseline: modality-aware sqrt-softplus MoE router with top-6 selection.

As a serving engine writes it without a fused router kernel:
  1. logits = F.linear(hidden, weight) in float32 (bf16 operands widened; FP32 GEMM, no TF32),
  2. scores = sqrt(softplus(logits)),
  3. experts of the other modality are masked to -inf with masked_fill (text tokens may pick
     experts 0..63, image tokens 64..127),
  4. top-6 by a stable descending sort, so equal scores keep expert order and the lower expert
     ID wins (torch.topk does not promise any order among ties, and the IDs are compared exactly),
  5. IDs sorted ascending, their scores gathered, normalised to sum 1 and scaled.
"""

import torch
import torch.nn.functional as F

TOP_K = 6


def run(hidden, weight, is_image, routed_scaling_factor):
    num_experts = weight.shape[0]
    logits = F.linear(hidden.float(), weight.float())  # [T, E] float32
    scores = torch.sqrt(F.softplus(logits))

    expert_is_image = torch.arange(num_experts, device=hidden.device) >= num_experts // 2
    disallowed = expert_is_image.unsqueeze(0) != is_image.bool().unsqueeze(1)  # [T, E]
    masked = scores.masked_fill(disallowed, float("-inf"))

    ranked = torch.sort(masked, dim=1, descending=True, stable=True).indices
    topk_ids = torch.sort(ranked[:, :TOP_K], dim=1).values  # ascending expert IDs

    chosen = torch.gather(scores, 1, topk_ids)
    topk_weights = chosen * (routed_scaling_factor / chosen.sum(dim=1, keepdim=True))
    return topk_ids.to(torch.int64), topk_weights.to(torch.float32)
