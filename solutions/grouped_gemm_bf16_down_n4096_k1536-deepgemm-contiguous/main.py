"""MoE grouped BF16 GEMM with DeepGEMM's M-grouped contiguous layout (m_grouped_bf16_gemm_nt_contiguous).

DeepGEMM wants each expert's rows to start at a multiple of its M alignment
(get_mk_alignment_for_contiguous_layout(), one kernel M block or more) and a per-row expert id,
-1 on padding rows, whose whole blocks the kernel skips. The definition packs the experts without
padding (m_offsets), so the adapter moves every row r of expert e to
    aligned_start[e] + (r - m_offsets[e]),
runs one launch over the padded rows, and gathers the same rows back. All index arithmetic stays
on the device, sized by an upper bound of the padded row count (M + E * (alignment - 1)), so there
is no host sync. Padding rows of the staging buffer are left uninitialised: GEMM rows are
independent and padding rows' outputs are never read.
"""

import deep_gemm
import torch


def _padded_rows(a, m_offsets, alignment):
    """(destination row of every input row, expert of every input row, padded row bound)."""
    experts = m_offsets.numel() - 1
    rows = a.shape[0]
    offsets = m_offsets.to(device=a.device, dtype=torch.int64)
    counts = offsets[1:] - offsets[:-1]
    padded = (counts + alignment - 1) // alignment * alignment
    starts = torch.cumsum(padded, 0) - padded
    index = torch.arange(rows, device=a.device, dtype=torch.int64)
    expert = torch.searchsorted(offsets[1:], index, right=True)
    destination = starts[expert] + index - offsets[expert]
    bound = rows + experts * (alignment - 1)
    return destination, expert, (bound + alignment - 1) // alignment * alignment


def run(a, w, m_offsets):
    alignment = deep_gemm.get_mk_alignment_for_contiguous_layout()
    destination, expert, bound = _padded_rows(a, m_offsets, alignment)
    staged = torch.empty(bound, a.shape[1], dtype=a.dtype, device=a.device)
    staged[destination] = a
    layout = torch.full((bound,), -1, dtype=torch.int32, device=a.device)
    layout[destination] = expert.to(torch.int32)
    out = torch.empty(bound, w.shape[1], dtype=torch.bfloat16, device=a.device)
    deep_gemm.m_grouped_bf16_gemm_nt_contiguous(staged, w, out, layout)
    return out[destination]
