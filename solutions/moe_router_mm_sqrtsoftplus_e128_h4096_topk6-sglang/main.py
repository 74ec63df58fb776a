"""SGLang 0.5.22's own modality-aware router kernel: moe_fused_gate
(kernels/ops/moe/moe_fused_gate.py, one Triton kernel: sqrt-softplus scoring, a per-token
bias choice, top-k with ties to the lower expert id, renormalisation and the routed scaling),
called as SGLang's vision-language router calls it (vision_topk, srt/multimodal/dsv41/
vl_routing.py):

    moe_fused_gate(logits, bias, topk=6, scoring_func="sqrtsoftplus",
                   bias_alt=bias_alt, input_ids=ids, bias_alt_token_id=image_token_id,
                   renormalize=True, renormalize_epsilon=1e-20,
                   routed_scaling_factor=routed_scaling_factor,
                   apply_routed_scaling_factor_on_output=True, sqrtsoftplus_log1p=True)

The interface record names select_experts (srt/layers/moe/topk.py), the common boundary of
SGLang's TopK layer; for sqrt-softplus scoring it ends in this same kernel
(biased_topk_jit_kernel_impl -> moe_fused_gate), but it has no per-token modality: the
vision-language router above is where SGLang passes one. renormalize_epsilon is
_RENORMALIZE_SUM_EPSILON of topk.py, as vision_topk passes it. The scaling is applied on the
output because the definition's weights include it (the engine may leave it to the MoE
combine instead).

adapter.py: the float32 gate projection before (the definition folds it in; SGLang runs it
as its own GEMM), the modality bias pair, and the ascending int64 ids after.
"""

from sglang.kernels.ops.moe.moe_fused_gate import moe_fused_gate

# isort: split
from adapter import IMAGE_TOKEN, ascending, modality_biases, router_logits, token_ids

TOP_K = 6
RENORMALIZE_SUM_EPSILON = 1e-20


def prepare(hidden, weight, is_image, routed_scaling_factor):
    return modality_biases(weight.shape[0], hidden.device)


def run(hidden, weight, is_image, routed_scaling_factor, prepared=None):
    bias, bias_alt = (
        prepared if prepared is not None else modality_biases(weight.shape[0], hidden.device)
    )
    weights, ids = moe_fused_gate(
        router_logits(hidden, weight),
        bias,
        topk=TOP_K,
        scoring_func="sqrtsoftplus",
        bias_alt=bias_alt,
        input_ids=token_ids(is_image),
        bias_alt_token_id=IMAGE_TOKEN,
        renormalize=True,
        renormalize_epsilon=RENORMALIZE_SUM_EPSILON,
        routed_scaling_factor=float(routed_scaling_factor),
        apply_routed_scaling_factor_on_output=True,
        sqrtsoftplus_log1p=True,
    )
    return ascending(weights, ids)
