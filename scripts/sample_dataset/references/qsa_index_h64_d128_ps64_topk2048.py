"""QSA index: score every cached key of a request, keep the top 2048 token positions.

Lightning-indexer style (DeepSeek-V3.2): one decode query per request with 64 indexer heads.
Shapes (B = batch_size, P = num_pages, M = max_num_pages):
    q          [B, 64, 128] bf16      indexer query, 64 heads of dim 128
    weights    [B, 64] float32        per-head weights (may be negative or zero)
    k_cache    [P, 64, 128] bf16      paged indexer keys: page p holds 64 tokens, one key each
                                      (a single key head shared by all indexer heads)
    page_table [B, M] int32           row b's pages in token order; entries from
                                      ceil(seq_lens[b] / 64) on are -1 (padding)
    seq_lens   [B] int32              number of live tokens of row b (may be 0)
Output: topk_indices [B, 2048] int32.

Token position j (0 <= j < seq_lens[b]) of row b has key
    key_j = k_cache[page_table[b, j // 64], j % 64]
and score (float32 throughout; q and keys widened from bf16; -0.0 counts as equal to +0.0)
    score[b, j] = sum_h weights[b, h] * relu(dot(q[b, h], key_j)).
topk_indices[b] holds the row-local POSITIONS j (not cache slots) of the min(2048, seq_lens[b])
highest scores; among equal scores the lower position wins. The chosen positions are written
in ascending order, and the remaining entries of the row are -1 (so an empty row is all -1).
"""

import torch

TOPK = 2048


def _row_topk(q_row, w_row, k_cache, pages, length):
    """Positions of the top min(TOPK, length) scores of one row, ascending."""
    page_size, dim = k_cache.shape[1], k_cache.shape[2]
    num_live_pages = (length + page_size - 1) // page_size
    live = pages[:num_live_pages].long()
    keys = k_cache[live].reshape(num_live_pages * page_size, dim)[:length].float()  # [L, D]
    dots = q_row.float() @ keys.T  # [H, L]
    scores = (w_row.float().unsqueeze(-1) * torch.relu(dots)).sum(dim=0) + 0.0  # -0.0 -> +0.0
    # A stable descending sort keeps equal scores in position order, so lower positions win.
    order = torch.sort(scores, descending=True, stable=True).indices[: min(TOPK, length)]
    return torch.sort(order).values


def run(q, weights, k_cache, page_table, seq_lens):
    batch_size = q.shape[0]
    out = torch.full((batch_size, TOPK), -1, dtype=torch.int32, device=q.device)
    for b in range(batch_size):
        length = int(seq_lens[b])
        if length == 0:
            continue
        chosen = _row_topk(q[b], weights[b], k_cache, page_table[b], length)
        out[b, : chosen.numel()] = chosen.to(torch.int32)
    return out
