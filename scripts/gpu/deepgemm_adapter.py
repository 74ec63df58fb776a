"""How much of DeepGEMM's grouped-GEMM time is the adapter (a diagnostic, not an audit line).

The grouped GEMM definitions pack experts' rows without padding; DeepGEMM's contiguous layout
wants each expert's block at a multiple of its M alignment, so the `-deepgemm-contiguous`
solution scatters rows into a padded buffer, runs one launch and gathers them back. This times,
at the all suite's largest shapes (64 experts, 16384 rows, routing drawn at random), four things
side by side with triton.testing.do_bench (median, L2 flushed between calls):

  solution   the committed solution's run() (adapter + kernel)
  kernel     m_grouped_bf16_gemm_nt_contiguous alone, on the already padded buffer
  grouped    torch._grouped_mm on the unpadded rows (the `-grouped` solution)
  aligned    both kernels on a routing whose every expert already holds a multiple of the
             alignment (no padding, no adapter): the kernels alone on equal inputs

    python3 scripts/gpu/deepgemm_adapter.py [--json FILE]

Needs the GPU, deep_gemm (locks/deepgemm-2.6.1) and triton on the path.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

import deep_gemm
import torch
from triton.testing import do_bench

REPO = Path(__file__).resolve().parents[2]
SHAPES = {  # definition: (N, K), from the definitions' constant axes
    "grouped_gemm_bf16_down_n4096_k1536": (4096, 1536),
    "grouped_gemm_bf16_gate_up_n3072_k4096": (3072, 4096),
}
EXPERTS, ROWS = 64, 16384


def solution_module(definition: str):
    path = REPO / "solutions" / f"{definition}-deepgemm-contiguous" / "main.py"
    spec = importlib.util.spec_from_file_location(f"dg_{definition}", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def offsets_of(counts: torch.Tensor) -> torch.Tensor:
    return torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(counts, 0)]).cuda()


def measure(definition: str, n: int, k: int, alignment: int) -> dict[str, float]:
    module = solution_module(definition)
    generator = torch.Generator().manual_seed(0)
    experts = torch.randint(0, EXPERTS, (ROWS,), generator=generator)
    m_offsets = offsets_of(torch.bincount(experts, minlength=EXPERTS))
    a = torch.randn(ROWS, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(EXPERTS, n, k, device="cuda", dtype=torch.bfloat16) / k**0.5
    destination, expert, bound = module._padded_rows(a, m_offsets, alignment)
    staged = torch.zeros(bound, k, dtype=a.dtype, device="cuda")
    staged[destination] = a
    layout = torch.full((bound,), -1, dtype=torch.int32, device="cuda")
    layout[destination] = expert.to(torch.int32)
    out = torch.empty(bound, n, dtype=torch.bfloat16, device="cuda")
    offs = m_offsets[1:].to(torch.int32)
    wt = w.transpose(-2, -1)
    check = module.run(a, w, m_offsets).float()
    ref = torch._grouped_mm(a, wt, offs=offs).float()
    times = {
        "max_abs_diff_vs_grouped": (check - ref).abs().max().item(),
        "padded_rows": int(bound),
        "solution_ms": do_bench(lambda: module.run(a, w, m_offsets), return_mode="median"),
        "kernel_ms": do_bench(
            lambda: deep_gemm.m_grouped_bf16_gemm_nt_contiguous(staged, w, out, layout),
            return_mode="median",
        ),
        "grouped_ms": do_bench(lambda: torch._grouped_mm(a, wt, offs=offs), return_mode="median"),
    }
    # Equal inputs: every expert holds ROWS / EXPERTS rows (a multiple of the alignment).
    even = torch.full((EXPERTS,), ROWS // EXPERTS, dtype=torch.int64)
    even_offsets = offsets_of(even)
    even_layout = torch.repeat_interleave(
        torch.arange(EXPERTS, dtype=torch.int32, device="cuda"), ROWS // EXPERTS
    )
    even_out = torch.empty(ROWS, n, dtype=torch.bfloat16, device="cuda")
    even_offs = even_offsets[1:].to(torch.int32)
    times["aligned_kernel_ms"] = do_bench(
        lambda: deep_gemm.m_grouped_bf16_gemm_nt_contiguous(a, w, even_out, even_layout),
        return_mode="median",
    )
    times["aligned_grouped_ms"] = do_bench(
        lambda: torch._grouped_mm(a, wt, offs=even_offs), return_mode="median"
    )
    flops = 2 * ROWS * n * k
    times["aligned_kernel_tflops"] = flops / times["aligned_kernel_ms"] / 1e9
    times["aligned_grouped_tflops"] = flops / times["aligned_grouped_ms"] / 1e9
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    alignment = deep_gemm.get_mk_alignment_for_contiguous_layout()
    report = {
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "deep_gemm": deep_gemm.__version__,
        "experts": EXPERTS,
        "rows": ROWS,
        "alignment": alignment,
        "definitions": {d: measure(d, n, k, alignment) for d, (n, k) in SHAPES.items()},
    }
    text = json.dumps(report, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
