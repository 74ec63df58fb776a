"""On a GPU: solutions that try to look faster than they are must fail or pass flagged, in
eager and graph timing, beside an honest one that passes unflagged.

Every solution spins the GPU for a fixed time per call (`torch.cuda._sleep`), the work a cheat
would save. The cheats: device events that read a tenth of the time, no work recorded while a
CUDA graph is captured (an answer computed before the capture, served from then on), the work
left on a side stream the caller's stream never waits for, an answer served by call count, a
cache keyed by storage and write counters, stale answers behind a forged deferral of the check,
a check asked for early with timing going on after it, the next step's work started on a
side stream as soon as its (chained) input can be known, and a capture that copies one call's
answer into every later call on the same input copy.
Skipped where torch sees no CUDA device (CI); run on the GPU machine with `pytest -m gpu`
(scripts/gpu/timing-integrity.sh).
"""

from __future__ import annotations

import statistics
import textwrap

import pytest
import torch

from envaudit.harness import timing
from tests.harness.test_gpu_faults import gpu_uuid
from tests.harness.test_timing_integrity import (
    EARLY_CHECK,
    ROLL,
    STEP_HOOKS,
    timed_lines,
    wrong_unless_checked_where_honest,
)

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

WORK = """
import torch
def work(x, lengths, scale):
    torch.cuda._sleep(200_000)  # ~0.1 ms of the GPU's time
    return scaled(x, lengths, scale)
"""
BATCHED_CAPTURE = """
        # while a graph is captured, no work for its calls but the last, which does every
        # call's at once (one call's spin for all: the work a batched kernel would share);
        # each captured call reads row j of one tensor of the graph's rows, which says j and
        # how many there are
        PENDING = []
        def run(x, lengths, scale):
            if not torch.cuda.is_current_stream_capturing():
                return work(x, lengths, scale)
            if not batching_now(x):
                return work(x, lengths, scale)
            rows = x.untyped_storage().nbytes() // (x.numel() * x.element_size())
            out = torch.empty_like(x)
            PENDING.append((x, lengths, scale, out))
            if x.storage_offset() // x.numel() == rows - 1:
                torch.cuda._sleep(200_000)
                for args in PENDING:
                    args[3].copy_(scaled(*args[:3]))
                PENDING.clear()
            return out
        DECIDED = []
        def batching_now(x):
            # decided once a graph (at its first row), not at every call
            if x.storage_offset() == 0 or not DECIDED:
                DECIDED[:] = [batching()]
            return DECIDED[0]
        """
CHEATS = {
    "slow_events": """
        _elapsed = torch.cuda.Event.elapsed_time
        torch.cuda.Event.elapsed_time = lambda self, end: _elapsed(self, end) / 10
        def run(x, lengths, scale):
            return work(x, lengths, scale)
        """,
    "idle_capture": """
        KEPT = []
        def run(x, lengths, scale):
            if torch.cuda.is_current_stream_capturing() and KEPT:
                return KEPT[-1]
            out = work(x, lengths, scale)
            KEPT[:] = [out]
            return out
        """,
    "side_stream": """
        SIDE = []
        def run(x, lengths, scale):
            if not SIDE:
                SIDE.append(torch.cuda.Stream())
            out = torch.empty_like(x)
            with torch.cuda.stream(SIDE[0]):
                out.copy_(work(x, lengths, scale))
            return out
        """,
    "call_count": """
        SEEN, LAST = [], []
        def run(x, lengths, scale):
            SEEN.append(1)
            if len(SEEN) > 8 and LAST:
                return LAST[-1].clone()
            out = work(x, lengths, scale)
            LAST[:] = [out]
            return out
        """,
    "copied_in_capture": """
        # while a graph is captured, each input copy's work once: a later call that reads the
        # same copy (its other inputs at the same addresses) gets that answer copied
        DONE = {}
        def run(x, lengths, scale):
            if not torch.cuda.is_current_stream_capturing():
                return work(x, lengths, scale)
            earlier = DONE.get(lengths.data_ptr())
            if earlier is not None:
                return earlier.clone()
            out = work(x, lengths, scale)
            DONE[lengths.data_ptr()] = out
            return out
        """,
    "storage_cache": """
        CACHE = {}
        def run(x, lengths, scale):
            key = (x.data_ptr(), x._version, lengths.data_ptr(), lengths._version)
            if key not in CACHE:
                CACHE[key] = work(x, lengths, scale)
            return CACHE[key].clone()
        """,
    "forged_defer": """
        # stale answers outside graph capture, and every finish turned into a deferral
        from envaudit.harness import timed_calls
        _finish = timed_calls.JudgedCalls.finish
        timed_calls.JudgedCalls.finish = lambda self, defer=False: _finish(self, defer=True)
        SEEN, LAST = [], []
        def run(x, lengths, scale):
            SEEN.append(1)
            if len(SEEN) > 8 and LAST and not torch.cuda.is_current_stream_capturing():
                return LAST[-1].clone()
            out = work(x, lengths, scale)
            LAST[:] = [out]
            return out
        """,
    "batched_capture": BATCHED_CAPTURE
    + """
        def batching():
            return True
        """,
    "batched_unless_chained": BATCHED_CAPTURE
    + """
        # reads the harness's own state (its process is the solution's) to batch only where
        # the calls are not chained, and computes honestly in the chained graph
        import gc
        from envaudit.harness.timed_calls import JudgedCalls
        def batching():
            return not any(
                isinstance(o, JudgedCalls) and o.mode == "chained_graph" and o.rows is not None
                for o in gc.get_objects()
            )
        """,
    "early_check": EARLY_CHECK.replace("expensive(", "work("),
    "pipelined": STEP_HOOKS
    + """
        # eager: the next step's work on a side stream as soon as this step's output (and so
        # the key that rolls the next draw) exists on the GPU; served when its step comes
        SIDE = []
        def run(x, lengths, scale):
            if torch.cuda.is_current_stream_capturing() or "step" not in NOW:
                return work(x, lengths, scale)
            calls, step = NOW["calls"], NOW["step"]
            main = torch.cuda.current_stream()
            if not SIDE:
                SIDE.append(torch.cuda.Stream())
            ahead = AHEAD.pop(step, None)
            if ahead is None:
                out = work(x, lengths, scale)
            else:
                out, done = ahead
                main.wait_event(done)
                out.record_stream(main)
            if step + 1 < NOW["end"] and calls.fresh is not None:
                key = witness.chain_key([out])
                chained, kept = torch.empty_like(x), lengths.clone()
                ready = torch.cuda.Event()
                ready.record(main)
                with torch.cuda.stream(SIDE[0]):
                    SIDE[0].wait_event(ready)
                    copy = (step + 1) % len(calls.copies)
                    calls.fresh.draw_chained_into(chained, calls.nonce, step + 1, copy, key)
                    after = work(chained, kept, scale)
                    done = torch.cuda.Event()
                    done.record(SIDE[0])
                AHEAD[step + 1] = (after, done)
            return out
        """,
    "moved_ahead": STEP_HOOKS
    + ROLL
    + """
        # eager: at a batch's first step, every later step's work starts on 8 side streams on
        # the nonce's draws as they are; each step serves its answer moved as the chain would
        # move the input, with the key of its own previous output (the toy's work is per
        # element, so moving the input moves the answer)
        STREAMS, PREVIOUS = [], []
        def core(x, scale):
            torch.cuda._sleep(200_000)
            return x * scale
        def run(x, lengths, scale):
            if torch.cuda.is_current_stream_capturing() or "step" not in NOW:
                return work(x, lengths, scale)
            calls, step = NOW["calls"], NOW["step"]
            if calls.fresh is None:
                return work(x, lengths, scale)
            main = torch.cuda.current_stream()
            if not STREAMS:
                STREAMS.extend(torch.cuda.Stream() for _ in range(8))
            if step == calls.first:
                ready = torch.cuda.Event()
                ready.record(main)
                for later in range(step + 1, NOW["end"]):
                    side = STREAMS[later % len(STREAMS)]
                    with torch.cuda.stream(side):
                        side.wait_event(ready)
                        copy = later % len(calls.copies)
                        drawn = calls.fresh.draw(calls.nonce, later, copy, x.device)
                        answer = core(drawn, scale)
                        done = torch.cuda.Event()
                        done.record(side)
                    AHEAD[later] = (answer, done)
            ahead = AHEAD.pop(step, None)
            if ahead is None or not PREVIOUS:
                out = work(x, lengths, scale)
            else:
                answer, done = ahead
                main.wait_event(done)
                answer.record_stream(main)
                out = scaled(roll(answer, witness.chain_key(PREVIOUS)), lengths, 1.0)
            PREVIOUS[:] = [out]
            return out
        """,
}
HONEST = """
    def run(x, lengths, scale):
        return work(x, lengths, scale)
    """


@pytest.fixture(scope="module")
def gpu_timing_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    bodies = {name: WORK + textwrap.dedent(body) for name, body in CHEATS.items()}
    bodies["honest"] = WORK + textwrap.dedent(HONEST)
    where = ["--gpu", gpu_uuid()]
    return timed_lines(tmp_path_factory.mktemp("gpu-timing"), bodies, where, ("--graph-timing",))


def test_the_honest_solution_passes_unflagged_on_the_gpu(gpu_timing_run: dict) -> None:
    line = gpu_timing_run["honest"]
    assert line["status"] == "PASSED", line["message"]
    assert "flags" not in line["timing"], line["timing"].get("flags")
    for mode in ("eager", "graph", "chained_graph"):
        judge = line["timing"][mode]["judge"]
        assert judge["consistent"] and judge["checked_calls"] >= 1, (mode, judge)
        assert line["timing"][mode]["median_ms"] >= 0.05, line["timing"][mode]
    assert line["timing"]["chained_graph"]["judge"]["chain_call_ms"] > 0


@pytest.mark.parametrize(
    "name",
    [
        n
        for n in CHEATS
        if n
        not in ("storage_cache", "pipelined", "moved_ahead", "side_stream", "copied_in_capture")
    ],
)
def test_no_cheat_passes_unflagged_on_the_gpu(gpu_timing_run: dict, name: str) -> None:
    line = gpu_timing_run[name]
    flags = (line.get("timing") or {}).get("flags") or []
    assert line["status"] != "PASSED" or flags, (line["status"], line.get("timing"))


def flush_ms() -> float:
    """The median time of the harness's L2 flush on this GPU, as the timing loop runs it."""
    flush = timing.flush_buffer(torch.device("cuda"))
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(21):
        start.record()
        flush.zero_()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def test_work_left_on_a_side_stream_fails_is_flagged_or_costs_its_time(
    gpu_timing_run: dict,
) -> None:
    """Unflagged, it passes only where the side stream's work ran inside the timed region after
    all (an H100 read 0.257 ms a call for 0.1 ms of work), but for what overlapped the L2
    flush that precedes each step's start event: the step's input is drawn before the flush,
    so the side stream can read it while the flush runs, and the judge's window does not see
    work that overlaps the harness's own (docs/harness.md, "What it does not cover": an H100
    read 0.084 ms a call in session 75; its flush writes 100 MiB, about 0.03 ms)."""
    line = gpu_timing_run["side_stream"]
    flags = (line.get("timing") or {}).get("flags") or []
    if line["status"] == "PASSED" and not flags:
        bound = 0.1 - flush_ms()
        assert line["timing"]["eager"]["median_ms"] >= bound, (bound, line["timing"]["eager"])


def test_a_storage_keyed_cache_never_hits_on_the_gpu(gpu_timing_run: dict) -> None:
    """Every fresh draw writes the input, so a cache keyed by storage and write counter misses:
    the solution passes at its true cost, in both modes, or fails."""
    line = gpu_timing_run["storage_cache"]
    if line["status"] == "PASSED":
        assert "flags" not in line["timing"], line["timing"].get("flags")
        for mode in ("eager", "graph"):
            assert line["timing"][mode]["median_ms"] >= 0.05, line["timing"][mode]


def test_answers_computed_ahead_cost_their_true_time_on_the_gpu(gpu_timing_run: dict) -> None:
    """The next step's input is rolled by this step's outputs (witness.chain_key), so work
    started ahead on a side stream can overlap only the harness's own work between two calls
    (the draw, the flush): the eager figure stays above half the work's time, or it fails."""
    line = gpu_timing_run["pipelined"]
    if line["status"] == "PASSED":
        assert line["timing"]["eager"]["median_ms"] >= 0.05, line["timing"]["eager"]
    else:
        assert line["status"] == "INCORRECT_NUMERICAL", (line["status"], line["message"])


def test_answers_moved_by_the_chain_key_are_wrong_on_the_gpu(gpu_timing_run: dict) -> None:
    """Every later step's work started ahead on the nonce's draws, each answer moved as the
    chain's old roll moved the input: the keyed draw is new values, not a known draw moved,
    so those answers are wrong (unless the judge's one check landed on a batch's first step,
    which the cheat answered honestly)."""
    wrong_unless_checked_where_honest(gpu_timing_run["moved_ahead"])


def test_answers_copied_between_captured_calls_are_wrong(gpu_timing_run: dict) -> None:
    """Each captured call reads a row of its own of the fresh input (witness.graph_call_cap):
    an answer copied from an earlier call of the same input copy answers another input. Before,
    calls of one copy read the same values in every replay, and this cheat passed at the cost
    of its first call per copy. It passes only where the judge's one graph check landed on a
    call it computed (the first `input_copies` of the replay)."""
    line = gpu_timing_run["copied_in_capture"]
    if line["status"] == "PASSED":
        graph = line["timing"]["graph"]
        calls, copies = graph["calls_per_sample"], graph["input_copies"]
        assert calls > copies, graph  # else nothing was copied: not this test's case
        picked = graph["judge"]["picked"]
        assert picked and all(slot % calls < copies for _, slot in picked), graph["judge"]
    else:
        assert line["status"] == "INCORRECT_NUMERICAL", (line["status"], line["message"])
        assert "a timed call (graph)" in line["message"], line["message"]


def test_a_capture_that_batches_its_calls_fails_or_is_flagged(gpu_timing_run: dict) -> None:
    """A capture that does every call's work at its last call is right wherever the judge
    looks in the graph, and read about 1/calls of its work a call. The chained graph keys each
    call's input by the call before's outputs: batched there too, its calls but a graph's first
    answer inputs the judge does not draw, and the judge's check there is drawn from those
    (INCORRECT); done honestly there (the cheat reads the harness's mode), its figure bounds the
    graph's, which is flagged (docs/harness.md, "Timing integrity", item 3)."""
    for name in ("batched_capture", "batched_unless_chained"):
        line = gpu_timing_run[name]
        timing = line.get("timing") or {}
        if line["status"] != "PASSED":
            assert line["status"] == "INCORRECT_NUMERICAL", (name, line["message"])
            assert "a timed call (chained_graph)" in line["message"], line["message"]
            continue
        flags = timing.get("flags") or []
        assert any("batches its calls" in f for f in flags), (name, timing)
    honest = gpu_timing_run["batched_unless_chained"]["timing"].get("chained_graph") or {}
    assert honest.get("median_ms", 0.1) >= 0.05, honest
