"""FlashAttention 4 (flash-attn-4 4.0.0b35, CuTe DSL): block-causal text/image attention,
GQA 16/8, head dim 256, through FA4's FlexAttention-style mask_mod plus block sparsity.

The mask "j <= i, or i and j lie in the same image segment" is a per-row key limit: an image
token sees everything before its segment plus the whole segment (keys 0 .. last(segment)), a
text token sees keys 0 .. i. So with

    lim[b, i] = last position of i's image segment   (image token)
              = i                                     (text token)

query i may attend key j exactly when j <= lim[b, i]. Segments are contiguous runs inside one
row (the definition's constraints), so lim comes from a reversed running minimum over the
positions where a run ends; lim is non-decreasing along a row and lim[b, i] >= i.

Library call (flash_attn/cute/interface.py):
    out, _ = flash_attn.cute.flash_attn_func(
        q, k, v, softmax_scale=1/16, causal=False,
        mask_mod=_visible, aux_tensors=[lim],
        block_sparse_tensors=BlockSparseTensorsTorch(...block_size=(128, 80)))

  * q [B, S, 16, 256], k/v [B, S, 8, 256] are FA4's layout as given; query head h reads KV
    head h // 2 (FA4's GQA mapping, PackGQA on), as in the definition. Output [B, S, 16, 256].
  * _visible is a CuTe-DSL mask_mod (signature of flash_attn.cute.mask.call_mask_mod): one
    load of lim[b, q] per score, `kv <= lim`. lim is padded by 128 columns per row so the
    kernel's padded query rows (beyond S, discarded) still read inside the tensor.
  * Block sparsity (the same format as a FlexAttention BlockMask: partial-block and full-block
    counts and ascending index lists, [B, 1, M, N] int32, one mask for all heads) is built from
    lim for 128-query x 80-key blocks, the SM90 forward tile for head dim 256 (128 x 80,
    interface._tile_size_fwd_sm90; SM90 block sparsity needs the KV block to equal tile_n).
    Because lim is non-decreasing, a query block [r0, r1] sees key blocks
    0 .. lim[r1] // 80, of which the first (lim[r0] + 1) // 80 are fully visible (run without
    mask_mod) and the rest are partial (mask_mod applied). Invisible blocks are never loaded, so
    the work is about that of causal attention. The ragged last key block, when visible, is
    always the highest listed block, which the kernel processes first with sequence-length
    masking.

Per call (timed): lim and the block lists, about twenty small elementwise/scan kernels over
[B, S] and [B, M, N], no host synchronisation, then the FA4 kernel. SM90 only: the block size
above is tied to the SM90 tile choice.
"""

import math

import cutlass
import cutlass.cute as cute
import torch
from flash_attn.cute import flash_attn_func
from flash_attn.cute import utils as fa_utils
from flash_attn.cute.block_sparsity import BlockSparseTensorsTorch

HEAD_DIM = 256
SCALE = 1.0 / math.sqrt(HEAD_DIM)
BLOCK_M = 128  # SM90 forward tile_m for head dim 256 (query positions per sparse block)
BLOCK_N = 80  # SM90 forward tile_n for head dim 256 (keys per sparse block)
LIM_PAD = 128  # padded query rows of the last tile read lim up to index S + 63


@cute.jit
def _visible(batch, head, q_idx, kv_idx, seqlen_info, aux_tensors):
    lim = aux_tensors[0]
    q_lim = fa_utils.scalar_to_ssa(lim[batch[0], q_idx[0]], cutlass.Int32)
    return kv_idx <= q_lim


def _key_limits(image_ids: torch.Tensor) -> torch.Tensor:
    """lim[b, i]: the last key position query i may attend (int64, [B, S])."""
    batch, seq = image_ids.shape
    ids = image_ids.to(torch.int64)
    pos = torch.arange(seq, device=ids.device, dtype=torch.int64).expand(batch, seq)
    is_img = ids >= 0
    nxt = torch.cat([ids[:, 1:], torch.full_like(ids[:, :1], -2)], dim=1)
    run_end = is_img & (nxt != ids)
    end_pos = torch.where(run_end, pos, seq)
    seg_last = torch.flip(torch.cummin(torch.flip(end_pos, [1]), dim=1).values, [1])
    return torch.where(is_img, seg_last, pos)


def _block_sparsity(lim: torch.Tensor) -> BlockSparseTensorsTorch:
    batch, seq = lim.shape
    n_qb = (seq + BLOCK_M - 1) // BLOCK_M
    n_kb = (seq + BLOCK_N - 1) // BLOCK_N
    first = torch.arange(n_qb, device=lim.device) * BLOCK_M
    last = torch.clamp(first + BLOCK_M - 1, max=seq - 1)
    n_any = lim[:, last] // BLOCK_N + 1  # [B, M]: key blocks touched by any row
    n_full = (lim[:, first] + 1) // BLOCK_N  # [B, M]: key blocks seen whole by every row
    cols = torch.arange(n_kb, device=lim.device)
    part_idx = torch.clamp(n_full[..., None] + cols, max=n_kb - 1)
    full_idx = cols.expand(batch, n_qb, n_kb)

    def as_i32(t: torch.Tensor) -> torch.Tensor:  # [B, ...] -> contiguous int32 [B, 1, ...]
        return t.to(torch.int32).unsqueeze(1).contiguous()

    return BlockSparseTensorsTorch(
        mask_block_cnt=as_i32(n_any - n_full),
        mask_block_idx=as_i32(part_idx),
        full_block_cnt=as_i32(n_full),
        full_block_idx=as_i32(full_idx),
        block_size=(BLOCK_M, BLOCK_N),
    )


def run(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, image_ids: torch.Tensor) -> torch.Tensor:
    seq = q.shape[1]
    lim = _key_limits(image_ids)
    lim_lookup = torch.nn.functional.pad(lim, (0, LIM_PAD), value=seq - 1).to(torch.int32)
    out, _ = flash_attn_func(
        q,
        k,
        v,
        softmax_scale=SCALE,
        causal=False,
        mask_mod=_visible,
        aux_tensors=[lim_lookup],
        block_sparse_tensors=_block_sparsity(lim),
    )
    return out
