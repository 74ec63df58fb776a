"""Solutions that try to look faster than they are must fail, or pass only flagged.

Each cheat below is numerically right on every call the validation and the re-check judge:
it serves an earlier answer on later calls (keyed by the input's storage and write counter, by
a fingerprint of its content, or by how many calls it has seen), or slows the clocks its
process reads. Timed calls are judged calls on fresh inputs, read by the judge itself, and the
judge's own clock brackets every batch (envaudit.harness.witness, docs/harness.md "Timing
integrity"); run through `envaudit run --runtime host --device cpu` on the toy workload with
random inputs, beside an honest solution that must pass unflagged.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envaudit.cli import app
from tests.conftest import UUID_RANDOM

# The work a cache saves: 4 ms a call, which every honest call pays.
EXPENSIVE = """
import time
def expensive(x, lengths, scale):
    time.sleep(0.004)
    return scaled(x, lengths, scale)
"""
STALE_BY_CALL_COUNT = """
        # the validation's call and one warm-up call are honest; from the third call on,
        # before any timed call (the warm-up makes at least one more), the last answer again
        SEEN = []
        def run(x, lengths, scale):
            SEEN.append(1)
            if len(SEEN) > 2 and LAST:
                return LAST[-1].clone()
            out = expensive(x, lengths, scale)
            LAST[:] = [out]
            return out
        LAST = []
        """
"""Serves its last answer from the third call on, so that every timed call is stale: from
the seventh, as it was, the first timed calls were still honest, and a check that picked one
of them passed (the re-check then failed it, 1 run in 24)."""
SLOW_CLOCKS = """
        import time
        _real = time.perf_counter
        _base = _real()
        time.perf_counter = lambda: _base + (_real() - _base) / 20
        def run(x, lengths, scale):
            time.sleep(0.004)
            return scaled(x, lengths, scale)
        """
"""Reads the wall clock at a twentieth of its pace, and sleeps 4 ms a call."""
EARLY_CHECK = """
        # asks the judge to check its calls after the first batch, then goes on timing: what
        # follows could serve anything, since the judge has let go of the slots it reads
        from envaudit.harness import timed_calls
        _close = timed_calls.JudgedCalls.close
        def close(self, samples_ms):
            _close(self, samples_ms)
            if not getattr(self, "checked_early", False):
                self.checked_early = True
                self.finish()
        timed_calls.JudgedCalls.close = close
        timed_calls.JudgedCalls.batch_cap = lambda self: 2  # batches to come after the check
        def run(x, lengths, scale):
            return expensive(x, lengths, scale)
        """
"""Asks for its check early, then goes on timing (the honest `expensive` each call)."""
STEP_HOOKS = """
        # knows which step of which batch each timed call is (the harness in its own process
        # says so), and forgets what it computed ahead when a batch ends
        from envaudit.harness import timed_calls, witness
        NOW, AHEAD = {}, {}
        _open, _prime, _close = (
            timed_calls.JudgedCalls.open, timed_calls.JudgedCalls.prime,
            timed_calls.JudgedCalls.close,
        )
        def open_(self, first, steps):
            _open(self, first, steps)
            AHEAD.clear()
            NOW.update(calls=self, end=first + steps)
        def prime(self, step):
            _prime(self, step)
            NOW["step"] = step
        def close(self, samples_ms):
            NOW.pop("step", None)
            _close(self, samples_ms)
        timed_calls.JudgedCalls.open, timed_calls.JudgedCalls.prime = open_, prime
        timed_calls.JudgedCalls.close = close
        """
"""The hooks a cheat that computes ahead needs: NOW (the batch's calls, its end, the step)."""
PIPELINED = (
    STEP_HOOKS
    + """
        # computes each next step's answer in a thread as soon as the step before has its
        # own: the next input is the draw of (nonce, step) rolled by the key of this step's
        # output, both of which it can compute in its own process; the chain leaves it only
        # the harness's own time between two calls to hide work in
        import concurrent.futures
        POOL = concurrent.futures.ThreadPoolExecutor(2)
        def run(x, lengths, scale):
            if "step" not in NOW or NOW["calls"].fresh is None:
                return expensive(x, lengths, scale)
            calls, step = NOW["calls"], NOW["step"]
            ahead = AHEAD.pop(step, None)
            out = ahead.result() if ahead is not None else expensive(x, lengths, scale)
            if step + 1 < NOW["end"]:
                key = int(witness.chain_key([out]))
                after = calls.fresh.draw(calls.nonce, step + 1, 0, x.device, key)
                AHEAD[step + 1] = POOL.submit(expensive, after, lengths.clone(), scale)
            return out
        """
)
"""Computes the next step's answer ahead, in a thread, as far as the chain of inputs lets it."""
ROLL = """
        import torch
        def roll(t, key):  # the chain's old move: rows (up to 4096) shifted by the key
            n = t.numel()
            rows = next(r for r in range(min(n, 4096), 0, -1) if n % r == 0)
            rows = n if rows < 256 and n <= 1 << 22 else rows
            index = torch.remainder(torch.arange(rows, device=t.device) + key, rows)
            return t.reshape(rows, -1).index_select(0, index).view(t.shape)
        """
"""The chain's first form, which moved a known draw: a cheat moves its answers the same way."""
MOVED_AHEAD = (
    STEP_HOOKS
    + ROLL
    + """
        # at a batch's first step, computes every later step's work in threads on the nonce's
        # draws as they are; at each step it moves that answer as a roll by the chain's key
        # would move the input (the toy's work is elementwise: moving its input moves its
        # answer), with the key of its own previous output, which it knows
        import concurrent.futures
        import torch
        POOL = concurrent.futures.ThreadPoolExecutor(8)
        PREVIOUS = []
        def core(x, scale):
            time.sleep(0.004)
            return x * scale
        def run(x, lengths, scale):
            if "step" not in NOW or NOW["calls"].fresh is None:
                return expensive(x, lengths, scale)
            calls, step = NOW["calls"], NOW["step"]
            if step == calls.first:
                copies = len(calls.copies)
                for later in range(step + 1, NOW["end"]):
                    drawn = calls.fresh.draw(calls.nonce, later, later % copies, x.device)
                    AHEAD[later] = POOL.submit(core, drawn, scale)
            ahead = AHEAD.pop(step, None)
            if ahead is None or not PREVIOUS:
                out = expensive(x, lengths, scale)
            else:
                moved = roll(ahead.result(), witness.chain_key(PREVIOUS))
                out = scaled(moved, lengths, 1.0)
            PREVIOUS[:] = [out]
            return out
        """
)
"""Computes every later step's work ahead on the nonce's draws and moves each answer as a roll
would: a rolled draw (the chain's first form) is a known draw moved; a seeded or keyed one is
new."""
STEERED_KEY = (
    STEP_HOOKS
    + """
        # at a batch's first step: answers honestly, takes K = the key of that answer, draws
        # every later step's input with K and computes its answer in threads; at each step it
        # serves that answer with the bits of elements whose reference is 0 (masked rows, any
        # value within atol passes) set so that its output's key is K again
        import concurrent.futures, random, struct
        import torch
        POOL = concurrent.futures.ThreadPoolExecutor(8)
        STATE = {}
        ATOL_BITS = struct.unpack("<I", struct.pack("<f", 1e-5))[0]
        def steer(out, target):
            flat = out.reshape(-1).clone()
            free = (flat == 0).view(-1, 2).all(dim=1).nonzero().flatten().tolist()
            if len(free) < 2:
                return out
            words = flat.view(torch.int64)
            rng = random.Random(0)
            for _ in range(200):
                for w in free[:-1]:
                    lo, hi = rng.randrange(ATOL_BITS), rng.randrange(ATOL_BITS)
                    words[w] = lo | (hi << 32) if hi < (1 << 31) else lo
                words[free[-1]] = 0
                need = (target - int(witness.chain_key([flat]))) % (1 << 64)
                lo, hi = need & 0xFFFFFFFF, need >> 32
                if (lo & 0x7FFFFFFF) <= ATOL_BITS and (hi & 0x7FFFFFFF) <= ATOL_BITS:
                    words[free[-1]] = need - (1 << 64) if need >= 1 << 63 else need
                    return flat.view(out.shape)
            return out
        def run(x, lengths, scale):
            if "step" not in NOW or NOW["calls"].fresh is None:
                return expensive(x, lengths, scale)
            calls, step = NOW["calls"], NOW["step"]
            if step == calls.first:
                out = expensive(x, lengths, scale)
                key = witness.chain_key([out])
                STATE["K"] = int(key) if key is not None else None
                for later in range(step + 1, NOW["end"]):
                    copy = later % len(calls.copies)
                    drawn = calls.fresh.draw(calls.nonce, later, copy, x.device, STATE["K"])
                    AHEAD[later] = POOL.submit(expensive, drawn, lengths.clone(), scale)
                return out
            ahead = AHEAD.pop(step, None)
            if ahead is None:
                return expensive(x, lengths, scale)
            return steer(ahead.result(), STATE["K"])
"""
)
"""Sets the free bits of its outputs (elements whose reference is 0) so that every step's key
is the first step's, and so every later input is one it drew and answered ahead."""
FORGED_KEY = (
    STEP_HOOKS
    + """
        # its own harness takes a fixed key for every chained step (chain_key patched where
        # the harness calls it), so every later input is one it drew and answered ahead
        import concurrent.futures
        import torch
        from envaudit.harness import timed_calls
        FIXED = 12345
        timed_calls.chain_key = lambda outputs: torch.tensor(FIXED)
        POOL = concurrent.futures.ThreadPoolExecutor(8)
        def run(x, lengths, scale):
            if "step" not in NOW or NOW["calls"].fresh is None:
                return expensive(x, lengths, scale)
            calls, step = NOW["calls"], NOW["step"]
            if step == calls.first:
                for later in range(step + 1, NOW["end"]):
                    copy = later % len(calls.copies)
                    drawn = calls.fresh.draw(calls.nonce, later, copy, x.device, FIXED)
                    AHEAD[later] = POOL.submit(expensive, drawn, lengths.clone(), scale)
                return expensive(x, lengths, scale)
            ahead = AHEAD.pop(step, None)
            return ahead.result() if ahead is not None else expensive(x, lengths, scale)
        """
)
"""Patches the key its own harness takes: the judge takes the key itself, from the slot."""
CHEATS = {
    "storage_cache": """
        CACHE = {}
        def run(x, lengths, scale):
            key = (x.data_ptr(), x._version, lengths.data_ptr(), lengths._version)
            if key not in CACHE:
                CACHE[key] = expensive(x, lengths, scale)
            return CACHE[key].clone()
        """,
    "content_cache": """
        CACHE = {}
        def run(x, lengths, scale):
            key = (x.flatten()[:4].tolist(), lengths.tolist())
            key = repr(key)
            if key not in CACHE:
                CACHE[key] = expensive(x, lengths, scale)
            return CACHE[key].clone()
        """,
    "partial_fingerprint": """
        CACHE = {}
        def run(x, lengths, scale):
            key = (tuple(x.shape), tuple(lengths.tolist()), float(scale))
            if key not in CACHE:
                CACHE[key] = expensive(x, lengths, scale)
            return CACHE[key].clone()
        """,
    "call_count": STALE_BY_CALL_COUNT,
    "deferred_check": """
        # stale answers from its first timed call on (the judge's set-up says timing began),
        # telling the judge at the end that another mode follows (none does), so that the
        # check of its timed calls would wait for a finish that is never sent; honest again
        # for the re-check
        from envaudit.harness import timed_calls
        _finish, _setup = timed_calls.JudgedCalls.finish, timed_calls.JudgedCalls.setup
        TIMING, DONE, LAST = [], [], []
        def setup(self):
            TIMING.append(1)
            return _setup(self)
        def finish(self, defer=False):
            DONE.append(1)
            return _finish(self, defer=True)
        timed_calls.JudgedCalls.setup, timed_calls.JudgedCalls.finish = setup, finish
        def run(x, lengths, scale):
            if TIMING and LAST and not DONE:
                return LAST[-1].clone()
            out = expensive(x, lengths, scale)
            LAST[:] = [out]
            return out
        """,
    "early_check": EARLY_CHECK,
    "pipelined": PIPELINED,
    "moved_ahead": MOVED_AHEAD,
    "steered_key": STEERED_KEY,
    "forged_key": FORGED_KEY,
    "forged_figure": """
        # tells the judge its true step times, and writes a twentieth of them into its line
        from envaudit.harness import timing
        _as_dict = timing.TimingStats.as_dict
        def as_dict(self):
            figures = _as_dict(self)
            for name in ("median_ms", "min_ms", "max_ms", "q1_ms", "q3_ms", "iqr_ms", "mean_ms"):
                figures[name] = figures[name] / 20
            return figures
        timing.TimingStats.as_dict = as_dict
        def run(x, lengths, scale):
            return expensive(x, lengths, scale)
        """,
    "wide_allowance": """
        # declares two thousand fresh draws a step, so that the judge's allowance would cover
        # a clock slowed twentyfold
        from envaudit.harness import timed_calls
        _setup = timed_calls.JudgedCalls.setup
        def setup(self):
            ask = self.ask
            def declaring(request):
                if request.get("timing") == "setup":
                    layout = dict(request["layout"], draws_per_step=2000, copy_bytes=1 << 30)
                    request = dict(request, layout=layout)
                return ask(request)
            self.ask = declaring
            try:
                _setup(self)
            finally:
                self.ask = ask
        timed_calls.JudgedCalls.setup = setup
        """
    + SLOW_CLOCKS,
    "slow_clocks": SLOW_CLOCKS,
}
HONEST = """
    import time
    def run(x, lengths, scale):
        time.sleep(0.004)
        return scaled(x, lengths, scale)
    """


def timed_lines(
    base: Path, bodies: dict[str, str], where: list[str], extra: tuple[str, ...] = ()
) -> dict[str, dict]:
    """Each solution's line on the toy workload with random inputs, run on the device `where`
    names; solution -> its line."""
    from tests.conftest import write_toy_root
    from tests.harness.test_faults import write_solution

    root = write_toy_root(base / "data")
    solutions = base / "solutions"
    written = {name: (textwrap.dedent(body), False) for name, body in bodies.items()}
    report = base / "results.jsonl"
    for name in written:
        write_solution(solutions, name, written)
        argv = ["run", "--solution", name, *where, *extra, "--data-root", str(root)]
        argv += ["--solutions-root", str(solutions), "--report", str(report)]
        argv += ["--workload", UUID_RANDOM, "--timeout", "120"]
        CliRunner().invoke(app, argv)
    lines = [json.loads(raw) for raw in report.read_text().splitlines()]
    return {line["solution"]: line for line in lines}


@pytest.fixture(scope="module")
def timing_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    bodies = {name: EXPENSIVE + textwrap.dedent(body) for name, body in CHEATS.items()}
    bodies["honest"] = HONEST
    return timed_lines(tmp_path_factory.mktemp("timing"), bodies, ["--device", "cpu"])


def test_the_honest_solution_passes_unflagged(timing_run: dict) -> None:
    line = timing_run["honest"]
    assert line["status"] == "PASSED", line["message"]
    timing = line["timing"]
    assert "flags" not in timing, timing.get("flags")
    judge = timing["eager"]["judge"]
    assert judge["consistent"] and judge["checked_calls"] >= 1, judge
    assert timing["fresh_input"] == "x"
    # the line's median is the one the judge was told, and the sleep is in it
    assert timing["eager"]["median_ms"] >= 4.0
    # the judge's clock verifies most of it: a 4 ms call beside a per-step allowance of 0.5 ms
    assert 0.5 * 4.0 < judge["floor_ms"] <= timing["eager"]["median_ms"], judge


@pytest.mark.parametrize(
    "name", ["storage_cache", "content_cache", "partial_fingerprint", "call_count"]
)
def test_an_earlier_answer_fails_or_costs_its_true_time(timing_run: dict, name: str) -> None:
    """The storage and content caches never hit (each fresh draw is a write, a new version and
    new values), so they pass at their true cost; the others serve a stale answer to a fresh
    input and fail."""
    line = timing_run[name]
    if line["status"] == "PASSED":
        assert line["timing"]["eager"]["median_ms"] >= 4.0, line["timing"]["eager"]
        assert "flags" not in line["timing"]
    else:
        assert line["status"] == "INCORRECT_NUMERICAL", (line["status"], line["message"])
        assert "a timed call (eager)" in line["message"], line["message"]


@pytest.mark.parametrize("name", ["partial_fingerprint", "call_count", "deferred_check"])
def test_a_stale_answer_fails(timing_run: dict, name: str) -> None:
    """A deferred check (the eager calls' check waiting for the graph's) is made when the line
    is settled if the process never asks for it."""
    line = timing_run[name]
    assert line["status"] == "INCORRECT_NUMERICAL", (line["status"], line["message"])
    assert "a timed call (eager)" in line["message"], line["message"]


def test_slowed_clocks_are_flagged(timing_run: dict) -> None:
    line = timing_run["slow_clocks"]
    flags = line.get("timing", {}).get("flags") or []
    assert line["status"] != "PASSED" or flags, line.get("timing")
    assert any("judge's clock" in flag for flag in flags), flags


def test_a_figure_other_than_the_judge_s_is_flagged_and_replaced(timing_run: dict) -> None:
    """The line keeps the figure the judge computed from the times it was told (and bounded
    by its clock), never the process's own: told the truth and written a twentieth of it, the
    line was 0.21 ms a call against the honest 4.3 ms, PASSED and unflagged; now it is flagged
    and its median is the true one, as are the rates derived from it."""
    line = timing_run["forged_figure"]
    flags = line.get("timing", {}).get("flags") or []
    assert any("is not the one the judge was told" in flag for flag in flags), flags
    eager = line["timing"]["eager"]
    assert eager["median_ms"] >= 4.0 and eager["q1_ms"] >= 4.0, eager
    honest = timing_run["honest"]
    ratio = line["achieved"]["eager_gbps"] / honest["achieved"]["eager_gbps"]
    assert 0.5 < ratio < 2.0, (line["achieved"], honest["achieved"])


def test_an_allowance_the_process_declares_is_not_the_judge_s(timing_run: dict) -> None:
    """What the harness does beside the calls inside a window is the judge's own reckoning
    (witness.judged_layout): a process that declared 2,000 draws a step passed a twentyfold
    slowed clock unflagged (an allowance of 16 s over a 0.24 s window)."""
    line = timing_run["wide_allowance"]
    flags = line.get("timing", {}).get("flags") or []
    assert any("judge's clock" in flag for flag in flags), (line["status"], flags)
    assert line["timing"]["eager"]["judge"]["allowance_ms"] < 1000, line["timing"]["eager"]


def test_timing_after_the_judge_s_check_is_flagged(timing_run: dict) -> None:
    """Batches after the judge checked a mode's calls are batches it cannot read: the mode is
    flagged, whatever they reported."""
    line = timing_run["early_check"]
    flags = line.get("timing", {}).get("flags") or []
    assert any("went on after the judge had checked" in flag for flag in flags), (
        line["status"],
        line.get("message"),
        flags,
    )


def wrong_or_at_its_true_cost(line: dict) -> None:
    """A cheat's line fails its numerics, or passes at the honest 4 ms a call."""
    if line["status"] == "PASSED":
        median = line["timing"]["eager"]["median_ms"]
        assert median >= 4.0 - 0.5, line["timing"]["eager"]
    else:
        assert line["status"] == "INCORRECT_NUMERICAL", (line["status"], line["message"])


def wrong_unless_checked_where_honest(
    line: dict, mode: str = "eager", honest: tuple[int, ...] = (0,)
) -> None:
    """For a cheat that answers each batch's first step honestly (its input is the nonce's
    draw, which needs no shortcut) and every later step from work done ahead: it fails its
    numerics, unless the judge's one check (a reservoir pick over every timed call) landed on
    a step the cheat answers right (`honest`: positions in a batch), a chance of a few in the
    batch's length; then it passes, and the judge's record says where it looked."""
    if line["status"] == "PASSED":
        judge = line["timing"][mode]["judge"]
        assert judge["picked"] and all(slot in honest for _, slot in judge["picked"]), judge
    else:
        assert line["status"] == "INCORRECT_NUMERICAL", (line["status"], line["message"])
        assert f"a timed call ({mode})" in line["message"], line["message"]


def test_answers_computed_ahead_cost_their_true_time(timing_run: dict) -> None:
    """A step's fresh input depends on the previous step's outputs (witness.chain_key), so
    a solution cannot compute later steps' answers in parallel with earlier ones: what it can
    do ahead is bounded by the harness's own time between two calls (the per-step margin).
    Without the chain this cheat, reading its next inputs from the nonce, reported 0.39 ms
    against the honest 4.13 ms, unflagged."""
    wrong_or_at_its_true_cost(timing_run["pipelined"])


def test_answers_moved_from_draws_computed_ahead_are_wrong(timing_run: dict) -> None:
    """On the CPU the chain's key seeds each step's draw, so the nonce's own draws, which a
    solution can compute ahead in parallel, are not the inputs it is timed on. When the key only
    rolled those draws, this cheat (the work of every later step computed at the batch's start,
    each answer then rolled as its input was) passed unflagged at 0.12 ms against the honest
    4.14 ms a call."""
    wrong_unless_checked_where_honest(timing_run["moved_ahead"])


def test_a_key_steered_by_free_bits_gives_no_input_known_ahead(timing_run: dict) -> None:
    """Outputs pass within a tolerance, so a solution may set the bits of elements whose
    reference is 0 to give the chain any key it likes. With a plain sum of the words as the
    key this cheat held the key fixed, drew and answered every later step ahead in threads
    and reported 0.34 ms against the honest 4.15 ms, unflagged; the key's two rounds
    (witness.chain_key) leave it no such shortcut. Its second step's answer is right: that
    input is keyed by the first step's honest output, the key it drew with (its pick there
    passed in one of the full suite's runs)."""
    wrong_unless_checked_where_honest(timing_run["steered_key"], honest=(0, 1))


def test_a_key_forged_in_the_solution_s_process_gives_the_judge_another_input(
    timing_run: dict,
) -> None:
    """The solution's harness takes a fixed key (its chain_key patched), so its inputs were
    known ahead; the judge takes the key from the previous slot itself, draws the input the
    chain says, and the answer to the forged one is wrong."""
    wrong_unless_checked_where_honest(timing_run["forged_key"])


def _graph_timing(graph_ms: float, chained_ms: float | None, chain_ms: float) -> dict:
    timing: dict = {"fresh_input": "x", "graph": {"median_ms": graph_ms}}
    if chained_ms is not None:
        timing["chained_graph"] = {
            "median_ms": chained_ms,
            "judge": {"chain_call_ms": chain_ms},
        }
    return timing


def test_a_graph_figure_below_its_chained_bound_is_flagged() -> None:
    """The judge's rule for capture batching (judge._batching_flags, the GPU half in
    tests/harness/test_gpu_timing_integrity.py): the graph figure may lie below the chained
    graph's calls, less the chain's own cost, by BATCH_RATIO and BATCH_MARGIN_MS, no more; a
    graph figure with no chained bound (where a fresh input makes one possible) is flagged too."""
    from envaudit.harness.judge import (
        BATCH_MARGIN_MS,
        BATCH_RATIO,
        _batching_flags,
        _settle_timing,
    )

    chain = 0.010
    honest = 0.100  # a call's own time, in the graph and in the chained graph beside its chain
    assert _batching_flags(_graph_timing(honest, honest + chain, chain)) == []
    # as low as the rule lets it: the bound itself passes, a hair under it is flagged
    bound = (honest + chain - chain - BATCH_MARGIN_MS) / BATCH_RATIO
    assert _batching_flags(_graph_timing(bound, honest + chain, chain)) == []
    flagged = _batching_flags(_graph_timing(bound * 0.999, honest + chain, chain))
    assert len(flagged) == 1 and "batches its calls" in flagged[0], flagged
    # a capture that did every call's work at its last: 1/20 of the work a call
    assert _batching_flags(_graph_timing(honest / 20, honest + chain, chain))
    unbounded = _graph_timing(honest, None, chain) | {"chained_graph_error": "GraphCaptureError"}
    assert _batching_flags(unbounded) == [
        "graph: no chained graph bounds its figure (GraphCaptureError)"
    ]
    # nothing to key the calls by: the known gap of a workload with no fresh input
    assert _batching_flags(_graph_timing(honest / 20, None, chain) | {"fresh_input": None}) == []
    # which input is fresh is the judge's word when it settles a line, not the line's: a line
    # that said "none" (and skipped the chained graph) is still held to the bound
    outcome = {"status": "PASSED", "timing": _graph_timing(honest / 20, None, chain)}
    outcome["timing"]["fresh_input"] = None
    _settle_timing(outcome, {}, "x")
    assert outcome["timing"]["fresh_input"] == "x"
    assert any("no chained graph" in f for f in outcome["timing"]["flags"]), outcome


def _doubled(inputs: dict, outputs: list | None, prepared: object) -> object:
    if outputs is None:
        return inputs["x"] * 2
    outputs[0].copy_(inputs["x"] * 2)
    return None


@pytest.mark.parametrize("destination_passing", [False, True])
def test_a_chained_graph_s_rows_are_the_ones_the_judge_draws_again(
    destination_passing: bool,
) -> None:
    """The chained graph's rows (timed_calls.JudgedCalls, CHAINED_GRAPH) as the captured kernels
    key them, run here op by op on the CPU in the order a replay runs them (the bits drawn after
    the flush, then each call's row keyed by the call before's outputs), are the rows the judge
    draws again for a picked call (witness.Picked.fresh_value) from the nonce, the step and the
    key it takes from the previous call's slot: a check on the GPU compares the right inputs.
    Each row is keyed once a call (a destination-passing call's slots are made by its launch as
    well as by the capture: keyed twice, the row was another)."""
    import torch

    from envaudit.harness.timed_calls import JudgedCalls
    from envaudit.harness.witness import CHAINED_GRAPH, FreshInput, Picked, mixed_key

    cpu = torch.device("cpu")
    fresh = FreshInput("x", (4, 8), torch.float32, {"dist": "normal"})
    calls = JudgedCalls(
        ask=lambda request: {},
        uuid="u",
        mode=CHAINED_GRAPH,
        device=cpu,
        call=_doubled,
        copies=[{"x": torch.zeros(4, 8)}],
        prepared=[None],
        destination_passing=destination_passing,
        fresh=fresh,
        layouts=[((4, 8), torch.float32)],
    )
    n, nonce, step = 5, 12345, 3
    calls.capturing(n)
    calls.nonce = nonce
    calls.flushed(step)
    outputs = []
    for j in range(n):
        calls.capture(0, j)
        returned = calls.launch(0)
        calls.captured(0, j, returned)
        outputs.append(calls.graph_slots[(0, j)][0])
    assert calls.rows is not None
    rows = calls.rows.clone()
    assert len({tuple(r.flatten().tolist()) for r in rows}) == n  # every row its own
    for j in range(n):
        key = int(mixed_key([outputs[j - 1]])) if j else None
        picked = Picked(0, j, step, j, nonce, rows=n, chained=True, key=key)
        assert torch.equal(picked.fresh_value(fresh, cpu), rows[j]), j
        assert torch.equal(outputs[j], rows[j] * 2)
    # the bits are keyed in a copy: a replay that no draw precedes (the warm-up's) keys the
    # same rows again, never spent bits (NaN rows before)
    for j in range(n):
        calls.capture(0, j)
        calls.captured(0, j, calls.launch(0))
    assert torch.equal(calls.rows, rows) and bool(torch.isfinite(rows).all())
    # another key is another row: a row drawn before the call before returned is not it
    wrong = Picked(0, 2, step, 2, nonce, rows=n, chained=True, key=int(mixed_key([rows[1]])))
    assert not torch.equal(wrong.fresh_value(fresh, cpu), rows[2])
