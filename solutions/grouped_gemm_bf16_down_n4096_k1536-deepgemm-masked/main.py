"""MoE grouped BF16 GEMM with DeepGEMM's M-grouped masked layout (m_grouped_bf16_gemm_nt_masked).

The masked layout is what a decode step under CUDA graphs feeds DeepGEMM: a [E, max_m, K] slab
per expert, of which the first masked_m[e] rows are real. The definition packs the experts'
rows without padding, so the adapter moves row r of expert e to slab row
    e * max_m + (r - m_offsets[e]),
runs one launch, and gathers the rows back. max_m, the slab height, is the largest expert load
rounded up to the M alignment: it sizes a buffer, so it is read on the host (one sync per call;
a graph-captured engine would size the slabs for its worst case instead). expected_m, DeepGEMM's
hint for choosing a kernel configuration, is the mean load.
"""

import deep_gemm
import torch


def run(a, w, m_offsets):
    experts = w.shape[0]
    alignment = deep_gemm.get_mk_alignment_for_contiguous_layout()
    offsets = m_offsets.to(device=a.device, dtype=torch.int64)
    counts = offsets[1:] - offsets[:-1]
    most = int(counts.max())
    max_m = max(alignment, (most + alignment - 1) // alignment * alignment)
    index = torch.arange(a.shape[0], device=a.device, dtype=torch.int64)
    expert = torch.searchsorted(offsets[1:], index, right=True)
    destination = expert * max_m + index - offsets[expert]
    slabs = torch.empty(experts * max_m, a.shape[1], dtype=a.dtype, device=a.device)
    slabs[destination] = a
    out = torch.empty(experts, max_m, w.shape[1], dtype=torch.bfloat16, device=a.device)
    expected_m = max(1, (a.shape[0] + experts - 1) // experts)
    deep_gemm.m_grouped_bf16_gemm_nt_masked(
        slabs.view(experts, max_m, a.shape[1]), w, out, counts.to(torch.int32), expected_m
    )
    return out.view(experts * max_m, w.shape[1])[destination]
