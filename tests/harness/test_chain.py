"""The chain of timed steps (envaudit.harness.witness): the key both processes take from a
step's outputs, and the roll it makes of the next step's draw."""

from __future__ import annotations

import torch

from envaudit.harness.witness import FreshInput, chain_key, chain_rows, keyed_on_host, roll_into


def test_the_key_is_the_same_wherever_the_outputs_lie() -> None:
    """The solution's process takes it from a slot at any byte offset; the judge from its own
    copy of that slot: an odd offset must not change it."""
    values = torch.randn(3001, dtype=torch.bfloat16)
    for offset in range(1, 9):
        backing = torch.zeros(3001 + offset, dtype=torch.bfloat16)
        slot = backing[offset:]
        slot.copy_(values)
        assert int(chain_key([slot])) == int(chain_key([slot.clone()])) == int(chain_key([values]))


def test_every_word_moves_the_key() -> None:
    outputs = [torch.randn(2, 8, 128, 128), torch.randn(7, dtype=torch.bfloat16)]
    base = int(chain_key(outputs))
    for tensor, index in ((0, 12345), (0, 0), (1, 6)):  # the middle, the start, the tail bytes
        changed = [t.clone() for t in outputs]
        flat = changed[tensor].view(-1)
        flat[index] = flat[index] * 2 + 1
        assert int(chain_key(changed)) != base, (tensor, index)
    assert chain_key([3.0]) is None


def test_the_roll_keeps_every_element() -> None:
    """A GPU's chained draw: the nonce's draw with its rows rolled by the key."""
    fresh = FreshInput("q", (6, 5, 4), torch.float32, None)
    drawn = fresh.draw(11, 3, 0, torch.device("cpu"))
    key = chain_key([torch.arange(10.0)])
    assert key is not None
    rolled = torch.empty_like(drawn)
    roll_into(drawn, key, rolled)
    assert torch.equal(rolled.flatten().sort().values, drawn.flatten().sort().values)
    assert not torch.equal(rolled, drawn) or int(key) % chain_rows(drawn.numel()) == 0


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
