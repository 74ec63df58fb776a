"""Gated DeltaNet (gated delta rule) decode and prefill, k-last state layout.

The shapes are one tensor-parallel slice (TP=4) of Qwen3-Next-80B-A3B's linear-attention
layers: 4 q/k heads and 8 value heads (grouped value attention, each q/k head serves two
value heads), head dim 128 for keys and values, and a float32 128 x 128 state per value head
stored [V, K] ("k-last"), as FlashInfer's GDN kernels keep it. The gates arrive precomputed
(g in log space, beta in (0, 1)) and Q/K L2 normalisation is not part of the operator, as in
the contest configuration of those kernels. Decode batches span 1..256 sequences; prefill
packs up to 8192 tokens of variable-length sequences.

Random inputs are drawn so that the recurrence is well behaved: k has std 1/sqrt(128) (so
|k| is about 1, as after L2 normalisation, which keeps the delta rule contractive for beta < 1),
q has unit std (equivalent to a normalised q scaled by sqrt(128), which keeps `o` large enough
for a bf16 tolerance to mean something), and states start near the magnitude the recurrence
settles at (std about 0.08).
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import torch

from scripts.sample_dataset.builder import DatasetBuilder, DefinitionEntry

SCALE = 1.0 / math.sqrt(128)
NUM_QK_HEADS = 4
NUM_V_HEADS = 8
HEAD = 128
TAGS = ["family:gdn", "model:qwen3-next-80b-a3b", "tp:4"]

# Random-input rules shared by decode and prefill (see the module docstring).
K_INIT = {"dist": "normal", "mean": 0.0, "std": 0.0884}  # |k| ~ 1
G_INIT = {"dist": "uniform", "low": -0.5, "high": 0.0}  # per-step decay exp(g) in (0.61, 1]
BETA_INIT = {"dist": "uniform", "low": 0.01, "high": 0.99}
STATE_INIT = {"dist": "normal", "mean": 0.0, "std": 0.1}
GATE_CONSTRAINTS = ["(g <= 0).all()", "(beta > 0).all() and (beta < 1).all()"]
# --scale-probe: q, v and the state scale the outputs; k stays near unit norm (std 1/sqrt(128)),
# or the delta rule's (I - beta k k^T) stops contracting and the reference itself diverges.
SCALE_PROBE_INPUTS = ["q", "v"]


def _token_inputs(tokens: str) -> dict[str, dict[str, object]]:
    return {
        "q": {
            "shape": [tokens, "num_q_heads", "head_size"],
            "dtype": "bfloat16",
            "init": {"dist": "normal", "mean": 0.0, "std": 1.0},
            "description": "Queries, used as given (no L2 normalisation inside the kernel).",
        },
        "k": {
            "shape": [tokens, "num_k_heads", "head_size"],
            "dtype": "bfloat16",
            "init": K_INIT,
            "description": "Keys, used as given (no L2 normalisation inside the kernel).",
        },
        "v": {
            "shape": [tokens, "num_v_heads", "head_size"],
            "dtype": "bfloat16",
            "description": "Values; value head h reads q/k head h // 2.",
        },
        "g": {
            "shape": [tokens, "num_v_heads"],
            "dtype": "float32",
            "init": G_INIT,
            "description": "Log-space decay gate (<= 0): the state is multiplied by exp(g).",
        },
        "beta": {
            "shape": [tokens, "num_v_heads"],
            "dtype": "float32",
            "init": BETA_INIT,
            "description": "Delta-rule write strength in (0, 1).",
        },
    }


def _scale_input() -> dict[str, object]:
    return {
        "shape": None,
        "dtype": "float32",
        "description": "Multiplies q (the workloads use 1/sqrt(128)).",
    }


def _cu_seqlens(lengths: list[int]) -> torch.Tensor:
    offsets = [0]
    for length in lengths:
        offsets.append(offsets[-1] + length)
    return torch.tensor(offsets, dtype=torch.int32)


def _random_lengths(total: int, num_seqs: int, seed: int) -> list[int]:
    """`num_seqs` positive lengths summing to `total`: cut [0, total) at random points."""
    gen = torch.Generator().manual_seed(seed)
    cuts = (torch.randperm(total - 1, generator=gen)[: num_seqs - 1] + 1).sort().values
    bounds = [0, *cuts.tolist(), total]
    return [hi - lo for lo, hi in itertools.pairwise(bounds)]


_STRICT_NOTE = (
    "diagnostic_tolerance (informative, recorded with --strict-diagnostic, never a status): o"
    " within half a bf16 step (4e-3, abs-or-rel), %s within %s."
)


def _strict(state: str, bound: float) -> dict[str, Any]:
    """The strict diagnostic bound: o to half a bf16 step, the float32 state to `bound`."""
    rule = {"rule": "abs_or_rel", "required_matched_ratio": 1.0}
    return {
        "atol": 4e-3,
        "rtol": 4e-3,
        **rule,
        "per_output": {state: {"atol": bound, "rtol": bound, **rule}},
    }


def _decode(b: DatasetBuilder) -> None:
    entry = b.definition(
        "gdn_decode_qk4_v8_d128_k_last",
        "gdn",
        description=(
            "Gated DeltaNet decode step, one token per sequence: decay the float32 k-last state "
            "[B, 8, V=128, K=128] by exp(g), apply the delta rule with beta, read out "
            "o = scale * S q. 4 q/k heads, 8 value heads (value head h uses q/k head h // 2); "
            "no Q/K L2 normalisation inside the kernel. `state` is read-only: the updated state "
            "goes to `new_state`. Tolerance: o is bf16 (atol = rtol = 1e-2, abs-or-rel); "
            "new_state is one float32 step, so it is held to 1e-3. "
            + _STRICT_NOTE
            % ("new_state", "1e-4")
        ),
        axes={
            "batch_size": "var",
            "num_q_heads": NUM_QK_HEADS,
            "num_k_heads": NUM_QK_HEADS,
            "num_v_heads": NUM_V_HEADS,
            "head_size": HEAD,
        },
        inputs={
            **_token_inputs("batch_size"),
            "state": {
                "shape": ["batch_size", "num_v_heads", "head_size", "head_size"],
                "dtype": "float32",
                "init": STATE_INIT,
                "description": "Recurrent state per sequence, k-last [B, HV, V, K]; read-only.",
            },
            "scale": _scale_input(),
        },
        outputs={
            "o": {
                "shape": ["batch_size", "num_v_heads", "head_size"],
                "dtype": "bfloat16",
                "description": "scale * S q with the updated state S.",
            },
            "new_state": {
                "shape": ["batch_size", "num_v_heads", "head_size", "head_size"],
                "dtype": "float32",
                "description": "Updated state, k-last [B, HV, V, K].",
            },
        },
        tolerance={
            "atol": 1e-2,
            "rtol": 1e-2,
            "rule": "abs_or_rel",
            "required_matched_ratio": 1.0,
            "per_output": {
                "new_state": {
                    "atol": 1e-3,
                    "rtol": 1e-3,
                    "rule": "abs_or_rel",
                    "required_matched_ratio": 1.0,
                }
            },
        },
        diagnostic_tolerance=_strict("new_state", 1e-4),
        scale_probe_inputs=[*SCALE_PROBE_INPUTS, "state"],
        constraints=[
            "num_v_heads % num_q_heads == 0",
            "num_q_heads == num_k_heads",
            *GATE_CONSTRAINTS,
        ],
        tags=[*TAGS, "stage:decode"],
        # Per token and value head: decay (VK), S k (2VK), rank-1 update (2VK), S q (2VK).
        flops="7 * batch_size * num_v_heads * head_size * head_size",
        bytes=(
            "batch_size * ((num_q_heads + num_k_heads + 2 * num_v_heads) * head_size * 2"
            " + 2 * num_v_heads * 4 + 2 * num_v_heads * head_size * head_size * 4)"
        ),
    )
    scalars = {"scale": SCALE}
    b.workload(entry, "smoke-b2", axes={"batch_size": 2}, suites=["smoke"], scalars=scalars)
    b.workload(entry, "dev-b32", axes={"batch_size": 32}, suites=["dev"], scalars=scalars)
    b.workload(entry, "dev-b128", axes={"batch_size": 128}, suites=["dev"], scalars=scalars)
    b.workload(entry, "b1", axes={"batch_size": 1}, suites=[], scalars=scalars)
    b.workload(entry, "b256", axes={"batch_size": 256}, suites=[], scalars=scalars)


def _prefill_workload(
    b: DatasetBuilder,
    entry: DefinitionEntry,
    label: str,
    lengths: list[int],
    suites: list[str],
    note: str,
) -> None:
    cu = _cu_seqlens(lengths)
    b.workload(
        entry,
        label,
        axes={
            "total_seq_len": sum(lengths),
            "num_seqs": len(lengths),
            "len_cu_seqlens": len(lengths) + 1,
        },
        suites=suites,
        scalars={"scale": SCALE},
        tensors={"cu_seqlens": cu},
        provenance=f"Synthetic packed-batch offsets: {note}",
    )


def _prefill(b: DatasetBuilder) -> None:
    state_shape = ["num_seqs", "num_v_heads", "head_size", "head_size"]
    entry = b.definition(
        "gdn_prefill_qk4_v8_d128_k_last",
        "gdn",
        description=(
            "Gated DeltaNet prefill over packed variable-length sequences (cu_seqlens): per "
            "sequence and value head, run the gated delta rule token by token from "
            "initial_state (float32, k-last [N, 8, V=128, K=128]) and emit o = scale * S q per "
            "token plus the final state. 4 q/k heads, 8 value heads (value head h uses q/k "
            "head h // 2); no Q/K L2 normalisation inside the kernel. Tolerance: o is bf16 "
            "(atol = rtol = 1e-2, abs-or-rel). final_state is float32 but is held only to "
            "atol = rtol = 1e-2 (abs-or-rel): chunked (WY/UT) kernels stage w, u and the "
            "chunk state in bf16, and on these inputs such a kernel's state error was measured "
            "at about 2e-3 (state values ~0.1). Strict FP32 prefill state accuracy remains "
            "unresolved and is not what this tolerance certifies. "
            + _STRICT_NOTE
            % ("final_state", "1e-3")
        ),
        axes={
            "total_seq_len": "var",
            "num_seqs": "var",
            "len_cu_seqlens": "var",
            "num_q_heads": NUM_QK_HEADS,
            "num_k_heads": NUM_QK_HEADS,
            "num_v_heads": NUM_V_HEADS,
            "head_size": HEAD,
        },
        inputs={
            **_token_inputs("total_seq_len"),
            "cu_seqlens": {
                "shape": ["len_cu_seqlens"],
                "dtype": "int32",
                "description": "Sequence n owns tokens cu_seqlens[n] .. cu_seqlens[n+1]-1.",
            },
            "initial_state": {
                "shape": state_shape,
                "dtype": "float32",
                "init": STATE_INIT,
                "description": "State before each sequence's first token, k-last [N, HV, V, K].",
            },
            "scale": _scale_input(),
        },
        outputs={
            "o": {
                "shape": ["total_seq_len", "num_v_heads", "head_size"],
                "dtype": "bfloat16",
                "description": "scale * S q per token, with S updated by that token.",
            },
            "final_state": {
                "shape": state_shape,
                "dtype": "float32",
                "description": "State after each sequence's last token, k-last [N, HV, V, K].",
            },
        },
        tolerance={
            "atol": 1e-2,
            "rtol": 1e-2,
            "rule": "abs_or_rel",
            "required_matched_ratio": 1.0,
            "per_output": {
                "final_state": {
                    "atol": 1e-2,
                    "rtol": 1e-2,
                    "rule": "abs_or_rel",
                    "required_matched_ratio": 1.0,
                }
            },
        },
        diagnostic_tolerance=_strict("final_state", 1e-3),
        scale_probe_inputs=[*SCALE_PROBE_INPUTS, "initial_state"],
        constraints=[
            "num_v_heads % num_q_heads == 0",
            "num_q_heads == num_k_heads",
            "len_cu_seqlens == num_seqs + 1",
            "cu_seqlens[0] == 0",
            "cu_seqlens[-1] == total_seq_len",
            "(cu_seqlens[1:] > cu_seqlens[:-1]).all()",
            *GATE_CONSTRAINTS,
        ],
        tags=[*TAGS, "stage:prefill"],
        # Per token and value head: decay (VK), S k (2VK), rank-1 update (2VK), S q (2VK).
        flops="7 * total_seq_len * num_v_heads * head_size * head_size",
        bytes=(
            "total_seq_len * ((num_q_heads + num_k_heads + 2 * num_v_heads) * head_size * 2"
            " + 2 * num_v_heads * 4) + len_cu_seqlens * 4"
            " + 2 * num_seqs * num_v_heads * head_size * head_size * 4"
        ),
    )
    _prefill_workload(b, entry, "smoke-2seq-t14", [5, 9], ["smoke"], "two sequences of 5 and 9.")
    _prefill_workload(
        b,
        entry,
        "dev-8seq-t8192",
        _random_lengths(8192, 8, seed=11),
        ["dev"],
        "8 sequences, 8192 tokens cut at 7 random points (seed 11).",
    )
    _prefill_workload(
        b, entry, "dev-2seq-t8192", [4096, 4096], ["dev"], "two sequences of 4096 tokens."
    )
    _prefill_workload(b, entry, "1seq-t1000", [1000], [], "one sequence of 1000 tokens.")
    _prefill_workload(
        b,
        entry,
        "64seq-t4096",
        _random_lengths(4096, 64, seed=12),
        [],
        "64 sequences, 4096 tokens cut at 63 random points (seed 12).",
    )


def build(b: DatasetBuilder) -> None:
    _decode(b)
    _prefill(b)
