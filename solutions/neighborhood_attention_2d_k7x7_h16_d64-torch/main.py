"""Plain PyTorch baseline: 2D neighborhood attention (kernel 7x7).

Computed as tiled dense attention over gathered key blocks. A full [tokens, tokens] boolean mask
would make SDPA do hundreds of times the useful work (and take GBs at video sizes), so instead
the map is cut into query tiles (TILE per axis, counted in positions of one dilation group) and
each tile attends densely to the smallest block of keys that holds every window of its queries
(tile + kernel - 1 per axis, shifted inward at the borders like the windows themselves):
  here tiles of 8x8 queries, key blocks of 14x14.
Each query's own window inside its block is selected by an additive 0 / -inf bias. One call is:
gather the tile queries and key/value blocks (index_select), one bf16
torch.nn.functional.scaled_dot_product_attention with all tiles as the batch dimension (with a
mask, the memory-efficient backend on CUDA), and a gather back to token order.

The tile/block indices and the bias depend only on the map shape: prepare() builds them once
(reported separately by the harness); run() rebuilds them if called without `prepared`.
Tiles at the end of an axis are shifted back to stay inside the map, so a few queries are
computed twice; the final gather reads one copy.
"""

import math

import torch
import torch.nn.functional as F

KERNEL = (7, 7)
DILATION = (1, 1)
TILE = (8, 8)  # query tile per axis, in positions of one dilation group
SCALE = 1.0 / math.sqrt(64)


def _axis_tiles(length, kernel, dilation, tile):
    """Tiles along one axis: query positions [n, tq], key positions [n, tk], visible [n, tq, tk]."""
    group_lens = [(length - g + dilation - 1) // dilation for g in range(dilation)]
    tq = max(1, min(tile, min(group_lens) - kernel + 1))  # so that a key block fits every group
    tk = tq + kernel - 1
    q_rows, k_rows = [], []
    for g, group_len in enumerate(group_lens):
        for first in range(0, group_len, tq):
            first = min(first, group_len - tq)
            window_start = min(max(first - kernel // 2, 0), group_len - kernel)
            block_start = min(window_start, group_len - tk)
            q_rows.append([(first + t) * dilation + g for t in range(tq)])
            k_rows.append([(block_start + t) * dilation + g for t in range(tk)])
    q_pos = torch.tensor(q_rows, dtype=torch.long)
    k_pos = torch.tensor(k_rows, dtype=torch.long)
    # NATTEN window of every query, in group coordinates (keys of a tile share its group).
    group_len = torch.tensor(group_lens, dtype=torch.long)[q_pos % dilation]
    start = torch.clamp(q_pos // dilation - kernel // 2, min=0)
    start = torch.minimum(start, group_len - kernel)[:, :, None]
    key = (k_pos // dilation)[:, None, :]
    visible = (key >= start) & (key < start + kernel)
    return q_pos, k_pos, visible


def prepare(q, k, v):
    """Shape-only plan: flat query/key indices per tile, the bias, and the inverse query map."""
    batch, *spatial, _, _ = q.shape
    q_idx = torch.zeros(1, 1, dtype=torch.long)
    k_idx = torch.zeros(1, 1, dtype=torch.long)
    visible = torch.ones(1, 1, 1, dtype=torch.bool)
    for length, kernel, dilation, tile in zip(spatial, KERNEL, DILATION, TILE, strict=True):
        qa, ka, va = _axis_tiles(length, kernel, dilation, tile)
        n = q_idx.shape[0] * qa.shape[0]
        # Append one axis to the tiles (Cartesian product), keeping positions row-major.
        q_idx = (q_idx[:, None, :, None] * length + qa[None, :, None, :]).reshape(n, -1)
        k_idx = (k_idx[:, None, :, None] * length + ka[None, :, None, :]).reshape(n, -1)
        visible = visible[:, None, :, None, :, None] & va[None, :, None, :, None, :]
        visible = visible.reshape(n, q_idx.shape[1], k_idx.shape[1])
    n_tiles, tq = q_idx.shape
    tk = k_idx.shape[1]
    positions = math.prod(spatial)
    inverse = torch.empty(positions, dtype=torch.long)
    inverse[q_idx.reshape(-1)] = torch.arange(n_tiles * tq)  # any copy of a repeated query
    # Additive bias in q's dtype, one per (batch, tile), its rows padded to a multiple of 16
    # elements (the memory-efficient kernel's alignment) and sliced back, so SDPA uses it as is.
    padded = (tk + 15) // 16 * 16
    bias = torch.full((batch * n_tiles, 1, tq, padded), float("-inf"), dtype=q.dtype)
    bias[..., :tk].masked_fill_(visible.repeat(batch, 1, 1)[:, None], 0.0)
    device = q.device
    return (
        q_idx.reshape(-1).to(device),
        k_idx.reshape(-1).to(device),
        bias.to(device)[..., :tk],
        inverse.to(device),
    )


def run(q, k, v, prepared=None):
    if prepared is None:
        prepared = prepare(q, k, v)
    q_idx, k_idx, bias, inverse = prepared
    batch, heads, dim = q.shape[0], q.shape[-2], q.shape[-1]
    tiles = bias.shape[0]  # batch * tiles per map
    tq, tk = bias.shape[-2], bias.shape[-1]

    def gather(x, idx, rows):  # [batch, positions, heads, dim] -> [batch * tiles, heads, rows, dim]
        x = x.reshape(batch, -1, heads, dim).index_select(1, idx)
        return x.view(tiles, rows, heads, dim).transpose(1, 2)

    qt, kt, vt = gather(q, q_idx, tq), gather(k, k_idx, tk), gather(v, k_idx, tk)
    o = F.scaled_dot_product_attention(qt, kt, vt, attn_mask=bias, scale=SCALE)
    o = o.transpose(1, 2).reshape(batch, -1, heads, dim).index_select(1, inverse)
    return o.view(q.shape)
