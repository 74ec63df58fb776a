"""Modality-aware MoE router: sqrt-softplus scores, top-6 of the token's modality experts.

Shapes (T = num_tokens):
    hidden                [T, 4096] bf16     token hidden states
    weight                [128, 4096] bf16   router projection, one row per expert
    is_image              [T] bool           True for image tokens, False for text tokens
    routed_scaling_factor Python float       multiplies the normalised weights
Outputs: topk_ids [T, 6] int64 and topk_weights [T, 6] float32.

Experts 0..63 are text experts and experts 64..127 are image experts (the first half of the
expert axis is text, the second half image). For each token t (float32 throughout):
    logits[t, e] = dot(hidden[t], weight[e])               (bf16 inputs widened to float32)
    score[t, e]  = sqrt(softplus(logits[t, e])),  softplus(x) = log(1 + exp(x))
    allowed(t, e) = (e >= 64) == is_image[t]
Select the 6 allowed experts with the highest score; among equal scores the lower expert ID
wins. topk_ids[t] lists the selected IDs in ascending order and topk_weights[t, i] belongs to
topk_ids[t, i]:
    topk_weights[t, i] = score[t, id_i] / sum_j score[t, id_j] * routed_scaling_factor.
"""

import torch

TOP_K = 6


def run(hidden, weight, is_image, routed_scaling_factor):
    num_experts = weight.shape[0]
    logits = hidden.float() @ weight.float().T  # [T, E]
    scores = torch.sqrt(torch.nn.functional.softplus(logits))
    expert_is_image = torch.arange(num_experts, device=hidden.device) >= num_experts // 2
    allowed = expert_is_image.unsqueeze(0) == is_image.bool().unsqueeze(1)  # [T, E]
    masked = torch.where(allowed, scores, torch.full_like(scores, float("-inf")))
    # A stable descending sort keeps equal scores in expert order, so lower IDs win.
    chosen = torch.sort(masked, dim=1, descending=True, stable=True).indices[:, :TOP_K]
    topk_ids = torch.sort(chosen, dim=1).values
    selected = torch.gather(scores, 1, topk_ids)
    topk_weights = selected / selected.sum(dim=1, keepdim=True) * routed_scaling_factor
    return topk_ids.to(torch.int64), topk_weights.to(torch.float32)
