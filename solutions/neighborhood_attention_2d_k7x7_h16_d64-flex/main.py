"""2D neighborhood attention, kernel 7x7 with FlexAttention: NATTEN's window rule as a mask_mod
over flattened tokens, and a per-shape BlockMask so only the key blocks near each query block
are computed.

See natten_flex.py for the mask rule, the BlockMask construction (in prepare; it depends only on
the spatial shape) and the tile choice.
"""

from natten_flex import NeighborhoodAttention

_ATTENTION = NeighborhoodAttention(kernel=(7, 7), dilation=(1, 1), head_dim=64)


def prepare(q, k, v):
    return _ATTENTION.prepare(q, k, v)


def run(q, k, v, prepared=None):
    return _ATTENTION.run(q, k, v, prepared)
