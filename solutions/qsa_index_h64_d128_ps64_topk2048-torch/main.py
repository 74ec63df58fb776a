"""Plain PyTorch baseline: QSA / lightning-indexer top-2048 selection, batched over requests.

1. Gather every request's keys through its page table in one indexing op (padding pages -1 are
   clamped to page 0 and masked later): keys [B, max_pages * 64, 128], widened to float32.
2. Scores in float32: dots = q @ keys^T per head (batched GEMM), relu, then the per-head
   weighted sum as a second batched GEMM: score[b, j] = sum_h weights[b, h] * relu(dots).
   Positions j >= seq_lens[b] get -inf; adding +0.0 turns -0.0 into +0.0 so that a radix sort
   on the GPU does not order -0.0 below +0.0.
3. Top-k by a stable descending sort over each row (equal scores keep position order, so the
   lower position wins; torch.topk promises no order among ties and integer scores tie often),
   keep the first min(2048, seq_lens[b]) positions, sort them ascending and pad with -1.
"""

import torch

TOPK = 2048


def run(q, weights, k_cache, page_table, seq_lens):
    batch_size = q.shape[0]
    page_size, dim = k_cache.shape[1], k_cache.shape[2]
    max_len = page_table.shape[1] * page_size
    device = q.device

    pages = page_table.long().clamp(min=0)  # [B, M]
    keys = k_cache[pages].reshape(batch_size, max_len, dim).float()  # [B, L, D]
    dots = torch.bmm(q.float(), keys.transpose(1, 2))  # [B, H, L]
    scores = torch.bmm(weights.float().unsqueeze(1), torch.relu(dots)).squeeze(1)  # [B, L]

    lengths = seq_lens.long().unsqueeze(1)  # [B, 1]
    positions = torch.arange(max_len, device=device).unsqueeze(0)  # [1, L]
    scores = scores.masked_fill(positions >= lengths, float("-inf")) + 0.0

    k = min(TOPK, max_len)
    order = torch.sort(scores, dim=1, descending=True, stable=True).indices[:, :k]  # [B, k]
    ranks = torch.arange(k, device=device).unsqueeze(0)
    chosen = order.masked_fill(ranks >= lengths, max_len)  # past the row's length: sentinel
    chosen = torch.sort(chosen, dim=1).values
    chosen = chosen.masked_fill(chosen == max_len, -1)

    out = torch.full((batch_size, TOPK), -1, dtype=torch.int32, device=device)
    out[:, :k] = chosen.to(torch.int32)
    return out
