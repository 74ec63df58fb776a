"""TileLang QSA index (lightning-indexer) top-2048 selection: a TileLang scoring kernel, then an
exact top-k in plain torch ops on the GPU.

1. qsa_score (the TileLang program built by _score_program; compiled once per (heads, head_dim,
   page_size, device) at the first call, kept in _KERNELS; batch_size, num_pages and
   max_num_pages are symbolic, so every workload shares one compiled kernel).
   One program per (request b, group of PAGES_PER_PROGRAM pages), 128 threads (one warpgroup):
   q[b] (64 heads x 128, bf16) and weights[b] go to shared memory once; each page's 64 keys are
   gathered through page_table with cp.async into a 2-stage pipeline (T.Pipelined) and scored as
   one [64 tokens x 128] x [128 x 64 heads] T.gemm (bf16 operands, float32 accumulation: wgmma on
   sm_90a; the products are exact), then relu, times weights[b, h] and T.reduce_sum over heads in
   float32. score == 0 is written as +0.0 (-0.0 and +0.0 must tie) and positions >= seq_lens[b]
   as -inf, into a float32 [B, max_num_pages * 64] workspace. Programs wholly past seq_lens[b]
   only write -inf; in the last live group, pages past the row's end re-read its last live page
   (masked to -inf) so that the pipeline has a static trip count.
2. Selection in torch, no host sync: a stable descending torch.sort of each row (equal scores
   keep position order, so the lower position wins; torch.topk promises no order among ties),
   keep the first min(2048, max_len) positions, mark ranks >= seq_lens[b] with a sentinel, sort
   ascending, sentinel -> -1.

Layout: the definition's tensors are passed as they are (q [B, 64, 128] bf16, weights [B, 64]
f32, k_cache [P, 64, 128] bf16, page_table [B, M] i32, seq_lens [B] i32); no per-call copies
(.contiguous() is a no-op for the harness's contiguous inputs). Why it should be fast: the
K-cache gather (the indexer's real cost) is read once on tensor cores with all 64 heads per
page and overlapped with the next page's copy; only 4 B of score per token go to the sort.
"""

import tilelang
import tilelang.language as T
import torch

TOPK = 2048
PAGES_PER_PROGRAM = 4
NUM_STAGES = 2
THREADS = 128

# Compiled kernels, keyed by (num_heads, head_dim, page_size, device index).
_KERNELS: dict[tuple[int, int, int, int], tilelang.JITKernel] = {}


def _score_program(heads: int, dim: int, page_size: int):
    """TileLang program: scores[b, j] for every position j < max_num_pages * page_size."""
    batch = T.dynamic("batch_size")
    pages = T.dynamic("num_pages")
    max_pages = T.dynamic("max_num_pages")
    ppp = PAGES_PER_PROGRAM

    @T.prim_func
    def qsa_score(
        Q: T.Tensor((batch, heads, dim), T.bfloat16),
        W: T.Tensor((batch, heads), T.float32),
        KC: T.Tensor((pages, page_size, dim), T.bfloat16),
        PT: T.Tensor((batch, max_pages), T.int32),
        LENS: T.Tensor((batch,), T.int32),
        S: T.Tensor((batch, max_pages * page_size), T.float32),
    ):
        with T.Kernel(T.ceildiv(max_pages, ppp), batch, threads=THREADS) as (bx, by):
            q_s = T.alloc_shared((heads, dim), T.bfloat16)
            k_s = T.alloc_shared((page_size, dim), T.bfloat16)
            w_s = T.alloc_shared((heads,), T.float32)
            acc = T.alloc_fragment((page_size, heads), T.float32)
            score = T.alloc_fragment((page_size,), T.float32)
            length = LENS[by]
            first = bx * ppp
            last_live = T.ceildiv(length, page_size) - 1
            if first <= last_live:
                T.copy(Q[by, :, :], q_s)
                T.copy(W[by, :], w_s)
                for i in T.Pipelined(ppp, num_stages=NUM_STAGES):
                    T.copy(KC[PT[by, T.min(first + i, last_live)], :, :], k_s)
                    # acc[token, head] = key_token . q_head (float32 accumulation)
                    T.gemm(
                        k_s,
                        q_s,
                        acc,
                        transpose_B=True,
                        clear_accum=True,
                        policy=T.GemmWarpPolicy.FullRow,
                    )
                    for t, h in T.Parallel(page_size, heads):
                        acc[t, h] = T.max(acc[t, h], 0.0) * w_s[h]
                    T.reduce_sum(acc, score, dim=1, clear=True)
                    if first + i < max_pages:
                        for t in T.Parallel(page_size):
                            pos = (first + i) * page_size + t
                            S[by, pos] = T.if_then_else(
                                pos < length,
                                T.if_then_else(score[t] == 0.0, 0.0, score[t]),  # -0.0 -> +0.0
                                -T.infinity(T.float32),
                            )
            else:
                for i, t in T.Parallel(ppp, page_size):
                    if first + i < max_pages:
                        S[by, (first + i) * page_size + t] = -T.infinity(T.float32)

    return qsa_score


def _kernel(heads: int, dim: int, page_size: int, device: torch.device) -> tilelang.JITKernel:
    index = device.index if device.index is not None else torch.cuda.current_device()
    key = (heads, dim, page_size, index)
    kernel = _KERNELS.get(key)
    if kernel is None:
        # target "cuda": TileLang takes the arch from the current device (sm_90a on H100/H200)
        with torch.cuda.device(index):
            kernel = tilelang.compile(
                _score_program(heads, dim, page_size),
                target="cuda",
                pass_configs={tilelang.PassConfigKey.TL_DISABLE_WARP_SPECIALIZED: True},
            )
        _KERNELS[key] = kernel
    return kernel


def run(q, weights, k_cache, page_table, seq_lens):
    batch_size, num_heads, dim = q.shape
    num_pages, page_size = k_cache.shape[0], k_cache.shape[1]
    max_pages = page_table.shape[1]
    device = q.device
    max_len = max_pages * page_size
    if batch_size == 0 or max_len == 0 or num_pages == 0:  # then every row is empty
        return torch.full((batch_size, TOPK), -1, dtype=torch.int32, device=device)

    kernel = _kernel(num_heads, dim, page_size, device)
    scores = torch.empty((batch_size, max_len), dtype=torch.float32, device=device)
    kernel(
        q.contiguous(),
        weights.contiguous(),
        k_cache.contiguous(),
        page_table.contiguous(),
        seq_lens.contiguous(),
        scores,
    )

    k = min(TOPK, max_len)
    order = torch.sort(scores, dim=1, descending=True, stable=True).indices[:, :k]  # [B, k] int64
    ranks = torch.arange(k, device=device).unsqueeze(0)
    chosen = order.masked_fill(ranks >= seq_lens.unsqueeze(1), max_len)  # past the row's length
    chosen = torch.sort(chosen, dim=1).values
    chosen = chosen.masked_fill(chosen == max_len, -1).to(torch.int32)
    if k == TOPK:
        return chosen
    out = torch.full((batch_size, TOPK), -1, dtype=torch.int32, device=device)
    out[:, :k] = chosen
    return out
