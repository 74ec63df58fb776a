"""The result line as typed models, for every reader outside the harness.

The harness writes a line as a plain dict with the standard library
(`envaudit.schema.results.result_line`: one JSON object per solution and workload); the report
(`envaudit.report`) and the runtime read lines only through `ResultLine`: attributes in place of
dict walks, the closure hash from one field (`ResultLine.closure_hash`, which is
`context.closure_hash`), the key from one rule (`ResultLine.key`, which is
`envaudit.schema.results.line_identity`).

Shapes, by `schema_version` (RESULT_SCHEMA_VERSION is the one written now):
- 1: the closure hash written twice, in `context.closure_hash` and, on lines with an
  environment check, again in `context.env_check.lock_closure_hash` (the same value: every
  runtime set both from one lock);
- 2: once, in `context.closure_hash`.
Validating a line of either shape gives the current one: the echo is checked against
`context.closure_hash` (a line where the two differ is refused, naming the field) and dropped.
`ResultLine.written()` gives the line back exactly as it was read, the echo put back on a line
that had one, so merged result files, and the report made from them, do not change with the
model; `model_dump(exclude_unset=True)` gives the current shape.

Every field a writer may leave out is optional and nothing absent is invented on the way back
(`exclude_unset`); fields this model does not know (a newer harness's) are kept as they are
(`extra="allow"`). Types are strict, so a line round-trips value for value: a count stays an
int, a figure written as 1 stays 1 (`Number`), a string is never taken for a number.

`docs/schema/result-line.schema.json` is ResultLine's JSON Schema (`make schemas`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    PlainValidator,
    PrivateAttr,
    ValidationError,
    WithJsonSchema,
    model_validator,
)
from pydantic_core import PydanticCustomError

from envaudit.schema.results import (
    RESULT_SCHEMA_VERSION,
    LineKey,
    instant,
    line_identity,
    newest_per_key,
    read_lines,
)

READABLE_VERSIONS = tuple(range(1, RESULT_SCHEMA_VERSION + 1))
"""The schema versions this model reads (each upgraded to the current shape)."""

ECHO = "lock_closure_hash"
"""Version 1's second copy of the closure hash, in `context.env_check`."""


def _number(value: object) -> int | float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value
    raise PydanticCustomError("number_type", "Input should be a number")


Number = Annotated[int | float, PlainValidator(_number), WithJsonSchema({"type": "number"})]
"""A figure: kept as written (1 stays 1, 1.0 stays 1.0; NaN and infinities pass)."""

Mode = Literal["eager", "graph"]


class _Part(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True, use_attribute_docstrings=True)


# ------------------------------------------------------------------ the outcome


class OutputComparison(_Part):
    """How one output compared with the reference (harness/compare.py)."""

    output: str | None = None
    status: str | None = None
    matched: int | None = None
    total: int | None = None
    required: int | None = None
    nonfinite: int | None = None
    max_abs: Number | None = None
    max_rel: Number | None = None
    max_rel_eps: Number | None = None
    message: str | None = None


class Correctness(_Part):
    """`correctness` (the validation) or `recheck` (the post-timing re-check on fresh inputs)."""

    max_absolute_error: Number | None = None
    max_relative_error: Number | None = None
    outputs: list[OutputComparison] = Field(default_factory=list)


class StrictOutput(_Part):
    output: str | None = None
    holds: bool | None = None
    matched: int | None = None
    total: int | None = None
    required: int | None = None
    factor: Number | None = None


class StrictDiagnostic(_Part):
    """The outputs against the definition's diagnostic tolerance (recorded, never a status)."""

    holds: bool | None = None
    outputs: list[StrictOutput] = Field(default_factory=list)


class ProbePoint(_Part):
    factor: Number | None = None
    status: str | None = None
    message: str | None = None
    skipped: str | None = None
    max_absolute_error: Number | None = None
    max_relative_error: Number | None = None
    outputs: list[OutputComparison] = Field(default_factory=list)


class ScaleProbe(_Part):
    """Validation repeated on scaled inputs (recorded, never a status)."""

    inputs: list[str] = Field(default_factory=list)
    note: str | None = None
    points: list[ProbePoint] = Field(default_factory=list)


class TimingStats(_Part):
    """One timing mode's statistics (harness/timing.py, TimingStats)."""

    mode: str | None = None
    median_ms: Number | None = None
    min_ms: Number | None = None
    max_ms: Number | None = None
    q1_ms: Number | None = None
    q3_ms: Number | None = None
    iqr_ms: Number | None = None
    mean_ms: Number | None = None
    iterations: int | None = None
    warmup_iterations: int | None = None
    calls_per_sample: int | None = None
    input_copies: int | None = None
    l2_flush_bytes: int | None = None
    warmup_wall_ms: Number | None = None
    measure_wall_ms: Number | None = None
    stop: str | None = None
    median_halfwidth: Number | None = None
    sm_clock_mhz: int | None = None
    clock_steady: bool | None = None
    sm_clock_range_mhz: list[int] | None = None
    power_limited: bool | None = None
    warmup_power_w: Number | None = None
    budget_ms: Number | None = None
    judge: dict[str, Any] | None = None
    """The judge's account of this mode (harness/witness.py): its clock over the batches
    against the reported time and the allowance, the timed calls it checked."""

    def positive_median(self) -> float | None:
        """The median in ms when it is a positive number."""
        median = self.median_ms
        return float(median) if median is not None and median > 0 else None


class ClockState(_Part):
    sm_clock_mhz: int | None = None
    temperature_c: int | None = None
    power_w: Number | None = None
    throttle_reasons: list[str] | None = None
    nvml_error: str | None = None


class Timing(_Part):
    eager: TimingStats | None = None
    clocks_after_eager: ClockState | None = None
    graph: TimingStats | None = None
    """None when the graph capture failed (`graph_error` says why)."""
    graph_error: str | None = None
    chained_graph: TimingStats | None = None
    """The graph again, each captured call's input keyed by the call before's outputs: what
    the calls cost one after another, which bounds the graph figure from below (a capture that
    batches its calls is flagged). Ranks nothing."""
    chained_graph_error: str | None = None
    fresh_input: str | None = None
    """The input drawn afresh for every timed call (None: the workload draws none at random)."""
    flags: list[str] | None = None
    """Why a mode's figure cannot be trusted (the judge's clock disagrees, it was not witnessed):
    a flagged line never ranks its solution."""

    def of(self, mode: Mode) -> TimingStats | None:
        return self.graph if mode == "graph" else self.eager


class Achieved(_Part):
    """TFLOP/s and GB/s from the definition's formulas, per timing mode."""

    eager_tflops: Number | None = None
    eager_gbps: Number | None = None
    graph_tflops: Number | None = None
    graph_gbps: Number | None = None

    def of(self, mode: Mode) -> tuple[float | None, float | None]:
        """(TFLOP/s, GB/s) of one mode."""
        if mode == "graph":
            return self.graph_tflops, self.graph_gbps
        return self.eager_tflops, self.eager_gbps


class NativeBuild(_Part):
    """How a cuda/cpp solution was compiled in its job (harness/solution.py, build_native):
    on the job's first line."""

    module: str
    arch: str = Field(
        description="The arch compiled for: sm90a for 9.0a, the GPU's or TORCH_CUDA_ARCH_LIST's"
        " (several joined by _), or cpu."
    )
    seconds: Number = Field(description="The build's wall time, or the cached module's load.")
    cached: bool = Field(description="The environment's cache held the module already.")
    log: str = Field(description="The compiler's output, its end.")


class Outcome(_Part):
    """The evaluation's part of a line (harness/evaluate.py, judge.py; the supervisor's for a
    worker that died): written at the top level of the line, beside its identity."""

    status: str
    """An EvaluationStatus; an unknown one is read (merge reports it and counts it as failed)."""
    message: str = ""
    log: str | None = None
    """The worker log's tail, on a line the supervisor wrote for a worker that died."""
    reference_cached: bool | None = None
    prepare_ms: Number | None = None
    correctness: Correctness | None = None
    strict_diagnostic: StrictDiagnostic | None = None
    scale_probe: ScaleProbe | None = None
    timing: Timing | None = None
    achieved: Achieved | None = None
    recheck: Correctness | None = None
    phases_s: dict[str, Number] | None = None
    build: NativeBuild | None = None

    @property
    def passed(self) -> bool:
        return self.status == "PASSED"

    def stats(self, mode: Mode) -> TimingStats | None:
        """One timing mode's statistics, None when the line has none."""
        return self.timing.of(mode) if self.timing is not None else None

    def median(self, mode: Mode) -> float | None:
        stats = self.stats(mode)
        return None if stats is None or stats.median_ms is None else float(stats.median_ms)

    def iqr(self, mode: Mode) -> float | None:
        """The interquartile range of the mode's samples (None where it was not timed)."""
        stats = self.stats(mode)
        return None if stats is None or stats.iqr_ms is None else float(stats.iqr_ms)


# ------------------------------------------------------------------ where it ran


class EnvCheckCounts(_Part):
    locked: int | None = None
    missing: int | None = None
    different: int | None = None


class EnvCheck(_Part):
    """Whether the line was measured in the environment its lock describes: verify-env's
    verdict for the host runtime, the image's or environment's provenance for the others. The
    lock's closure hash is the line's `context.closure_hash` (version 1 repeated it here)."""

    matches: bool | None = None
    reason: str | None = None
    """Why there is no verdict (matches None): no declared env, or its lock cannot be read."""
    python: list[str] | None = None
    missing: list[str] | None = Field(default_factory=list)
    different: list[str] | None = Field(default_factory=list)
    counts: EnvCheckCounts | None = None
    built_from_lock: bool | None = None
    image_labels_match: bool | None = None
    overlay_on: str | None = None
    substitute_base: str | None = None
    """The declared substitute base the image was built over, asked for by name
    (`--substitute-base`); None: the lock's declared base (or no image)."""
    substitute: str | None = None
    """What that substitute stands in for, in words: the declared base, and the Python it
    provides where it is not the declared one."""
    base_manifest_sha256: str | None = None
    verified: dict[str, Any] | None = None


class Context(_Part):
    """Where the job ran (runtime/jobs.py, RunContext.record)."""

    runtime: str | None = None
    env: str | None = Field(
        default=None, description="The environment the line was measured in (its lock's name)."
    )
    closure_hash: str | None = Field(
        default=None,
        description="The closure hash of env's lock: the one place a line records it (None: the"
        " host interpreter without a readable lock, a FlashInfer-Bench trace).",
    )
    image_id: str | None = None
    image_digest: str | None = None
    device_id: str | None = Field(
        default=None, description="The device the run was asked to use: a GPU UUID, or cpu."
    )
    gpu_access: str | None = None
    jit_cache: str | None = None
    """cold or warm: the job's compile cache folder was empty or not."""
    env_check: EnvCheck | None = None
    declared_env: str | None = None
    """The solution's declared env, where it differs from env (--env, or a CPU stand-in)."""
    env_assigned: str | None = None
    """How env was chosen for a solution that declares none: "--env", "envs.toml [authors]
    'x'", "envs.toml default" (dataset/env_map.py)."""


class Environment(_Part):
    """What the worker found (harness/environment.py): device, GPU, versions, harness."""

    device_type: str | None = None
    python: str | None = None
    platform: str | None = None
    torch: str | None = None
    torch_cuda: str | None = None
    triton: str | None = None
    cudnn: int | str | None = None
    """An int; a string on a line imported from a FlashInfer-Bench trace (its libs are text)."""
    distributions_fingerprint: str | None = None
    distributions_count: int | None = None
    harness_version: str | None = None
    harness_hash: str | None = None
    gpu_name: str | None = None
    gpu_uuid: str | None = None
    compute_capability: str | None = None
    sm_count: int | None = None
    memory_bytes: int | None = None
    l2_cache_bytes: int | None = None
    driver: str | None = None
    sm_clock_mhz: int | None = None
    mem_clock_mhz: int | None = None
    max_sm_clock_mhz: int | None = None
    temperature_c: int | None = None
    power_w: Number | None = None
    throttle_reasons: list[str] | None = None
    nvml_error: str | None = None


# ------------------------------------------------------------------ the line


class LineWorkload(_Part):
    uuid: str
    label: str | None = None
    axes: dict[str, Any] = Field(default_factory=dict)
    inputs: dict[str, Any] | None = None
    """Only on a line imported from a FlashInfer-Bench trace: the trace's workload inputs."""


class ForeignPerformance(_Part):
    latency_ms: Number | None = None
    reference_latency_ms: Number | None = None
    speedup_factor: Number | None = None


class ForeignTrace(_Part):
    """What an imported FlashInfer-Bench trace knew that a line has no place for."""

    performance: ForeignPerformance = Field(default_factory=ForeignPerformance)


class _Identity(_Part):
    schema_version: int = Field(
        description="The shape the line was written in (1 and 2 are read; module docstring)."
    )
    definition: str
    workload: LineWorkload
    solution: str
    solution_hash: str | None = None


class _Provenance(_Part):
    context: Context = Field(default_factory=Context)
    environment: Environment = Field(default_factory=Environment)
    seed: int | None = None
    timestamp: str | None = None
    wall_s: Number | None = None
    flashinfer_bench: ForeignTrace | None = None
    """Only on a line imported from a FlashInfer-Bench trace (report/traces.py)."""


class ResultLine(_Provenance, Outcome, _Identity):
    """One result line: identity, outcome, context and environment (fields in written order)."""

    _source: str | None = PrivateAttr(default=None)
    _echoed: bool = PrivateAttr(default=False)

    @model_validator(mode="wrap")
    @classmethod
    def _upgrade(cls, data: Any, handler: ModelWrapValidatorHandler[ResultLine]) -> ResultLine:
        """An earlier shape to the current one (the module's docstring)."""
        if not isinstance(data, Mapping):
            return handler(data)  # a ResultLine already
        folded, echoed = _fold_echo(data)
        line = handler(folded)
        line._echoed = echoed
        return line

    @property
    def key(self) -> LineKey:
        """The line's identity for --resume, merge, the audit and the supervisor."""
        context = self.context
        return line_identity(
            self.solution,
            self.workload.uuid,
            context.env,
            context.closure_hash,
            context.device_id,
            self.environment.gpu_uuid,
        )

    @property
    def closure_hash(self) -> str | None:
        """The closure hash of the lock the line was measured in."""
        return self.context.closure_hash

    @property
    def device(self) -> str:
        """The device the line ran on (the key's: its device id, else its GPU's UUID, else cpu)."""
        return self.key.device

    @property
    def instant(self) -> datetime:
        """`timestamp` as an aware instant; UNDATED when it has none that parses."""
        return instant(self.timestamp)

    @property
    def source(self) -> str | None:
        """Where the line was read ("FILE:LINE"), when its reader said."""
        return self._source

    def read_from(self, where: str) -> ResultLine:
        """Record where the line was read; the line itself."""
        self._source = where
        return self

    def written(self) -> dict[str, Any]:
        """The line as it was read (or made), for writing out again: a version-1 line gets
        its echo of the closure hash back, so its JSON is what it was."""
        found = self.model_dump(exclude_unset=True)
        check = found.get("context", {}).get("env_check")
        if self._echoed and isinstance(check, dict):
            found["context"]["env_check"] = {ECHO: self.closure_hash, **check}
        return found


def _fold_echo(data: Mapping[str, Any]) -> tuple[Mapping[str, Any], bool]:
    """(the line without version 1's copy of the closure hash, whether it had one); ValueError
    when the copy differs from `context.closure_hash`."""
    context = data.get("context")
    check = context.get("env_check") if isinstance(context, Mapping) else None
    if not isinstance(context, Mapping) or not isinstance(check, Mapping) or ECHO not in check:
        return data, False
    if check[ECHO] != context.get("closure_hash"):
        raise ValueError(
            f"context.env_check.{ECHO} {check[ECHO]!r} differs from context.closure_hash"
            f" {context.get('closure_hash')!r}: a line records one closure hash"
        )
    rest = {k: v for k, v in check.items() if k != ECHO}
    return {**data, "context": {**context, "env_check": rest}}, True


def problems(exc: ValidationError, limit: int = 3) -> str:
    """A validation error in one line: each problem with the field it is in."""
    found = []
    for error in exc.errors(include_url=False)[:limit]:
        where = ".".join(str(part) for part in error["loc"])
        found.append(f"{where}: {error['msg']}" if where else str(error["msg"]))
    more = exc.error_count() - limit
    return "; ".join(found) + (f"; and {more} more" if more > 0 else "")


def as_result_line(line: ResultLine | Mapping[str, Any]) -> ResultLine:
    """A line as the model: itself, or a parsed line validated (ValidationError otherwise)."""
    return line if isinstance(line, ResultLine) else ResultLine.model_validate(line)


def result_lines(path: Path) -> Iterator[tuple[int, ResultLine | None]]:
    """(line number, the line, or None when it is no readable result line) for every non-empty
    line of a result file (schema.results.read_lines: NotResultLines when it is no text)."""
    for number, parsed in read_lines(path):
        line = None
        if parsed is not None:
            try:
                line = ResultLine.model_validate(parsed)
            except ValidationError:
                line = None
        yield number, line


def kept_result_lines(path: Path) -> dict[LineKey, ResultLine]:
    """One line per key, the one that counts (schema.results), among the file's readable result
    lines, in file order."""
    lines = (line for _, line in result_lines(path) if line is not None)
    return newest_per_key(lines, lambda line: line.key, lambda line: line.instant)
