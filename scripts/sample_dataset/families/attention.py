"""Attention family: four BF16 attention contracts of a Gemma 3 style multimodal model.

The audit's attention rows are dense (unmasked) attention, cached-prefix attention with full
visibility, "prefix-zero" block-causal attention over interleaved text/image tokens, and chunked
audio-encoder attention. Their shapes are taken from real models so that timings mean something:

* Dense: the SigLIP-so400m vision tower of Gemma 3 (16 heads of 72; an 896x896 image is
  64x64 = 4096 patches of 14 pixels; pan-and-scan crops add more images per prompt).
* Cached-prefix and prefix-zero: a global-attention layer of Gemma-3-12B's language model
  (16 query heads, 8 KV heads, head dim 256, scale 1/sqrt(256)). Gemma 3 lets the 256 soft tokens
  of an image attend to each other bidirectionally while text stays causal; a prefill from
  scratch gives the block-causal mask, and a chunk that is exactly one image, prefilled after a
  cached prefix, sees everything (full visibility).
* Audio: a Whisper-style audio encoder as in Qwen2.5-Omni (20 heads of 64) whose attention is
  block-diagonal over chunks of 100 tokens (200 mel frames at 100 Hz, halved by the conv stem).

In every definition the softmax scale is 1/sqrt(head_dim), fixed, not an input. Q/K/V are random
normal(0, 1) (logits then have unit variance); only the ID/offset tensors are stored in blobs.
"""

from __future__ import annotations

from typing import Any

import torch

from scripts.sample_dataset.builder import DatasetBuilder

FAMILY_TAG = "family:attention"
BF16_TOLERANCE: dict[str, Any] = {"atol": 1e-2, "rtol": 1e-2, "rule": "and"}

GEMMA3_IMAGE_TOKENS = 256  # soft tokens per image in Gemma 3's language model
AUDIO_CHUNK_MEL_FRAMES = 200  # Qwen2.5-Omni audio encoder: n_window = 100, chunks of 2 * n_window
AUDIO_MEL_HZ = 100


def _bf16(shape: list[str], description: str) -> dict[str, Any]:
    return {"shape": shape, "dtype": "bfloat16", "description": description}


# ---------------------------------------------------------------- dense


def _dense(b: DatasetBuilder) -> None:
    entry = b.definition(
        "dense_attention_h16_d72",
        "attention",
        description=(
            "Dense non-causal self-attention of the SigLIP-so400m vision encoder of Gemma 3:"
            " every patch of an image attends to every patch of the same image. Inputs are only"
            " Q, K and V; the scale is 1/sqrt(72), fixed by the head dimension."
        ),
        axes={"batch": "var", "seq_len": "var", "num_heads": 16, "head_dim": 72},
        inputs={
            "q": _bf16(
                ["batch", "seq_len", "num_heads", "head_dim"], "Queries, one image per row."
            ),
            "k": _bf16(["batch", "seq_len", "num_heads", "head_dim"], "Keys."),
            "v": _bf16(["batch", "seq_len", "num_heads", "head_dim"], "Values."),
        },
        outputs={"o": _bf16(["batch", "seq_len", "num_heads", "head_dim"], "Attention output.")},
        tolerance=BF16_TOLERANCE,
        constraints=["batch >= 1", "seq_len >= 1"],
        tags=[FAMILY_TAG, "variant:dense", "model:gemma-3-siglip", "stage:vision-encoder"],
        flops="4 * batch * num_heads * seq_len * seq_len * head_dim",
        bytes="4 * batch * seq_len * num_heads * head_dim * 2",
    )
    b.workload(entry, "smoke-b2-s24", axes={"batch": 2, "seq_len": 24}, suites=["smoke"])
    # One 896x896 image; an image plus seven pan-and-scan crops; a large multi-image batch.
    b.workload(entry, "dev-b1-s4096", axes={"batch": 1, "seq_len": 4096}, suites=["dev"])
    b.workload(entry, "dev-b8-s4096", axes={"batch": 8, "seq_len": 4096}, suites=["dev"])
    b.workload(entry, "all-b16-s4096", axes={"batch": 16, "seq_len": 4096}, suites=[])


# ---------------------------------------------------------------- cached prefix


def _cached_prefix(b: DatasetBuilder) -> None:
    entry = b.definition(
        "cached_prefix_attention_h16_kv8_d256",
        "attention",
        description=(
            "Attention of a chunk of queries over a cached prefix plus the chunk's own K/V, with"
            " full visibility (no mask): a Gemma-3-12B global-attention layer prefilling one"
            " image's 256 bidirectional soft tokens after a cached context. Inputs are in the"
            " engine's positional order (q, prefix K/V, current K/V); GQA with 2 query heads per"
            " KV head; scale 1/sqrt(256), fixed by the head dimension."
        ),
        axes={
            "batch": "var",
            "q_len": "var",
            "prefix_len": "var",
            "num_qo_heads": 16,
            "num_kv_heads": 8,
            "head_dim": 256,
        },
        inputs={
            "q": _bf16(["batch", "q_len", "num_qo_heads", "head_dim"], "Queries of the chunk."),
            "prefix_k": _bf16(
                ["batch", "prefix_len", "num_kv_heads", "head_dim"], "Cached keys, earlier tokens."
            ),
            "prefix_v": _bf16(
                ["batch", "prefix_len", "num_kv_heads", "head_dim"], "Cached values."
            ),
            "k": _bf16(["batch", "q_len", "num_kv_heads", "head_dim"], "Keys of the chunk."),
            "v": _bf16(["batch", "q_len", "num_kv_heads", "head_dim"], "Values of the chunk."),
        },
        outputs={"o": _bf16(["batch", "q_len", "num_qo_heads", "head_dim"], "Attention output.")},
        tolerance=BF16_TOLERANCE,
        constraints=["num_qo_heads % num_kv_heads == 0"],
        tags=[FAMILY_TAG, "variant:cached_prefix", "model:gemma-3-12b", "stage:prefill"],
        flops="4 * batch * num_qo_heads * q_len * (prefix_len + q_len) * head_dim",
        bytes=(
            "2 * (2 * batch * q_len * num_qo_heads * head_dim"
            " + 2 * batch * (prefix_len + q_len) * num_kv_heads * head_dim)"
        ),
    )
    b.workload(
        entry, "smoke-b2-q8-p20", axes={"batch": 2, "q_len": 8, "prefix_len": 20}, suites=["smoke"]
    )
    image = GEMMA3_IMAGE_TOKENS
    b.workload(
        entry,
        "dev-b1-q256-p2k",
        axes={"batch": 1, "q_len": image, "prefix_len": 2048},
        suites=["dev"],
    )
    b.workload(
        entry,
        "dev-b4-q256-p8k",
        axes={"batch": 4, "q_len": image, "prefix_len": 8192},
        suites=["dev"],
    )
    b.workload(
        entry,
        "all-b1-q256-p32k",
        axes={"batch": 1, "q_len": image, "prefix_len": 32768},
        suites=[],
    )


# ---------------------------------------------------------------- prefix zero


def _gemma3_image_ids(
    gen: torch.Generator, batch: int, seq_len: int, images_per_row: int
) -> torch.Tensor:
    """Text/image layout of Gemma 3 prompts: [batch, seq_len] int32, -1 text, n image segment n.

    Each image is 256 soft tokens framed by <start_of_image> and <end_of_image> text tokens; the
    rest of the text is split at random between the gaps (a BOS token always comes first).
    Segment ids count up over the flattened batch.
    """
    ids = torch.full((batch, seq_len), -1, dtype=torch.int32)
    next_id = 0
    for row in range(batch):
        # Each image needs its two marker tokens; the BOS token is the first text token.
        spare = seq_len - 1 - images_per_row * (GEMMA3_IMAGE_TOKENS + 2)
        cuts = torch.sort(torch.randint(0, spare + 1, (images_per_row,), generator=gen)).values
        previous = 0
        position = 1  # after BOS
        for cut in cuts.tolist():
            position += cut - previous + 1  # free text, then <start_of_image>
            previous = cut
            ids[row, position : position + GEMMA3_IMAGE_TOKENS] = next_id
            position += GEMMA3_IMAGE_TOKENS + 1  # the image, then <end_of_image>
            next_id += 1
    return ids


def _prefix_zero(b: DatasetBuilder) -> None:
    # A flattened view of image_ids, used by the contiguity constraint below.
    flat = "image_ids.reshape(-1)"
    entry = b.definition(
        "prefix_zero_block_causal_attention_h16_kv8_d256",
        "attention",
        description=(
            "Block-causal self-attention over interleaved text and image tokens with an empty"
            " cached prefix: a Gemma-3-12B global-attention layer prefilling a multimodal prompt."
            " Text tokens are causal; the tokens of one image segment see each other"
            " bidirectionally plus everything before the segment. image_ids marks text (-1) and"
            " image segments (0, 1, ... in order of appearance over the flattened tensor, each one"
            " contiguous run inside one row). This one operation stands for several native"
            " text/image segment calls of the engine. GQA with 2 query heads per KV head; scale"
            " 1/sqrt(256), fixed by the head dimension."
        ),
        axes={
            "batch": "var",
            "seq_len": "var",
            "num_qo_heads": 16,
            "num_kv_heads": 8,
            "head_dim": 256,
        },
        inputs={
            "q": _bf16(["batch", "seq_len", "num_qo_heads", "head_dim"], "Queries."),
            "k": _bf16(["batch", "seq_len", "num_kv_heads", "head_dim"], "Keys."),
            "v": _bf16(["batch", "seq_len", "num_kv_heads", "head_dim"], "Values."),
            "image_ids": {
                "shape": ["batch", "seq_len"],
                "dtype": "int32",
                "description": "-1 for a text token, n >= 0 for a token of image segment n.",
            },
        },
        outputs={"o": _bf16(["batch", "seq_len", "num_qo_heads", "head_dim"], "Attention output.")},
        tolerance=BF16_TOLERANCE,
        constraints=[
            "num_qo_heads % num_kv_heads == 0",
            "(image_ids >= -1).all()",
            # Numbered in order of appearance: the first image is 0, ids step by 0 or 1.
            "image_ids.max() < 0 or image_ids[image_ids >= 0][0] == 0",
            "(image_ids[image_ids >= 0][1:] - image_ids[image_ids >= 0][:-1] >= 0).all()",
            "(image_ids[image_ids >= 0][1:] - image_ids[image_ids >= 0][:-1] <= 1).all()",
            # Each segment is one run: the flattened tensor has exactly max + 1 segment starts,
            # and no segment continues from the end of one row into the next.
            f"({flat}[0] >= 0) + (({flat}[1:] >= 0) & ({flat}[1:] != {flat}[:-1])).sum()"
            " == image_ids.max() + 1",
            "((image_ids[1:, 0] < 0) | (image_ids[1:, 0] != image_ids[:-1, -1])).all()",
        ],
        tags=[FAMILY_TAG, "variant:prefix_zero", "model:gemma-3-12b", "stage:prefill"],
        # Visible keys are about the causal count seq_len * (seq_len + 1) / 2 per row (images add
        # a little more).
        flops="4 * batch * num_qo_heads * (seq_len * (seq_len + 1) // 2) * head_dim",
        bytes=(
            "2 * (2 * batch * seq_len * num_qo_heads * head_dim"
            " + 2 * batch * seq_len * num_kv_heads * head_dim) + 4 * batch * seq_len"
        ),
    )
    # Hand-made smoke layout covering the edge cases: an image at the very start of a row, two
    # adjacent images without text between them, an image that ends a row, a one-token image.
    t = -1
    smoke_ids = torch.tensor(
        [
            [t, t, 0, 0, 0, 0, t, t, 1, 1, 1, 2, 2, 2, 2, t, t, t, 3, t],
            [4, 4, 4, t, t, t, t, 5, t, t, t, t, t, t, 6, 6, 6, 6, 6, 6],
        ],
        dtype=torch.int32,
    )
    b.workload(
        entry,
        "smoke-b2-s20",
        axes={"batch": 2, "seq_len": 20},
        suites=["smoke"],
        tensors={"image_ids": smoke_ids},
        provenance="Hand-written text/image layout covering segment edge cases.",
    )
    layouts = [
        ("dev-b1-s2048-img2", 1, 2048, 2, ["dev"]),
        ("dev-b2-s4096-img4", 2, 4096, 4, ["dev"]),
        ("all-b1-s8192-img8", 1, 8192, 8, []),
    ]
    for seed, (label, batch, seq_len, images, suites) in enumerate(layouts, start=11):
        gen = torch.Generator().manual_seed(seed)
        b.workload(
            entry,
            label,
            axes={"batch": batch, "seq_len": seq_len},
            suites=suites,
            tensors={"image_ids": _gemma3_image_ids(gen, batch, seq_len, images)},
            provenance=(
                f"Synthetic Gemma 3 prompt layout: {images} images of 256 soft tokens per row,"
                f" each framed by start/end-of-image text tokens, text gaps split at random,"
                f" seed {seed}."
            ),
        )


# ---------------------------------------------------------------- audio


def _audio_cu_seqlens(clip_seconds: list[float]) -> torch.Tensor:
    """Chunk offsets of a batch of clips: each clip's mel frames are cut into 200-frame chunks,
    and a chunk of m frames becomes ceil(m / 2) tokens after the stride-2 conv stem."""
    lengths: list[int] = []
    for seconds in clip_seconds:
        frames = round(seconds * AUDIO_MEL_HZ)
        for start in range(0, frames, AUDIO_CHUNK_MEL_FRAMES):
            chunk_frames = min(AUDIO_CHUNK_MEL_FRAMES, frames - start)
            lengths.append((chunk_frames + 1) // 2)
    offsets = torch.zeros(len(lengths) + 1, dtype=torch.int32)
    offsets[1:] = torch.cumsum(torch.tensor(lengths, dtype=torch.int32), dim=0)
    return offsets


_RANDOM_CLIPS = "{} clips of uniform random 1-30 s (10 ms steps), seed {}"


def _random_clips(count: int, seed: int) -> list[float]:
    """Clip durations in seconds, uniform in [1, 30), rounded to whole mel frames."""
    gen = torch.Generator().manual_seed(seed)
    raw = torch.rand(count, generator=gen, dtype=torch.float64) * 29.0 + 1.0
    return [round(s, 2) for s in raw.tolist()]


def _audio(b: DatasetBuilder) -> None:
    entry = b.definition(
        "audio_attention_h20_d64",
        "attention",
        description=(
            "Block-diagonal self-attention of a Whisper-style audio encoder (Qwen2.5-Omni audio"
            " tower: 20 heads of 64) over packed tokens: each chunk given by cu_seqlens attends"
            " to itself only, non-causally. Scale 1/sqrt(64), fixed by the head dimension."
            " Tolerance: an element fails only when it is off by more than 1e-2 both absolutely"
            " and relatively, and 99.99% of elements must pass (the audit's matched-element"
            " requirement for this family)."
        ),
        axes={"total_tokens": "var", "len_cu_seqlens": "var", "num_heads": 20, "head_dim": 64},
        inputs={
            "q": _bf16(["total_tokens", "num_heads", "head_dim"], "Queries, chunks packed."),
            "k": _bf16(["total_tokens", "num_heads", "head_dim"], "Keys."),
            "v": _bf16(["total_tokens", "num_heads", "head_dim"], "Values."),
            "cu_seqlens": {
                "shape": ["len_cu_seqlens"],
                "dtype": "int32",
                "description": "Chunk offsets: chunk c owns tokens cu_seqlens[c] .. [c+1] - 1.",
            },
        },
        outputs={"o": _bf16(["total_tokens", "num_heads", "head_dim"], "Attention output.")},
        tolerance={**BF16_TOLERANCE, "required_matched_ratio": 0.9999},
        constraints=[
            "len_cu_seqlens >= 2",
            "cu_seqlens[0] == 0",
            "cu_seqlens[-1] == total_tokens",
            "(cu_seqlens[1:] > cu_seqlens[:-1]).all()",
        ],
        tags=[FAMILY_TAG, "variant:audio", "model:qwen2.5-omni-audio", "stage:audio-encoder"],
        # Exact for equal chunks, a lower bound otherwise: sum of len^2 >= total^2 / chunks.
        flops="4 * num_heads * head_dim * total_tokens * total_tokens // (len_cu_seqlens - 1)",
        bytes="4 * total_tokens * num_heads * head_dim * 2 + 4 * len_cu_seqlens",
    )
    smoke = torch.tensor([0, 16, 32, 39, 55, 58], dtype=torch.int32)
    b.workload(
        entry,
        "smoke-5chunks",
        axes={"total_tokens": 58, "len_cu_seqlens": 6},
        suites=["smoke"],
        tensors={"cu_seqlens": smoke},
        provenance="Hand-written chunk offsets: full, short and tiny chunks.",
    )
    clips = [
        ("dev-4clips-30s", [30.0] * 4, "4 clips of 30 s", ["dev"]),
        ("dev-16clips-mixed", _random_clips(16, 21), _RANDOM_CLIPS.format(16, 21), ["dev"]),
        ("all-64clips-mixed", _random_clips(64, 22), _RANDOM_CLIPS.format(64, 22), []),
    ]
    for label, seconds, clips_note, suites in clips:
        cu_seqlens = _audio_cu_seqlens(seconds)
        b.workload(
            entry,
            label,
            axes={"total_tokens": int(cu_seqlens[-1]), "len_cu_seqlens": len(cu_seqlens)},
            suites=suites,
            tensors={"cu_seqlens": cu_seqlens},
            provenance=(
                f"Synthetic audio batch: {clips_note}, 100 Hz mel frames cut into 200-frame"
                " chunks, ceil(frames / 2) tokens per chunk after the conv stem."
            ),
        )


def build(b: DatasetBuilder) -> None:
    _dense(b)
    _cached_prefix(b)
    _prefix_zero(b)
    _audio(b)
