"""1D neighborhood attention (NATTEN na1d), kernel 13, dilation 1.

Inputs (bfloat16), NATTEN's heads-last layout:
  q, k, v: [batch, seq_len, num_heads = 8, head_dim = 64].
Output (bfloat16):
  o: same shape and layout as q.

Non-causal neighborhood attention with kernel size KERNEL = (13,) and dilation
DILATION = (1,) per spatial axis (constants of this definition, not inputs). Each query attends
to the keys of its neighborhood only, separately for every batch element and head.

Neighborhood along one spatial axis of length L, kernel size n (odd) and dilation d, for the
query at position i: positions split into d dilation groups by i mod d; the group of i is
g = i mod d, holding positions g, g + d, g + 2d, ... (L_g = ceil((L - g) / d) of them), and i is
element i // d of it. The window is n consecutive group elements starting at
  start = min(max(i // d - n // 2, 0), L_g - n)
so it is centred on i where possible and shifted to stay inside the map at the borders; the key
positions are (start + t) * d + g for t = 0 .. n-1. (This is NATTEN's window rule; it needs
L >= n * d, so that every group has at least n elements.) The neighborhood of a query in several
dimensions is the Cartesian product of its per-axis windows: prod(KERNEL) keys.

For a query at spatial position x with neighborhood N(x), and every head h:
  s[x, y] = scale * sum_e q[x, h, e] * k[y, h, e]  for y in N(x)     scale = 1 / sqrt(64)
  p[x, :] = softmax over y in N(x) of s[x, :]
  o[x, h, :] = sum_{y in N(x)} p[x, y] * v[y, h, :]

The reference computes in float32 and rounds to bfloat16 once at the end. It loops over the
prod(KERNEL) window offsets, gathering one key (and value) per query at a time, so its memory
stays at a few copies of q.
"""

import math

import torch

KERNEL = (13,)
DILATION = (1,)
HEAD_DIM = 64
SCALE = 1.0 / math.sqrt(HEAD_DIM)


def _axis_neighbors(length: int, kernel: int, dilation: int, device: torch.device) -> torch.Tensor:
    """[length, kernel] key positions of the window of every query position along one axis."""
    pos = torch.arange(length, device=device)
    group = pos % dilation
    group_len = (length - group + dilation - 1) // dilation
    start = torch.clamp(pos // dilation - kernel // 2, min=0)
    start = torch.minimum(start, group_len - kernel)
    offsets = torch.arange(kernel, device=device)
    return (start[:, None] + offsets[None, :]) * dilation + group[:, None]


def _neighbors(spatial: list[int], device: torch.device) -> torch.Tensor:
    """[num_positions, window] flat (row-major) key positions of every flat query position."""
    flat = torch.zeros(1, 1, dtype=torch.int64, device=device)
    for length, kernel, dilation in zip(spatial, KERNEL, DILATION, strict=True):
        axis = _axis_neighbors(length, kernel, dilation, device)
        # Append one axis: positions and window offsets both stay row-major.
        flat = flat[:, None, :, None] * length + axis[None, :, None, :]
        flat = flat.reshape(flat.shape[0] * flat.shape[1], -1)
    return flat


def run(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    batch, *spatial, heads, dim = q.shape
    nbr = _neighbors(spatial, q.device)  # [positions, window]
    qf = q.reshape(batch, -1, heads, dim).float()
    kf = k.reshape(batch, -1, heads, dim).float()
    vf = v.reshape(batch, -1, heads, dim).float()
    window = nbr.shape[1]
    scores = torch.empty(batch, qf.shape[1], heads, window, device=q.device)
    for t in range(window):
        scores[..., t] = (qf * kf[:, nbr[:, t]]).sum(dim=-1) * SCALE
    probs = torch.softmax(scores, dim=-1)
    out = torch.zeros_like(qf)
    for t in range(window):
        out += probs[..., t, None] * vf[:, nbr[:, t]]
    return out.reshape(q.shape).to(torch.bfloat16)
