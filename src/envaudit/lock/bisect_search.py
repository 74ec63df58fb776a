"""The search of `bisect-env`, apart from everything it runs: which sets of changes to judge,
level by level, and the smallest set that flips the criterion.

Changes are numbered 0..n-1 in diff-env's order. The set of the first k changes is "prefix k":
prefix 0 is A (judged like A), prefix n holds every change (B, judged like B). The search finds
the smallest k whose prefix is like B, splitting [lo, hi] at `width` points per level (one
point halves it, as `git bisect` does; a Slurm level judges several at once): ceil(log2 n)
levels of one point. Change k-1 is then the culprit when it flips the criterion alone (one
more step, unless k is 1). When it does not, the flip needs some of the earlier changes as
well, and the same search over those earlier changes, with the culprit always held, finds them
one by one; the result then names more than one change.

The judge is monotone in the usual case (a change, once made, stays made); where it is not, the
first level point judged like B wins, which still ends on a prefix pair (like A, like B) that
differs by one change.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

Judge = Callable[[Sequence[frozenset[int]]], Sequence[bool]]
"""One level's sets of change numbers -> for each, whether its step is like B."""


@dataclass
class SearchResult:
    culprits: tuple[int, ...]
    """The changes that together flip the criterion, in diff order."""
    judged: list[tuple[frozenset[int], bool]] = field(default_factory=list)
    """Every set judged, in order (the ends excluded)."""


class _Asker:
    """Judges each set once, the ends taken as known."""

    def __init__(self, count: int, judge: Judge) -> None:
        self.judge = judge
        self.known: dict[frozenset[int], bool] = {
            frozenset(): False,
            frozenset(range(count)): True,
        }
        self.judged: list[tuple[frozenset[int], bool]] = []

    def __call__(self, sets: Sequence[frozenset[int]]) -> list[bool]:
        new = [s for s in dict.fromkeys(sets) if s not in self.known]
        if new:
            verdicts = list(self.judge(new))
            if len(verdicts) != len(new):
                raise ValueError(f"the judge gave {len(verdicts)} verdicts for {len(new)} sets")
            for chosen, verdict in zip(new, verdicts, strict=True):
                self.known[chosen] = verdict
                self.judged.append((chosen, verdict))
        return [self.known[s] for s in sets]


def search(count: int, judge: Judge, width: int = 1) -> SearchResult:
    """The smallest set of changes (as numbers) that flips the criterion; see the module."""
    if count < 1:
        raise ValueError("nothing to search: no changes")
    ask = _Asker(count, judge)
    _, hi = narrow(0, count, lambda k: frozenset(range(k)), ask, width)
    needed = [hi - 1]
    rest = list(range(hi - 1))
    # invariant: needed + rest is like B
    while not ask([frozenset(needed)])[0]:
        _, j = narrow(0, len(rest), _with(frozenset(needed), rest), ask, width)
        needed.append(rest[j - 1])
        rest = rest[: j - 1]
    return SearchResult(tuple(sorted(needed)), ask.judged)


def _with(held: frozenset[int], rest: list[int]) -> Callable[[int], frozenset[int]]:
    """k -> the held changes and the first k of `rest`."""
    return lambda k: held | frozenset(rest[:k])


def narrow(
    lo: int,
    hi: int,
    make: Callable[[int], frozenset[int]],
    ask: Callable[[Sequence[frozenset[int]]], list[bool]],
    width: int,
) -> tuple[int, int]:
    """(lo, hi) one apart, make(lo) like A and make(hi) like B, given that of the bounds."""
    while hi - lo > 1:
        points = level_points(lo, hi, width)
        verdicts = ask([make(p) for p in points])
        like_b = [p for p, v in zip(points, verdicts, strict=True) if v]
        new_hi = min(like_b) if like_b else hi
        below = [p for p, v in zip(points, verdicts, strict=True) if not v and p < new_hi]
        lo, hi = (max(below) if below else lo), new_hi
    return lo, hi


def level_points(lo: int, hi: int, width: int) -> list[int]:
    """Up to `width` points strictly inside (lo, hi), evenly spread (one: the middle)."""
    span = hi - lo
    points = {lo + (i * span) // (width + 1) for i in range(1, width + 1)}
    return sorted(p for p in points if lo < p < hi) or [lo + span // 2]
