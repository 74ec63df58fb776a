"""Block-causal text/image attention with FlexAttention (torch.compile'd), GQA 16/8, head dim 256.

The mask "j <= i, or i and j lie in the same image segment" is a prefix mask: an image token
sees everything before its segment plus the whole segment, i.e. keys 0 .. last(segment), and a
text token sees keys 0 .. i. So each query row i has one limit

    lim[b, i] = last position of i's image segment   (image token)
              = i                                     (text token)

and the mask_mod is simply `kv_idx <= lim[b, q_idx]` (one load per query row, nothing per key).
Segments are contiguous runs within a row (the definition's constraints), so lim comes from a
reversed running minimum over the positions where a run ends.

The BlockMask is built from lim per call (image_ids is an input, so this is inside the timed
call), without evaluating the mask over all S x S pairs: for a 128-row query block the visible
key blocks are 0 .. max(lim) // 128, of which the first min(lim + 1) // 128 are entirely
visible ("full": no mask_mod) and the rest are partial. Both lists are plain aranges offset per
row. The limit and block-count tensors come from one small torch.compile'd function, so the
timed call is a few fused kernels plus the flex kernel (Triton template; head dim 256 runs with
BLOCK_M=64, BLOCK_N=32, the H100 default for bf16 d=256, passed explicitly so it fits shared
memory on any sm_90 part).
"""

import inspect
import math

import torch
from torch.nn.attention.flex_attention import BlockMask, flex_attention

HEAD_DIM = 256
SCALE = 1.0 / math.sqrt(HEAD_DIM)
Q_BLOCK = 128  # BlockMask tile (rows)
KV_BLOCK = 128  # BlockMask tile (columns)
KERNEL_OPTIONS = {"BLOCK_M": 64, "BLOCK_N": 32, "num_warps": 4, "num_stages": 3}

_FROM_KV_BLOCKS_HAS_Q_FLAG = (
    "compute_q_blocks" in inspect.signature(BlockMask.from_kv_blocks).parameters
)


def _mask_tensors(image_ids: torch.Tensor):
    """Per-row key limits and the block lists of the BlockMask (all shape-static)."""
    batch, seq = image_ids.shape
    n_qb = (seq + Q_BLOCK - 1) // Q_BLOCK
    n_kb = (seq + KV_BLOCK - 1) // KV_BLOCK
    ids = image_ids.to(torch.int64)
    pos = torch.arange(seq, device=ids.device, dtype=torch.int64).expand(batch, seq)
    is_img = ids >= 0
    nxt = torch.cat([ids[:, 1:], torch.full_like(ids[:, :1], -2)], dim=1)
    run_end = is_img & (nxt != ids)
    end_pos = torch.where(run_end, pos, seq)
    seg_last = torch.flip(torch.cummin(torch.flip(end_pos, [1]), dim=1).values, [1])
    lim = torch.where(is_img, seg_last, pos)  # [B, S], lim >= pos

    pad = n_qb * Q_BLOCK - seq
    lim_max = torch.nn.functional.pad(lim, (0, pad), value=-1).view(batch, n_qb, Q_BLOCK)
    lim_min = torch.nn.functional.pad(lim, (0, pad), value=seq).view(batch, n_qb, Q_BLOCK)
    n_any = lim_max.amax(dim=-1) // KV_BLOCK + 1
    # A key block is full when every row of the query block sees all of it; the last,
    # ragged key block is always left partial so the kernel's boundary handling applies.
    n_full = torch.clamp((lim_min.amin(dim=-1) + 1) // KV_BLOCK, max=seq // KV_BLOCK)
    n_part = n_any - n_full
    cols = torch.arange(n_kb, device=ids.device, dtype=torch.int64)
    full_idx = cols.expand(batch, n_qb, n_kb)
    part_idx = torch.clamp(cols + n_full[..., None], max=n_kb - 1)
    # Limits for the mask_mod, padded so padded query rows of the last block index safely.
    lim_lookup = torch.nn.functional.pad(lim, (0, pad), value=seq - 1)

    def as_i32(t):  # [B, ...] -> contiguous int32 [B, 1, ...] (one mask for all heads)
        return t.to(torch.int32).unsqueeze(1).contiguous()

    return (
        lim_lookup.to(torch.int32).contiguous(),
        as_i32(n_part),
        as_i32(part_idx),
        as_i32(n_full),
        as_i32(full_idx),
    )


_mask_tensors_compiled = torch.compile(_mask_tensors, dynamic=False)


def _attend(q, k, v, block_mask):
    return flex_attention(
        q,
        k,
        v,
        block_mask=block_mask,
        scale=SCALE,
        enable_gqa=True,
        kernel_options=KERNEL_OPTIONS if q.is_cuda else None,
    )


_attend_compiled = torch.compile(_attend, dynamic=False, fullgraph=True)


def _block_mask(image_ids: torch.Tensor) -> BlockMask:
    seq = image_ids.shape[1]
    lim, n_part, part_idx, n_full, full_idx = _mask_tensors_compiled(image_ids)

    def mask_mod(b, h, q_idx, kv_idx):
        return kv_idx <= lim[b, q_idx]

    extra = {"compute_q_blocks": False} if _FROM_KV_BLOCKS_HAS_Q_FLAG else {}
    return BlockMask.from_kv_blocks(
        n_part,
        part_idx,
        n_full,
        full_idx,
        BLOCK_SIZE=(Q_BLOCK, KV_BLOCK),
        mask_mod=mask_mod,
        seq_lengths=(seq, seq),
        **extra,
    )


def run(q, k, v, image_ids):
    block_mask = _block_mask(image_ids)
    # [B, S, H, D] -> [B, H, S, D] views; flex writes its output in q's stride order, so the
    # transpose back is contiguous.
    out = _attend_compiled(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), block_mask)
    return out.transpose(1, 2).contiguous()
