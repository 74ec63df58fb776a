"""Neighborhood family: NATTEN-style neighborhood attention in 1D, 2D, dilated 2D and 3D.

Four BF16, non-causal definitions in NATTEN's heads-last layout [batch, *spatial, heads, dim]:
each query attends only to the kernel window around it (shifted inwards at the borders, over
its dilation group when dilated). Kernel size and dilation are part of each definition, as in
the engine's wrappers, and the scale is 1/sqrt(head_dim).

Shapes follow where neighborhood attention is used: image backbones and image diffusion
transformers on 2D latent/feature maps (64x64 and 128x128), video transformers on 3D latents
(8-16 frames of 32x32 to 48x48) and long 1D token sequences. Heads and head dims are those of
such models (16 x 64 for images, 16 x 128 for video, 8 x 64 in 1D). All inputs are random
normal(0, 1) floats, so no blobs are stored.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from scripts.sample_dataset.builder import DatasetBuilder

FAMILY_TAG = "family:neighborhood"
BF16_TOLERANCE: dict[str, Any] = {"atol": 1e-2, "rtol": 1e-2, "rule": "and"}


@dataclass(frozen=True)
class Variant:
    """One neighborhood-attention definition and its workloads."""

    name: str
    spatial: tuple[str, ...]
    """Spatial axis names, outermost first."""
    kernel: tuple[int, ...]
    dilation: tuple[int, ...]
    heads: int
    head_dim: int
    use: str
    """What the shapes stand for, for the description."""
    workloads: tuple[tuple[str, dict[str, int], tuple[str, ...]], ...]
    """(label, var axes, suites)."""


VARIANTS = [
    Variant(
        name="neighborhood_attention_1d_k13_h8_d64",
        spatial=("seq_len",),
        kernel=(13,),
        dilation=(1,),
        heads=8,
        head_dim=64,
        use="long 1D token sequences",
        workloads=(
            ("smoke-b2-l40", {"batch": 2, "seq_len": 40}, ("smoke",)),
            ("dev-b4-l8192", {"batch": 4, "seq_len": 8192}, ("dev",)),
            ("dev-b1-l32768", {"batch": 1, "seq_len": 32768}, ("dev",)),
            ("all-b16-l16384", {"batch": 16, "seq_len": 16384}, ()),
        ),
    ),
    Variant(
        name="neighborhood_attention_2d_k7x7_h16_d64",
        spatial=("height", "width"),
        kernel=(7, 7),
        dilation=(1, 1),
        heads=16,
        head_dim=64,
        use="image feature/latent maps",
        workloads=(
            ("smoke-b1-12x10", {"batch": 1, "height": 12, "width": 10}, ("smoke",)),
            ("dev-b4-64x64", {"batch": 4, "height": 64, "width": 64}, ("dev",)),
            ("dev-b1-128x128", {"batch": 1, "height": 128, "width": 128}, ("dev",)),
            ("all-b2-96x160", {"batch": 2, "height": 96, "width": 160}, ()),
        ),
    ),
    Variant(
        name="neighborhood_attention_2d_k7x7_dil2_h16_d64",
        spatial=("height", "width"),
        kernel=(7, 7),
        dilation=(2, 2),
        heads=16,
        head_dim=64,
        use="image feature/latent maps (dilated layers widen the receptive field)",
        workloads=(
            # Odd sizes make the two dilation groups of an axis differ in length.
            ("smoke-b1-17x15", {"batch": 1, "height": 17, "width": 15}, ("smoke",)),
            ("dev-b4-64x64", {"batch": 4, "height": 64, "width": 64}, ("dev",)),
            ("dev-b1-128x128", {"batch": 1, "height": 128, "width": 128}, ("dev",)),
            ("all-b2-96x160", {"batch": 2, "height": 96, "width": 160}, ()),
        ),
    ),
    Variant(
        name="neighborhood_attention_3d_k3x7x7_h16_d128",
        spatial=("frames", "height", "width"),
        kernel=(3, 7, 7),
        dilation=(1, 1, 1),
        heads=16,
        head_dim=128,
        use="video latents (frames x height x width)",
        workloads=(
            ("smoke-b1-4x9x8", {"batch": 1, "frames": 4, "height": 9, "width": 8}, ("smoke",)),
            ("dev-b1-8x32x32", {"batch": 1, "frames": 8, "height": 32, "width": 32}, ("dev",)),
            ("dev-b1-16x48x48", {"batch": 1, "frames": 16, "height": 48, "width": 48}, ("dev",)),
            ("all-b2-13x30x52", {"batch": 2, "frames": 13, "height": 30, "width": 52}, ()),
        ),
    ),
]


def _describe(v: Variant) -> str:
    dims = len(v.spatial)
    kernel = "x".join(map(str, v.kernel))
    dilation = "x".join(map(str, v.dilation))
    return (
        f"Non-causal {dims}D neighborhood attention (NATTEN na{dims}d semantics) over {v.use}:"
        f" each query attends to the {kernel} window of keys around it (dilation {dilation}),"
        " the window clamped to stay inside the map, so border queries see a shifted window."
        f" Inputs only Q, K, V in the heads-last layout [batch, {', '.join(v.spatial)}, heads,"
        f" head_dim]; kernel size and dilation are fixed by the definition; scale"
        f" 1/sqrt({v.head_dim})."
    )


def _define(b: DatasetBuilder, v: Variant) -> None:
    shape = ["batch", *v.spatial, "num_heads", "head_dim"]
    positions = " * ".join(v.spatial)
    window = math.prod(v.kernel)
    entry = b.definition(
        v.name,
        "neighborhood_attention",
        description=_describe(v),
        axes={
            "batch": "var",
            **dict.fromkeys(v.spatial, "var"),
            "num_heads": v.heads,
            "head_dim": v.head_dim,
        },
        inputs={
            "q": {"shape": shape, "dtype": "bfloat16", "description": "Queries."},
            "k": {"shape": shape, "dtype": "bfloat16", "description": "Keys."},
            "v": {"shape": shape, "dtype": "bfloat16", "description": "Values."},
        },
        outputs={"o": {"shape": shape, "dtype": "bfloat16", "description": "Attention output."}},
        tolerance=BF16_TOLERANCE,
        # NATTEN needs every axis to hold at least kernel * dilation positions.
        constraints=[
            f"{axis} >= {k * d}" for axis, k, d in zip(v.spatial, v.kernel, v.dilation, strict=True)
        ],
        tags=[FAMILY_TAG, f"variant:na{len(v.spatial)}d"],
        flops=f"4 * batch * num_heads * {positions} * {window} * head_dim",
        bytes=f"4 * batch * {positions} * num_heads * head_dim * 2",
    )
    for label, axes, suites in v.workloads:
        b.workload(entry, label, axes=axes, suites=list(suites))


def build(b: DatasetBuilder) -> None:
    for variant in VARIANTS:
        _define(b, variant)
