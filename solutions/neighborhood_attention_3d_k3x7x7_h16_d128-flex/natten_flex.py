"""Neighborhood attention (NATTEN window rule) on FlexAttention, for 1, 2 and 3 spatial axes.

Shared by the neighborhood_attention_*-flex solutions (each folder carries an identical copy;
its main.py fixes KERNEL, DILATION and HEAD_DIM).

Tokens are flattened row-major, so q/k/v [B, *spatial, heads, dim] are viewed (no copy) as
[B, heads, N, dim]. The mask_mod decodes a flat index into per-axis coordinates and applies
NATTEN's rule on every axis: with group g = i mod d, group length L_g = ceil((L - g) / d) and
window start s = min(max(i // d - n // 2, 0), L_g - n), query i sees key j iff
j mod d == g and s <= j // d < s + n. Query-only terms are computed once per row of a tile.

The BlockMask depends only on the spatial shape, so it is built once per shape (in prepare,
cached in a module dict) from the explicit neighbour table: a (query block, key block) pair is
listed iff some query of the block has a neighbour in the key block. No pair is ever fully
visible (a window is far smaller than a tile), so every listed block is partial. The tile size
is chosen per shape among 128x128, 128x64 and 64x64 by the number of key columns each query
row ends up computing, weighted by a rough per-tile efficiency, since the flattened windows
cover tiles very differently for different widths and dilations.
"""

import math

import torch
from torch.nn.attention.flex_attention import BlockMask, flex_attention

# (Q tile, KV tile) -> relative cost per computed score (smaller tiles use the tensor cores
# less efficiently); a rough model, used only to rank the candidates.
TILE_COSTS = {(128, 128): 1.0, (128, 64): 1.1, (64, 64): 1.25}


def kernel_options(tile: tuple[int, int], head_dim: int) -> dict | None:
    """Triton kernel tiles matching the BlockMask tile (None: torch's own default)."""
    if tile == (128, 128):
        return None  # the default H100 configs (128x128 for d=64, 128x64 for d=128) fit
    if tile == (128, 64):
        warps = 4 if head_dim <= 64 else 8
        return {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": warps, "num_stages": 3}
    return {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 3}


def axis_neighbors(length: int, kernel: int, dilation: int, device) -> torch.Tensor:
    """[length, kernel] key coordinates of every query coordinate along one axis."""
    pos = torch.arange(length, device=device)
    group = pos % dilation
    group_len = (length - group + dilation - 1) // dilation
    start = torch.minimum(torch.clamp(pos // dilation - kernel // 2, min=0), group_len - kernel)
    return (start[:, None] + torch.arange(kernel, device=device)) * dilation + group[:, None]


def neighbor_table(spatial, kernel, dilation, device) -> torch.Tensor:
    """[N, prod(kernel)] flat key positions of every flat query position."""
    table = torch.zeros(1, 1, dtype=torch.int64, device=device)
    for length, n, d in zip(spatial, kernel, dilation, strict=True):
        axis = axis_neighbors(length, n, d, device)
        table = table[:, None, :, None] * length + axis[None, :, None, :]
        table = table.reshape(table.shape[0] * table.shape[1], -1)
    return table


def make_mask_mod(spatial, kernel, dilation):
    """mask_mod(b, h, q_idx, kv_idx) implementing the window rule on flattened indices."""
    axes = list(zip(spatial, kernel, dilation, strict=True))

    def mask_mod(b, h, q_idx, kv_idx):
        visible = None
        q_rest, kv_rest = q_idx, kv_idx
        for axis, (length, n, d) in enumerate(reversed(axes)):
            last = axis == len(axes) - 1  # the outermost axis needs no modulo
            qi = q_rest if last else q_rest % length
            ki = kv_rest if last else kv_rest % length
            if not last:
                q_rest, kv_rest = q_rest // length, kv_rest // length
            if d == 1:
                start = torch.clamp(qi - n // 2, min=0, max=length - n)
                ok = (ki >= start) & (ki < start + n)
            else:
                g = qi % d
                group_len = (length - g + d - 1) // d
                start = torch.minimum(torch.clamp(qi // d - n // 2, min=0), group_len - n)
                kq = ki // d
                ok = (ki % d == g) & (kq >= start) & (kq < start + n)
            visible = ok if visible is None else visible & ok
        return visible

    return mask_mod


def _tile_blocks(table: torch.Tensor, tile) -> torch.Tensor:
    """[n_qb, n_kb] bool: key blocks touched by each query block."""
    n = table.shape[0]
    bq, bk = tile
    touched = torch.zeros(
        (n + bq - 1) // bq, (n + bk - 1) // bk, dtype=torch.bool, device=table.device
    )
    rows = (torch.arange(n, device=table.device) // bq)[:, None].expand_as(table)
    touched[rows, table // bk] = True
    return touched


def build_block_mask(spatial, kernel, dilation, device):
    """(BlockMask, tile) for one spatial shape."""
    table = neighbor_table(spatial, kernel, dilation, device)
    n = table.shape[0]
    best = None
    for tile, cost in TILE_COSTS.items():
        touched = _tile_blocks(table, tile)
        score = float(touched.sum()) * tile[0] * tile[1] * cost
        if best is None or score < best[0]:
            best = (score, tile, touched)
    _, tile, touched = best
    num = touched.sum(dim=-1).to(torch.int32)
    # Listed blocks first, in increasing order (a stable sort of the 0/1 rows).
    order = torch.sort(touched.to(torch.int8), dim=-1, descending=True, stable=True).indices
    # from_kv_blocks also derives the transposed (backward) lists: unused here, but this runs
    # once per shape outside the timed call and is the form every torch version accepts.
    block_mask = BlockMask.from_kv_blocks(
        num[None, None].contiguous(),
        order.to(torch.int32)[None, None].contiguous(),
        BLOCK_SIZE=tile,
        mask_mod=make_mask_mod(spatial, kernel, dilation),
        seq_lengths=(n, n),
    )
    return block_mask, tile


def _flex(q, k, v, block_mask, scale, options):
    return flex_attention(q, k, v, block_mask=block_mask, scale=scale, kernel_options=options)


_flex_compiled = torch.compile(_flex, dynamic=False, fullgraph=True)


class NeighborhoodAttention:
    """Callable run/prepare pair for one (kernel, dilation, head_dim) definition."""

    def __init__(self, kernel, dilation, head_dim):
        self.kernel = tuple(kernel)
        self.dilation = tuple(dilation)
        self.head_dim = head_dim
        self.scale = 1.0 / math.sqrt(head_dim)
        self._cache = {}

    def prepare(self, q, k, v):
        spatial = tuple(q.shape[1:-2])
        key = (spatial, str(q.device))
        if key not in self._cache:
            self._cache[key] = build_block_mask(spatial, self.kernel, self.dilation, q.device)
        return self._cache[key]

    def run(self, q, k, v, prepared=None):
        block_mask, tile = prepared if prepared is not None else self.prepare(q, k, v)
        batch, heads, dim = q.shape[0], q.shape[-2], q.shape[-1]
        # [B, *spatial, H, D] -> [B, H, N, D] views; the output keeps q's stride order, so
        # the way back is a free view.
        qf, kf, vf = (t.reshape(batch, -1, heads, dim).transpose(1, 2) for t in (q, k, v))
        options = kernel_options(tile, self.head_dim) if q.is_cuda else None
        out = _flex_compiled(qf, kf, vf, block_mask, self.scale, options)
        return out.transpose(1, 2).reshape(q.shape)
