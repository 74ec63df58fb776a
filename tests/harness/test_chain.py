"""The chain of timed steps (envaudit.harness.witness): the key both processes take from a
step's outputs, and the new draw it makes of the next step's input (seeded on the CPU, keyed
on the device on a GPU)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from envaudit.harness import witness
from envaudit.harness.witness import (
    KEY_BITS_FROM,
    MANTISSA_BITS,
    FreshInput,
    chain_key,
    hashed_key,
    keyed_on_host,
    mixed_key,
)


@pytest.mark.parametrize("key_of", [mixed_key, hashed_key])
@pytest.mark.parametrize("numel", [3001, 3004])  # a tail past the last whole word, and none
def test_the_key_is_the_same_wherever_the_outputs_lie(key_of: Callable, numel: int) -> None:
    """The solution's process takes it from a slot at any byte offset; the judge from its own
    copy of that slot: an odd offset must not change it (mixed_key reads aligned words in
    place and copies misaligned ones)."""
    values = torch.randn(numel, dtype=torch.bfloat16)
    for offset in range(1, 9):
        backing = torch.zeros(numel + offset, dtype=torch.bfloat16)
        slot = backing[offset:]
        slot.copy_(values)
        assert int(key_of([slot])) == int(key_of([slot.clone()])) == int(key_of([values]))
    strided = torch.zeros(numel, 2, dtype=torch.bfloat16)[:, 0]
    strided.copy_(values)
    assert int(key_of([strided])) == int(key_of([values]))
    assert int(chain_key([values])) == int(hashed_key([values]))  # the CPU's key is hashed


def test_every_word_moves_the_key() -> None:
    outputs = [torch.randn(2, 8, 128, 128), torch.randn(7, dtype=torch.bfloat16)]
    base = int(chain_key(outputs))
    for tensor, index in ((0, 12345), (0, 0), (1, 6)):  # the middle, the start, the tail bytes
        changed = [t.clone() for t in outputs]
        flat = changed[tensor].view(-1)
        flat[index] = flat[index] * 2 + 1
        assert int(chain_key(changed)) != base, (tensor, index)
    assert chain_key([3.0]) is None


@pytest.mark.parametrize("key_of", [mixed_key, hashed_key])
def test_no_change_to_the_outputs_leaves_the_drawn_bits_alone(key_of: Callable) -> None:
    """The bits a GPU's draw reads (KEY_BITS_FROM on) move with any word, and so do changes that
    a plain sum of the words would not see (one word up by d, another down by d): a solution
    cannot steer the key from free bits in its outputs one word at a time. The device's key
    (mixed_key, run here on the CPU) and the host's (hashed_key) alike."""
    outputs = [torch.randn(4096, dtype=torch.bfloat16)]
    words = outputs[0].view(torch.int64)

    def drawn_bits(tensors: list[torch.Tensor]) -> int:
        return (int(key_of(tensors)) >> KEY_BITS_FROM) & ((1 << MANTISSA_BITS) - 1)

    base = drawn_bits(outputs)
    for index in (0, 7, 1022):
        changed = words.clone()
        changed[index] += 1
        assert drawn_bits([changed.view(torch.bfloat16)]) != base, index
        changed[index + 1] -= 1  # the plain sum as before
        assert int(changed.sum()) == int(words.sum())
        assert drawn_bits([changed.view(torch.bfloat16)]) != base, index


def test_the_device_key_is_the_same_in_any_chunking(monkeypatch: pytest.MonkeyPatch) -> None:
    """mixed_key mixes KEY_CHUNK words a pass: an output longer than that gives the key its
    words would give in one pass, and a tail of odd bytes counts."""
    values = torch.randn(10_001, dtype=torch.bfloat16)
    whole = int(mixed_key([values]))
    monkeypatch.setattr(witness, "KEY_CHUNK", 1000)
    assert int(mixed_key([values])) == whole
    assert int(mixed_key([values[:-1]])) != whole


def test_a_keyed_draw_is_new_values_of_the_same_rule_that_the_judge_draws_again() -> None:
    """A GPU's chained draw (run here on the CPU: the same torch kernels): the key XORed into
    the nonce's random mantissas on the device. Not the nonce's draw moved, different for
    another key, the same bits in any target layout and dtype, and still the rule's draw."""
    cpu = torch.device("cpu")
    fresh = FreshInput("q", (64, 40, 50), torch.float32, None)
    key = chain_key([torch.arange(10.0)])
    assert key is not None
    keyed = torch.empty(fresh.shape)
    bits = fresh.draw_keyed_into(keyed, 11, 3, 0, key)
    again = torch.empty_like(keyed)
    fresh.draw_keyed_into(again, 11, 3, 0, key.clone(), bits)
    assert torch.equal(keyed, again)
    plain = fresh.draw(11, 3, 0, cpu)
    assert not torch.equal(keyed.flatten().sort().values, plain.flatten().sort().values)
    other = torch.empty_like(keyed)
    other_key = chain_key([torch.arange(11.0)])
    assert other_key is not None
    fresh.draw_keyed_into(other, 11, 3, 0, other_key)
    assert (other != keyed).float().mean() > 0.99
    assert torch.isfinite(keyed).all()
    assert abs(float(keyed.mean())) < 0.02 and abs(float(keyed.std()) - 1) < 0.02
    bf16 = (
        torch.empty(fresh.shape, dtype=torch.bfloat16).transpose(0, 2).contiguous().transpose(0, 2)
    )
    fresh.draw_keyed_into(bf16, 11, 3, 0, key)
    assert torch.equal(bf16, keyed.to(torch.bfloat16))
    uniform = FreshInput("u", (100_000,), torch.float16, {"dist": "uniform", "low": -2, "high": 3})
    drawn = torch.empty(uniform.shape, dtype=torch.float16)
    uniform.draw_keyed_into(drawn, 5, 0, 1, key)
    assert float(drawn.min()) >= -2 and float(drawn.max()) <= 3
    assert abs(float(drawn.float().mean()) - 0.5) < 0.05
    shifted = FreshInput("s", (100_000,), torch.float32, {"dist": "normal", "mean": 3, "std": 0.5})
    drawn32 = torch.empty(shifted.shape)
    shifted.draw_keyed_into(drawn32, 5, 0, 1, key)
    assert abs(float(drawn32.mean()) - 3) < 0.01 and abs(float(drawn32.std()) - 0.5) < 0.01


def test_on_the_cpu_the_key_seeds_a_new_draw_which_the_judge_draws_again() -> None:
    """A CPU's chained draw is seeded with the key: not the nonce's draw moved (whose answer a
    solution could compute ahead and move), and the judge's draw of it is the solution's."""
    cpu = torch.device("cpu")
    assert keyed_on_host(cpu) and not keyed_on_host(torch.device("cuda", 0))
    fresh = FreshInput("q", (6, 5, 4), torch.float32, None)
    plain = fresh.draw(11, 3, 0, cpu)
    key = int(chain_key([torch.arange(10.0)]))
    solution_side = torch.empty_like(plain)
    fresh.draw_into(solution_side, 11, 3, 0, key)
    assert torch.equal(fresh.draw(11, 3, 0, cpu, key), solution_side)
    assert not torch.equal(solution_side.flatten().sort().values, plain.flatten().sort().values)
    other = fresh.draw(11, 3, 0, cpu, key + 1)
    assert not torch.equal(other, solution_side)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize(
    "init", [None, {"dist": "uniform", "low": -2, "high": 3}, {"dist": "normal", "std": 0.5}]
)
def test_a_graphed_chain_draws_what_the_judge_draws_from_the_slot(init: dict | None) -> None:
    """The solution's process replays the chained step in a CUDA graph (GraphedChain); the
    judge draws it op by op from the slot it reads (FreshInput.draw with chain_key): the same
    bits, step after step, for every input copy, with outputs of two layouts (one with a tail
    past its last whole word) and a target of another layout and dtype; and the graph follows
    the outputs it is given, not those it was captured with."""
    cuda = torch.device("cuda")
    fresh = FreshInput("q", (64, 40, 50), torch.float32, init)
    layouts = [((33, 7), torch.bfloat16), ((5,), torch.float32)]
    targets = [
        torch.empty(fresh.shape, device=cuda),
        torch.empty((50, 40, 64), dtype=torch.bfloat16, device=cuda).transpose(0, 2),
    ]
    chain = witness.GraphedChain(fresh, layouts, targets)
    for step in range(1, 6):
        outputs = [torch.randn(s, device=cuda).to(d) for s, d in layouts]
        copy = step % len(targets)
        chain.draw(outputs, 9, step, copy)
        key = chain_key([o.clone() for o in outputs])
        assert key is not None
        judged = fresh.draw(9, step, copy, cuda, int(key))
        assert torch.equal(targets[copy], judged.to(targets[copy].dtype))
        assert not torch.equal(judged, fresh.draw(9, step, copy, cuda))
