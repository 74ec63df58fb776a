"""The report's summary as typed models: what `envaudit merge` builds once from the merged
result lines, and what every output of the report renders (summary.json, preferred-solutions.json,
performance.md, report.html, the plots).

The report layer builds these (report/summary.py, report/choice.py, report/env_compare.py);
renderers read attributes, never keys. A figure's uncertainty travels with it (`Figure`), so a
comparison made after the summary is built (the choice against its runner-up) divides the same
numbers by the same rule (report/intervals.py `ratio_of`) as the speedups the summary prints.

`docs/schema/summary.schema.json` and `docs/schema/preferred-solutions.schema.json` are these
models' JSON Schemas (`make schemas`); a test fails when they drift.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

SUMMARY_VERSION = 1
"""The shape of summary.json and preferred-solutions.json; bumped when a field changes meaning."""

Mode = Literal["eager", "graph"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


# ---------------------------------------------------------------- one line's figure


class Figure(_Model):
    """The figure a line is compared by (its graph median where it has one, else its eager one)
    with what is known of its uncertainty (report/intervals.py)."""

    mode: Mode
    """The timing mode of the figure."""
    median_ms: float
    """Its median, ms."""
    kind: str
    """Its kind of figure, which sets its run-to-run floor: cuda_graph, cuda_events,
    host-bound, eager only, wall_clock, flashinfer-bench."""
    within_log_variance: float
    """(The within-run standard error of the median / the median)^2, from its quartiles."""
    observed_log_variance: float | None = None
    """The variance of log medians of the repeated runs of its group, where the report has
    several (None: one run)."""
    caveat: str | None = None
    """What a reader must know of a figure the host set (host-bound or eager only)."""
    gpu_uuid: str | None = None
    """The card it was measured on; two figures of one card compare with the same-card floor."""


class Ratio(_Model):
    """A ratio of two figures by the one comparison rule, with its 95% interval."""

    value: float
    ci95: list[float] | None = None
    """Low and high ends; None where an interval cannot be put on it."""
    within_noise: bool | None = None
    """Whether the interval holds 1.0 (None without an interval)."""


# ---------------------------------------------------------------- summary.json


class EnvCheckSummary(_Model):
    """Whether a solution's lines ran in the environment it declares (host runs)."""

    matches: bool
    missing: list[str] = Field(default_factory=list)
    different: list[str] = Field(default_factory=list)
    python: list[str] | None = None
    """(declared, found) Python versions where they differ."""


class WorkloadCounts(_Model):
    total: int
    passed: int
    failed: dict[str, int] = Field(default_factory=dict)
    """Status -> how many workloads ended with it."""


class GeomeanSpeedup(_Model):
    """A solution's geometric-mean speedup over its baseline on the workloads both passed."""

    eager: float | None = None
    """Over eager medians only (where both have one)."""
    graph: float | None = None
    """Over graph medians only (where both have one)."""
    primary: float | None = None
    """By the one comparison rule (each line's graph figure where it has one, else eager)."""
    primary_ci95: list[float] | None = None
    within_noise: bool | None = None
    log_variance: float | None = None
    workloads_compared: int = 0


class ProbeCell(_Model):
    """One factor of a scale probe."""

    factor: float
    status: str
    """PASSED, a failure status, or skipped."""
    max_absolute_error: float | None = None
    skipped: str | None = None


class WorkloadRow(_Model):
    """One solution's newest line on one workload, with its speedup over the baseline's newest
    line on the same GPU model (`baseline_results_line`)."""

    uuid: str
    label: str | None = None
    device: str
    """The GPU UUID (or cpu) the line ran on."""
    status: str
    harness_hash: str | None = None
    eager_median_ms: float | None = None
    graph_median_ms: float | None = None
    eager_iqr_ms: float | None = None
    graph_iqr_ms: float | None = None
    """The interquartile range of the line's samples in that mode: its own spread."""
    timing_flags: list[str] = Field(default_factory=list)
    """Why the judge does not trust this line's time (never ranked)."""
    figure: Figure | None = None
    """The figure it is compared by (None: no timing)."""
    speedup_eager: float | None = None
    speedup_graph: float | None = None
    speedup_primary: float | None = None
    """Baseline over this line by the one comparison rule."""
    primary_timing: str | None = None
    """The modes that speedup divides, baseline's first: "graph/graph", "eager/graph"."""
    speedup_ci95: list[float] | None = None
    speedup_log_variance: float | None = None
    within_noise: bool | None = None
    speedup_caveats: list[str] = Field(default_factory=list)
    baseline_device: str | None = None
    roofline_fraction: float | None = None
    strict_holds: bool | None = None
    """The strict diagnostic bound (--strict-diagnostic), where the line has one."""
    strict_factor: float | None = None
    scale_probe: list[ProbeCell] | None = None
    results_line: int | None = None
    """This line's number in the report's results.jsonl."""
    baseline_results_line: int | None = None
    """The number of the baseline line the speedup divides."""

    @property
    def name(self) -> str:
        """The label, or the uuid's head."""
        return self.label or self.uuid[:8]

    @property
    def passed(self) -> bool:
        return self.status == "PASSED"


class SolutionBlock(_Model):
    """One solution in one environment on one GPU model."""

    solution: str
    baseline: bool
    env: str
    closure_hash: str | None = None
    runtime: str | None = None
    image_id: str | None = None
    over: str | None = None
    """The machine stack an overlay image was built over, where it was."""
    solution_hashes: list[str] = Field(default_factory=list)
    gpus: list[str] = Field(default_factory=list)
    declared_env_check: EnvCheckSummary | None = None
    workloads: WorkloadCounts
    geomean_speedup: GeomeanSpeedup
    roofline_fraction_median: float | None = None
    per_workload: list[WorkloadRow] = Field(default_factory=list)
    """By (label, uuid)."""


class DeviceBlock(_Model):
    """One definition on one GPU model."""

    baseline_env: str | None = None
    solutions: list[SolutionBlock] = Field(default_factory=list)

    def baseline_entry(self) -> SolutionBlock | None:
        return next((s for s in self.solutions if s.baseline), None)


class DefinitionBlock(_Model):
    baseline: str | None = None
    op_type: str | None = None
    has_roofline_formulas: bool = False
    devices: dict[str, DeviceBlock] = Field(default_factory=dict)
    """GPU model -> its block."""


class EnvWorkload(_Model):
    """One workload of an environment comparison: OTHER's time over BASE's."""

    workload: str
    modes: str
    """The figures divided, base's first ("graph/graph")."""
    runs: list[int]
    """Lines read of each side's group (base, other): repeats widen the interval."""
    results_lines: list[int | None]
    """The newest line of each side, which the ratio divides (base, other)."""
    ratio: Ratio
    caveats: list[str] = Field(default_factory=list)


class EnvComparison(_Model):
    """One solution in two environments on one GPU model, by the one comparison rule."""

    solution: str
    gpu_model: str
    base: str
    other: str
    workloads: list[EnvWorkload]
    geomean: Ratio
    differ_in: list[str] | None = None
    """What the two envs' locks differ in (None: the locks could not both be read)."""


class DeviceInfo(_Model):
    name: str
    driver: str | None = None
    compute_capability: str | None = None
    memory_bytes: int | None = None
    uuids: list[str] = Field(default_factory=list)


class EnvironmentInfo(_Model):
    env: str
    closure_hash: str | None = None
    runtime: str | None = None
    image_id: str | None = None
    python: str | None = None
    torch: str | None = None
    triton: str | None = None
    distributions_fingerprints: list[str] = Field(default_factory=list)
    stand_in: list[str] = Field(default_factory=list)
    """What the lock builds in place of pins that cannot be reached."""


class InputInfo(_Model):
    file: str
    lines: int = 0
    results: int = 0
    distributions: int = 0


class LineBrief(_Model):
    status: str | None = None
    solution_hash: str | None = None
    timestamp: str | None = None
    source: str | None = None


class ConflictInfo(_Model):
    """Two lines of one key that disagree; the newest was kept."""

    solution: str
    workload: str
    env: str
    closure_hash: str | None = None
    device: str
    kept: LineBrief
    dropped: LineBrief
    text: str


class ReproduceFrom(_Model):
    """The report's results file, data root and solutions root as merge was given them."""

    results: str = "results.jsonl"
    data_root: str | None = None
    solutions_root: str | None = None


class Summary(_Model):
    """summary.json."""

    summary_version: int = SUMMARY_VERSION
    generated_at: str = ""
    lines: int
    """Result lines the report shows (the newest per key)."""
    definitions: dict[str, DefinitionBlock]
    env_comparisons: list[EnvComparison] = Field(default_factory=list)
    devices: dict[str, DeviceInfo] = Field(default_factory=dict)
    environments: list[EnvironmentInfo] = Field(default_factory=list)
    harness_hashes: list[str] = Field(default_factory=list)
    measured_between: list[str] | None = None
    inputs: list[InputInfo] = Field(default_factory=list)
    findings: list[str] = Field(default_factory=list)
    conflicts: list[ConflictInfo] = Field(default_factory=list)
    repeats_dropped: int = 0
    reproduce_from: ReproduceFrom | None = None

    def models(self) -> list[str]:
        """Every GPU model of any definition, sorted."""
        return sorted({m for block in self.definitions.values() for m in block.devices})


# ---------------------------------------------------------------- preferred-solutions.json


class Candidate(_Model):
    """A solution ranked in a choice: its geometric-mean speedup on the choice's workloads."""

    solution: str
    env: str | None = None
    closure_hash: str | None = None
    geomean_speedup: float
    ci95: list[float] | None = None
    within_noise: bool | None = None


class LeftOut(_Model):
    solution: str
    env: str | None = None
    reason: str


class ChoiceComparison(_Model):
    """One workload set and the choice made on it."""

    scope: str
    """common (every eligible solution passed it), all measured, or full (the baseline's)."""
    workloads: list[str]
    suite: str | None = None
    """The suite this set is, where one matches."""
    choice: Candidate | None = None
    runner_up: Candidate | None = None
    candidates: int = 0
    left_out: list[LeftOut] = Field(default_factory=list)
    indistinguishable: bool | None = None
    """Whether the interval of the choice's time over the runner-up's, workload by workload by
    the one comparison rule and over their geometric mean, holds 1.0."""
    ratio_to_runner_up: Ratio | None = None
    """The runner-up's time over the choice's (geometric mean, with its interval)."""


class Choice(_Model):
    """One definition on one GPU model: its comparisons, the headline choice, who was left out."""

    baseline: str | None = None
    left_out: list[LeftOut] = Field(default_factory=list)
    comparisons: list[ChoiceComparison] = Field(default_factory=list)
    choice: Candidate | None = None
    """None: no choice (`reason` says why)."""
    runner_up: Candidate | None = None
    candidates: int = 0
    indistinguishable: bool | None = None
    reason: str | None = None


class Preferred(_Model):
    """preferred-solutions.json."""

    summary_version: int = SUMMARY_VERSION
    generated_at: str = ""
    rule: str
    choices: dict[str, dict[str, Choice]]
    """Definition -> GPU model -> choice."""
