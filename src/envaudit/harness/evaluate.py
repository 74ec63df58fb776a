"""Judge one solution on one workload: validate, then time, then re-check on fresh inputs.

Order and rules (docs/harness.md):
1. Inputs are materialised and the workload's constraints evaluated (whatever keeps them from
   being drawn is the workload's fault: WORKLOAD_ERROR). Tensor inputs are snapshotted so any
   write to them is caught. No reference exists in this process: each judged call's outputs,
   fixed as it returns, go to the judge (envaudit.harness.judge), which only then computes or
   loads the reference in a process of its own and answers with a verdict.
2. On a GPU the solution is called once unjudged (module loads, JIT), then once judged.
   Destination-passing outputs are poisoned first (NaN for floats;
   for integer and boolean outputs the call is repeated with a second poison value and both
   results must agree). Value-returning solutions on a GPU start from an emptied allocator
   whose free blocks read as poison (and integer outputs are computed twice, over two poisons).
   Outputs are copied on the current stream right after the call, so work left on an
   unsynchronised side stream is not waited for.
3. Only a correct result is timed: eager, and optionally as a replayed CUDA graph; `prepare`
   runs outside timing and its duration is reported. A worker started beside the previous job
   on its GPU times nothing before that job's process has gone (EvalContext.quiet); an
   out-of-memory error met before then (memory that process still held) is not the solution's:
   the workload is evaluated again once it has gone.
4. After timing, the solution runs once more on a fresh draw of the inputs, written into the
   tensors it was timed on, and must pass again.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from envaudit.harness.environment import SmClock, clock_state
from envaudit.harness.inputs import (
    InputError,
    check_constraints,
    draw_checked,
    output_layouts,
    scalable_inputs,
    tensor_bytes,
    torch_dtype,
)
from envaudit.harness.judge import Submitter, correctness, probe_point, scaled
from envaudit.harness.solution import LoadedSolution
from envaudit.harness.timed_calls import JudgedCalls
from envaudit.harness.timing import (
    CPU_TARGET_MEASURE_MS,
    MAX_INPUT_COPIES,
    TARGET_MEASURE_MS,
    GraphCaptureError,
    time_eager_cuda,
    time_graph_cuda,
    time_wall_clock,
)
from envaudit.harness.witness import CHAINED_GRAPH, fresh_input, poison_value
from envaudit.schema.options import EvalOptions
from envaudit.schema.progress import QuietGate

SCALE_FACTORS = (0.1, 10.0)
"""The scale probe's factors beside x1 (the formal validation itself)."""
ROTATION_BUDGET_BYTES = 1 << 30
TRACEBACK_CHARS = 4000


@dataclass
class EvalContext:
    definition: Mapping[str, Any]
    solution: LoadedSolution
    root: Path
    device: torch.device
    judge: Submitter
    """Where each call's fixed outputs go to be judged: the expected answers live there, out
    of this process (envaudit.harness.judge)."""
    options: EvalOptions = field(default_factory=EvalOptions)
    clock: SmClock | None = None
    """The GPU's SM clock (NVML), read while timing warms up."""
    quiet: QuietGate = field(default_factory=QuietGate)
    """Open once no other job's process is left on the GPU; timing waits for it."""


class SolutionFailure(Exception):
    """The solution raised; carries the status and a message for the result line."""

    def __init__(self, status: str, message: str, out_of_memory: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.out_of_memory = out_of_memory


class PhaseClock:
    """Wall seconds spent in each phase of one workload's evaluation, in the order entered.
    They go into the line as `phases_s` so that an audit's profile (benchmarks/audit_profile.py)
    comes from the lines themselves, with no second instrumented run."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            spent = time.perf_counter() - start
            self.seconds[name] = self.seconds.get(name, 0.0) + spent

    def reassign(self, seconds: float, source: str, target: str) -> None:
        """Count `seconds` spent inside `source` as `target`'s (the judge's share of a phase)."""
        seconds = min(seconds, self.seconds.get(source, 0.0))
        self.seconds[source] = self.seconds.get(source, 0.0) - seconds
        self.seconds[target] = self.seconds.get(target, 0.0) + seconds

    def as_dict(self) -> dict[str, float]:
        return {name: round(spent, 6) for name, spent in self.seconds.items()}


def evaluate_workload(ctx: EvalContext, workload: Mapping[str, Any]) -> dict[str, Any]:
    """The outcome part of a result line for one workload. Run out of memory while the
    previous job's process may still hold some, it is evaluated again once that has gone (the
    phases of both attempts add up)."""
    clock = PhaseClock()
    beside = not ctx.quiet.is_open()
    outcome, out_of_memory = _attempt(ctx, workload, clock)
    if beside and out_of_memory:
        _await_quiet(ctx, clock)
        torch.cuda.empty_cache()
        outcome, _ = _attempt(ctx, workload, clock)
    outcome["phases_s"] = clock.as_dict()
    return outcome


def _attempt(
    ctx: EvalContext, workload: Mapping[str, Any], clock: PhaseClock
) -> tuple[dict[str, Any], bool]:
    """One evaluation: (the outcome, whether it ran out of GPU memory)."""
    outcome: dict[str, Any] = {"status": "PASSED", "message": ""}
    try:
        _evaluate(ctx, workload, outcome, clock)
    except SolutionFailure as failure:
        outcome.update(status=failure.status, message=failure.message)
        return outcome, failure.out_of_memory
    except InputError as exc:
        outcome.update(status="WORKLOAD_ERROR", message=f"workload inputs: {exc}")
    except torch.cuda.OutOfMemoryError as exc:  # drawing inputs, the reference
        outcome.update(status="RUNTIME_ERROR", message=f"out of memory: {exc}")
        return outcome, True
    return outcome, False


def _await_quiet(ctx: EvalContext, clock: PhaseClock) -> None:
    """Wait until no other job's process is left on the GPU (`quiet_wait` in the phases)."""
    if not ctx.quiet.is_open():
        with clock.phase("quiet_wait"):
            ctx.quiet.wait()


def _evaluate(
    ctx: EvalContext, workload: Mapping[str, Any], outcome: dict[str, Any], clock: PhaseClock
) -> None:
    with clock.phase("inputs"):
        inputs = _inputs(ctx, workload, seed_offset=0)
    kept: list[tuple[list[Any], list[Any]]] = []  # (outputs, their snapshot), checked last
    with clock.phase("validation"):
        verdict, prepare_ms = _validate(ctx, workload, inputs, "validation", kept=kept)
    clock.reassign(_judged_s(verdict), "validation", "reference")
    outcome["prepare_ms"] = prepare_ms
    outcome["reference_cached"] = bool(verdict.get("reference_cached"))
    if "comparisons" in verdict:
        outcome["correctness"] = correctness(verdict["comparisons"])
    if verdict.get("strict") is not None:
        outcome["strict_diagnostic"] = verdict["strict"]
    if ctx.options.scale_probe:
        with clock.phase("scale_probe"):
            outcome["scale_probe"] = _scale_probe(ctx, workload, verdict)
    _raise_unless_passed(verdict)
    if ctx.options.validation_only:
        return
    outcome["timing"] = _time(ctx, workload, inputs, clock)
    with clock.phase("recheck"):
        _redraw_in_place(ctx, workload, inputs)
        recheck, _ = _validate(ctx, workload, inputs, "recheck", kept=kept)
    clock.reassign(_judged_s(recheck), "recheck", "reference")
    if "comparisons" in recheck:
        outcome["recheck"] = correctness(recheck["comparisons"])
    _raise_unless_passed(recheck, "post-timing re-check on fresh inputs: ")
    for produced, snapshot in kept:  # the validation's outputs, a whole measurement later
        _check_settled(produced, snapshot)


def _judged_s(verdict: Mapping[str, Any]) -> float:
    """The seconds the judge spent on a verdict (drawing, the reference, comparing)."""
    spent = verdict.get("judge_s")
    return float(spent) if isinstance(spent, int | float) else 0.0


def _raise_unless_passed(verdict: Mapping[str, Any], prefix: str = "") -> None:
    status = str(verdict.get("status"))
    if status != "PASSED":
        oom = bool(verdict.get("out_of_memory"))
        raise SolutionFailure(status, prefix + str(verdict.get("message", "")), oom)


def _redraw_in_place(ctx: EvalContext, workload: Mapping[str, Any], inputs: dict[str, Any]) -> None:
    """The re-check's fresh draw, written into the very tensors the solution was validated and
    timed on: a solution that caches its answer by an input's storage address (or anything
    else that stays with the tensor) returns a stale answer here, on every device, whatever
    the allocator does with fresh memory."""
    fresh = _inputs(ctx, workload, seed_offset=1)
    for name, value in fresh.items():
        old = inputs.get(name)
        same = isinstance(old, torch.Tensor) and isinstance(value, torch.Tensor)
        if same and (old.shape, old.dtype) == (value.shape, value.dtype):  # type: ignore[union-attr]
            old.copy_(value)  # type: ignore[union-attr]
        else:
            inputs[name] = value
    if ctx.device.type == "cuda":
        torch.cuda.synchronize(ctx.device)


def _inputs(ctx: EvalContext, workload: Mapping[str, Any], seed_offset: int) -> dict[str, Any]:
    inputs = draw_checked(ctx.definition, workload, ctx.root, ctx.device, seed_offset)
    broken = check_constraints(ctx.definition, workload, inputs)
    if broken:
        raise InputError(f"constraint {broken[0]!r} does not hold for these inputs")
    return inputs


def _scale_probe(
    ctx: EvalContext, workload: Mapping[str, Any], formal: Mapping[str, Any]
) -> dict[str, Any]:
    """Validation repeated with the scalable inputs (`scalable_inputs`) multiplied by each of
    SCALE_FACTORS, against the reference on the same scaled inputs, under the formal tolerance:
    whether a pass holds away from the one input distribution the workload draws, and how the
    error grows. x1 is the formal validation. A factor whose inputs break a constraint, or on
    which the solution fails outright, is recorded as such; nothing here changes the status."""
    names = scalable_inputs(ctx.definition, workload)
    probe: dict[str, Any] = {"inputs": names, "points": [_verdict_point(1.0, formal)]}
    if not names:
        probe["note"] = "no input to scale (only zero-mean normal random floats are scaled)"
        return probe
    for factor in SCALE_FACTORS:
        drawn = draw_checked(ctx.definition, workload, ctx.root, ctx.device, 0)
        inputs = scaled(ctx.definition, workload, drawn, factor)
        broken = check_constraints(ctx.definition, workload, inputs)
        if broken:
            probe["points"].append({"factor": factor, "skipped": f"constraint {broken[0]!r}"})
            continue
        try:
            verdict, _ = _validate(ctx, workload, inputs, "scale", factor)
        except SolutionFailure as failure:
            point = {"factor": factor, "status": failure.status, "message": failure.message[:300]}
            probe["points"].append(point)
            continue
        probe["points"].append(_verdict_point(factor, verdict))
    return probe


def _verdict_point(factor: float, verdict: Mapping[str, Any]) -> dict[str, Any]:
    if "comparisons" in verdict:
        return probe_point(factor, verdict["comparisons"])
    return {"factor": factor, "status": verdict.get("status"), "message": verdict.get("message")}


def _output_dtypes(definition: Mapping[str, Any]) -> list[torch.dtype]:
    return [torch_dtype(spec["dtype"]) for spec in definition["outputs"].values()]


def _allocate_outputs(
    ctx: EvalContext, workload: Mapping[str, Any], variant: int
) -> list[torch.Tensor]:
    return [
        torch.full(shape, poison_value(dtype, variant), dtype=dtype, device=ctx.device)
        for shape, dtype in output_layouts(ctx.definition, workload)
    ]


POISON_BYTES = (0xFF, 0x5A)  # 0xFF is NaN in every float format; ints see -1, then 0x5A5A...
SMALL_POOL_BYTES = 2 << 20  # torch's caching allocator serves requests <= 1 MiB from 2 MiB segments


def _poison_allocator(ctx: EvalContext, workload: Mapping[str, Any], variant: int) -> None:
    """Make every block the caching allocator holds free read as poison before a value-returning
    call, so outputs made with `torch.empty` cannot inherit a stale copy of the answer (the
    reference's own temporaries, an earlier call's result). The cache is emptied first; then
    both pools are refilled with poison-filled blocks larger than the outputs, and released."""
    if ctx.device.type != "cuda":
        return
    torch.cuda.synchronize(ctx.device)
    torch.cuda.empty_cache()
    sizes = [
        tensor_bytes(shape, dtype) for shape, dtype in output_layouts(ctx.definition, workload)
    ]
    large = sum(2 * size for size in sizes if size > SMALL_POOL_BYTES // 2)
    free_bytes, _ = torch.cuda.mem_get_info(ctx.device)
    requests = [SMALL_POOL_BYTES // 2] * 4
    if large:
        requests.append(min(large + (20 << 20), free_bytes // 2))
    fill = POISON_BYTES[variant]
    blocks = [torch.full((n,), fill, dtype=torch.uint8, device=ctx.device) for n in requests]
    torch.cuda.synchronize(ctx.device)
    del blocks


def _snapshot_buffers(ctx: EvalContext, workload: Mapping[str, Any]) -> list[torch.Tensor] | None:
    """Buffers for the post-call snapshot, allocated and copied into once before the call. Under
    CUDA's lazy module loading the first launch of a kernel can wait for the whole device; a
    snapshot that allocated or loaded its copy kernel only after the call would let a side stream
    finish first (seen on the H200: the first workload of a fresh worker passed)."""
    if ctx.device.type != "cuda":
        return None
    buffers = _allocate_outputs(ctx, workload, 0)
    for buffer in buffers:
        buffer.copy_(torch.empty_like(buffer))
    torch.cuda.synchronize(ctx.device)
    return buffers


def _snapshot(produced: list[Any], buffers: list[torch.Tensor] | None) -> list[Any]:
    snapshot: list[Any] = []
    for index, value in enumerate(produced):
        buffer = buffers[index] if buffers is not None and index < len(buffers) else None
        if not isinstance(value, torch.Tensor):
            snapshot.append(value)
        elif buffer is not None and (buffer.shape, buffer.dtype) == (value.shape, value.dtype):
            snapshot.append(buffer.copy_(value))
        else:
            snapshot.append(value.clone())
    return snapshot


def _call(
    ctx: EvalContext,
    inputs: Mapping[str, Any],
    outputs: list[torch.Tensor] | None,
    prepared: Any,
    buffers: list[torch.Tensor] | None,
) -> tuple[list[Any], list[Any]]:
    """One call: (a snapshot of the outputs taken on the current stream as it returned, the
    outputs themselves, to be checked again later with `_check_settled`)."""
    try:
        result = ctx.solution.call(inputs, outputs, prepared)
        produced = outputs if ctx.solution.destination_passing else result
        if isinstance(produced, torch.Tensor):
            produced = [produced]
        elif isinstance(produced, tuple | list):
            produced = list(produced)
        else:
            produced = [produced]
        _require_on_device(ctx, produced)
        snapshot = _snapshot(produced, buffers)
        if ctx.device.type == "cuda":
            torch.cuda.synchronize(ctx.device)
            _check_settled(produced, snapshot)
    except SolutionFailure:
        raise
    except torch.cuda.OutOfMemoryError as exc:
        raise SolutionFailure("RUNTIME_ERROR", f"out of memory: {exc}", True) from exc
    except (Exception, SystemExit, KeyboardInterrupt) as exc:  # an exit is the call's failure
        tail = traceback.format_exc()[-TRACEBACK_CHARS:]
        raise SolutionFailure("RUNTIME_ERROR", f"{type(exc).__name__}: {exc}\n{tail}") from exc
    return snapshot, produced


def _require_on_device(ctx: EvalContext, produced: list[Any]) -> None:
    """Every tensor output lives on the run's device: a meta tensor (or one on another device)
    holds no answer the harness can read, and is the solution's failure, named as such."""
    for index, value in enumerate(produced):
        if isinstance(value, torch.Tensor) and (
            value.is_meta or value.device.type != ctx.device.type
        ):
            raise SolutionFailure(
                "RUNTIME_ERROR",
                f"output {index} is a tensor on {value.device}; the run's outputs belong on"
                f" {ctx.device}",
            )


def _bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and torch.equal(
        a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8)
    )


def _own_outputs(
    produced: list[Any], snapshot: list[Any], inputs: Mapping[str, Any]
) -> tuple[list[Any], list[Any]]:
    """The outputs (and their snapshots) whose memory is no input's, None in place of the others
    (so an index still names its output): an output that is a view
    of an input (a mutable cache the call returns, an identity) changes when the harness writes
    that input later (timing's calls, the re-check's draw), which says nothing of the call."""
    held = {
        value.untyped_storage().data_ptr()
        for value in inputs.values()
        if isinstance(value, torch.Tensor) and value.numel()
    }
    aliased = [
        isinstance(live, torch.Tensor)
        and bool(live.numel())
        and live.untyped_storage().data_ptr() in held
        for live in produced
    ]
    return (
        [None if gone else live for live, gone in zip(produced, aliased, strict=True)],
        [None if gone else early for early, gone in zip(snapshot, aliased, strict=True)],
    )


def _check_settled(produced: list[Any], snapshot: list[Any]) -> None:
    """Outputs must not change once the call has returned and the device is idle: if they
    do, the solution left work running (on another stream the caller's stream does not wait
    for, or on a thread of its own) that writes them after the answer was taken. Checked at
    once on a GPU and, on every device, again after the judge's verdict (tens of ms later)."""
    for index, (live, early) in enumerate(zip(produced, snapshot, strict=True)):
        if isinstance(live, torch.Tensor) and not _bits_equal(live, early):
            raise SolutionFailure(
                "INCORRECT_NUMERICAL",
                f"output {index} was still being written after the call returned"
                " (work left running on another stream or thread that the call did not wait"
                " for)",
            )


def _prepare(ctx: EvalContext, inputs: Mapping[str, Any]) -> tuple[Any, float | None]:
    if ctx.solution.prepare is None:
        return None, None
    start = time.perf_counter()
    try:
        prepared = ctx.solution.prepare(*inputs.values())
        if ctx.device.type == "cuda":
            torch.cuda.synchronize(ctx.device)
    except Exception as exc:
        msg = f"prepare raised {type(exc).__name__}: {exc}\n{traceback.format_exc()[-2000:]}"
        raise SolutionFailure("RUNTIME_ERROR", msg) from exc
    return prepared, (time.perf_counter() - start) * 1e3


def _warm_up(
    ctx: EvalContext,
    workload: Mapping[str, Any],
    inputs: dict[str, Any],
    prepared: Any,
    before: Mapping[str, torch.Tensor],
) -> None:
    """On a GPU, one unjudged call before the judged one. First launches load modules and JIT
    kernels, and a module load under CUDA's lazy loading waits for the whole device: a first
    call is implicitly synchronised, so it would hide work left on a side stream. Declared
    mutable inputs are restored afterwards; any other write fails now."""
    if ctx.device.type != "cuda":
        return
    dps = ctx.solution.destination_passing
    _call(ctx, inputs, _allocate_outputs(ctx, workload, 0) if dps else None, prepared, None)
    _fail_if_mutated(ctx.definition, before, inputs)
    for name in ctx.definition.get("mutable_inputs") or []:
        if name in before:
            inputs[name].copy_(before[name])
    torch.cuda.synchronize(ctx.device)


def _validate(
    ctx: EvalContext,
    workload: Mapping[str, Any],
    inputs: dict[str, Any],
    purpose: str,
    factor: float | None = None,
    kept: list[tuple[list[Any], list[Any]]] | None = None,
) -> tuple[dict[str, Any], float | None]:
    """Call the solution once, judged: its outputs, fixed as the call returns, go to the judge,
    which only then computes or loads the reference (envaudit.harness.judge). (The verdict,
    prepare's milliseconds.) The outputs and their snapshot go to `kept`, to be compared again
    once the workload's measurement is over: an answer spoiled later by work the call left
    running fails then, on every device."""
    before = {k: v.clone() for k, v in inputs.items() if isinstance(v, torch.Tensor)}
    prepared, prepare_ms = _prepare(ctx, inputs)
    dps = ctx.solution.destination_passing
    _warm_up(ctx, workload, inputs, prepared, before)
    given = _allocate_outputs(ctx, workload, 0) if dps else None
    buffers = _snapshot_buffers(ctx, workload)
    if not dps:
        _poison_allocator(ctx, workload, 0)
    outputs, produced = _call(ctx, inputs, given, prepared, buffers)
    verdict = ctx.judge.submit(str(workload["uuid"]), purpose, factor, outputs)
    if ctx.device.type == "cuda":
        torch.cuda.synchronize(ctx.device)
    _check_settled(produced, outputs)
    if kept is not None:
        kept.append(_own_outputs(produced, outputs, inputs))
    _fail_if_mutated(ctx.definition, before, inputs)
    if verdict.get("status") == "PASSED" and not _all_float(ctx.definition):
        given = _allocate_outputs(ctx, workload, 1) if dps else None
        buffers = _snapshot_buffers(ctx, workload)
        if not dps:
            _poison_allocator(ctx, workload, 1)
        again, _ = _call(ctx, inputs, given, prepared, buffers)
        for name, first, second in zip(ctx.definition["outputs"], outputs, again, strict=True):
            if not torch.equal(first, second):
                msg = f"{name}: result depends on the preallocated output's contents"
                raise SolutionFailure("INCORRECT_NUMERICAL", msg + " (elements left unwritten)")
    return verdict, prepare_ms


def _all_float(definition: Mapping[str, Any]) -> bool:
    return all(dtype.is_floating_point for dtype in _output_dtypes(definition))


def _fail_if_mutated(
    definition: Mapping[str, Any], before: Mapping[str, torch.Tensor], after: Mapping[str, Any]
) -> None:
    mutated = _mutated_inputs(definition, before, after)
    if mutated:
        names = ", ".join(mutated)
        raise SolutionFailure("INPUT_MUTATED", f"the solution wrote to input(s) {names}")


def _mutated_inputs(
    definition: Mapping[str, Any], before: Mapping[str, torch.Tensor], after: Mapping[str, Any]
) -> list[str]:
    allowed = set(definition.get("mutable_inputs") or [])
    changed = []
    for name, old in before.items():
        new = after[name]
        if not _bits_equal(old, new) and name not in allowed:
            changed.append(name)
    return changed


def _input_copies(inputs: dict[str, Any], device: torch.device) -> list[dict[str, Any]]:
    """The inputs plus clones, as many as fit ROTATION_BUDGET_BYTES (GPU only)."""
    if device.type != "cuda":
        return [inputs]
    size = sum(v.numel() * v.element_size() for v in inputs.values() if isinstance(v, torch.Tensor))
    count = max(1, min(MAX_INPUT_COPIES, ROTATION_BUDGET_BYTES // max(size, 1)))
    clones = [
        {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}
        for _ in range(count - 1)
    ]
    return [inputs, *clones]


def _time(
    ctx: EvalContext, workload: Mapping[str, Any], inputs: dict[str, Any], clock: PhaseClock
) -> dict[str, Any]:
    """Eager (or wall-clock) and graph timing, each mode's calls judged (envaudit.harness.witness):
    a wrong answer from a timed call fails the workload like the validation would."""
    _await_quiet(ctx, clock)
    with clock.phase("timing_setup"):
        copies = _input_copies(inputs, ctx.device)
        prepared = [_prepare(ctx, copy)[0] for copy in copies]
    fresh = fresh_input(ctx.definition, workload)

    def judged(mode: str) -> JudgedCalls:
        return JudgedCalls(
            ask=ctx.judge.ask,
            uuid=str(workload["uuid"]),
            mode=mode,
            device=ctx.device,
            call=ctx.solution.call,
            copies=copies,
            prepared=prepared,
            destination_passing=ctx.solution.destination_passing,
            fresh=fresh,
            layouts=output_layouts(ctx.definition, workload),
        )

    timing: dict[str, Any] = {"fresh_input": fresh.name if fresh is not None else None}
    try:
        with clock.phase("eager"):
            calls = judged("eager")
            calls.setup()  # before the warm-up: the judge's set-up is no part of the measurement
            if ctx.device.type == "cuda":
                eager = time_eager_cuda(
                    calls.launch,
                    len(copies),
                    ctx.device,
                    ctx.clock,
                    **ctx.options.budgets(),
                    window=calls,
                )
                timing["eager"] = eager.as_dict()
            else:
                budget = ctx.options.measure_ms or CPU_TARGET_MEASURE_MS
                stats = time_wall_clock(calls.launch, len(copies), budget, calls)
                timing["eager"] = stats.as_dict()
    except Exception as exc:
        msg = f"during timing: {type(exc).__name__}: {exc}\n{traceback.format_exc()[-2000:]}"
        raise SolutionFailure("RUNTIME_ERROR", msg) from exc
    graphed = ctx.options.graph_timing and ctx.device.type == "cuda"
    with clock.phase("timed_check"):
        _raise_unless_passed(calls.finish(defer=graphed))
    _window_costs(clock, "eager", calls)
    with clock.phase("clock_read"):
        timing["clocks_after_eager"] = clock_state(ctx.device)
    if graphed:
        calls = judged("graph")
        try:
            with clock.phase("graph"):
                graph = time_graph_cuda(
                    calls.launch,
                    len(copies),
                    ctx.device,
                    ctx.clock,
                    timing["eager"]["median_ms"],
                    **ctx.options.budgets(),
                    window=calls,
                )
                timing["graph"] = graph.as_dict()
        except GraphCaptureError as exc:
            timing["graph"] = None
            timing["graph_error"] = str(exc)[:TRACEBACK_CHARS]
        graph_calls = timing["graph"]["calls_per_sample"] if timing["graph"] else None
        with clock.phase("timed_check"):  # the eager calls' check too, where it was deferred
            _raise_unless_passed(calls.finish(defer=graph_calls is not None and fresh is not None))
        _window_costs(clock, "graph", calls)
        if graph_calls is not None and fresh is not None:
            timing[CHAINED_GRAPH] = _time_chained(ctx, judged(CHAINED_GRAPH), timing, clock)
    return timing


CHAINED_MEASURE_MS = 100.0
"""The chained graph's measured time, at most: a bound needs less than a figure (its rule has
25% of slack, judge.BATCH_RATIO, where a power-limited clock's median over 80-100 ms of calls
varies by about 1%: timing.WANDER_MIN_MEASURE_MS), and every millisecond of it is the audit's
wall time."""


def _time_chained(
    ctx: EvalContext, calls: JudgedCalls, timing: dict[str, Any], clock: PhaseClock
) -> dict[str, Any] | None:
    """The graph again, as many calls a replay, each call's input keyed by the outputs of the
    call before (witness.CHAINED_GRAPH): what the calls cost one after another, which the judge
    holds the graph figure to (a capture that batches its calls is flagged). Its figure ranks
    nothing; a capture that fails here leaves the graph figure unbounded, and flagged."""
    budget = min(ctx.options.budgets().get("budget_ms", TARGET_MEASURE_MS), CHAINED_MEASURE_MS)
    try:
        with clock.phase(CHAINED_GRAPH):
            chained = time_graph_cuda(
                calls.launch,
                len(calls.copies),
                ctx.device,
                ctx.clock,
                timing["graph"]["median_ms"],
                budget_ms=budget,
                wander_ms=budget,
                window=calls,
                calls=timing["graph"]["calls_per_sample"],
            )
    except GraphCaptureError as exc:
        timing["chained_graph_error"] = str(exc)[:TRACEBACK_CHARS]
        chained = None
    with clock.phase("timed_check"):  # the graph's and eager calls' checks too
        _raise_unless_passed(calls.finish())
    _window_costs(clock, CHAINED_GRAPH, calls)
    return chained.as_dict() if chained is not None else None


def _window_costs(clock: PhaseClock, mode: str, calls: JudgedCalls) -> None:
    """What judged timing added inside a mode's phase, counted as phases of their own
    (timed_calls.WINDOW_COSTS), so that a profile shows them beside the measurement."""
    for part, seconds in calls.spent.items():
        clock.reassign(seconds, mode, f"{mode}_{part}")
