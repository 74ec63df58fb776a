"""Typed models of the FlashInfer-Bench TraceSet formats and of envaudit's additions.

Field names and layout are FlashInfer-Bench's; the additions (tolerance, FLOP/byte formulas,
`init` rules, mutable inputs, workload seed, blob sha256 and provenance, solution `env`, suites)
are optional, so a plain FlashInfer-Bench root reads unchanged. Models keep unknown keys
(`extra="allow"`) so that `unknown_keys` can report them and a round trip loses nothing.
Models check structure and types only; cross-references (axes named by shapes, inputs named by
workloads, blob contents) are checked by `envaudit.dataset.checks`, which collects every finding.
"""

from __future__ import annotations

import ast
import hashlib
from collections.abc import Callable, Mapping
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from envaudit.schema.dtypes import DTYPE_ALIASES, ITEMSIZE
from envaudit.schema.names import name_problem
from envaudit.schema.sources import source_bytes

DType = Literal[
    "float32",
    "float16",
    "bfloat16",
    "float8_e4m3",
    "float8_e4m3fn",
    "float8_e5m2",
    "float4_e2m1",
    "int64",
    "int32",
    "int16",
    "int8",
    "uint8",
    "bool",
]
assert set(DType.__args__) == set(ITEMSIZE) | set(DTYPE_ALIASES)  # type: ignore[attr-defined]


class Model(BaseModel):
    """Base: keep unknown keys for reporting, take docstrings into the JSON Schema."""

    model_config = ConfigDict(extra="allow", use_attribute_docstrings=True)


def _plain_name(value: str) -> str:
    """Refuse a name that is no plain path component (schema.names): definitions, op_types,
    solutions and authors name folders and files that reports and exports write, so one with a
    separator or '..' would write outside them. Checked here, once, for every loader."""
    problem = name_problem(value)
    if problem is not None:
        raise ValueError(f"{value[:60]!r} is not a plain name: {problem}")
    return value


Name = Annotated[str, Field(min_length=1), AfterValidator(_plain_name)]
"""A name that becomes one path component (a folder or file name) somewhere."""


# ---------------------------------------------------------------- definitions


class AxisConst(Model):
    """An axis whose value is fixed by the definition."""

    type: Literal["const"]
    value: Annotated[int, Field(ge=0)]
    """The axis length."""
    description: str | None = None


class AxisVar(Model):
    """An axis whose value each workload gives."""

    type: Literal["var"]
    parent: str | None = None
    """FlashInfer-Bench: a parent axis for hierarchical (ragged) dimensions."""
    description: str | None = None


def _implied_type(rule: dict[str, str]) -> Callable[[Any], Any]:
    """FlashInfer-Bench's models default `type`, and its serializer (exclude_unset) leaves a
    defaulted one out: {"value": 128} is a const axis, {} a var axis, {} a random input. Put the
    type its union would infer back (the first key of `rule` present decides; "" = otherwise)."""

    def implied(value: Any) -> Any:
        if isinstance(value, dict) and "type" not in value:
            kind = next((t for key, t in rule.items() if key and key in value), rule[""])
            return {**value, "type": kind}
        return value

    return implied


Axis = Annotated[
    AxisConst | AxisVar,
    Field(discriminator="type"),
    BeforeValidator(_implied_type({"value": "const", "": "var"})),
]


class NormalInit(Model):
    """Draw a `random` input from a normal distribution (float inputs)."""

    dist: Literal["normal"]
    mean: float = 0.0
    std: Annotated[float, Field(ge=0.0)] = 1.0


class UniformInit(Model):
    """Draw a `random` input uniformly from [low, high)."""

    dist: Literal["uniform"]
    low: float
    high: float


class RandintInit(Model):
    """Draw a `random` integer input uniformly from [low, high)."""

    dist: Literal["randint"]
    low: int
    high: int


class BernoulliInit(Model):
    """Draw a `random` boolean input, true with probability p."""

    dist: Literal["bernoulli"]
    p: Annotated[float, Field(ge=0.0, le=1.0)] = 0.5


InitRule = Annotated[
    NormalInit | UniformInit | RandintInit | BernoulliInit, Field(discriminator="dist")
]


class TensorSpec(Model):
    """An input or output of a definition: symbolic shape (None for a scalar) and dtype."""

    shape: list[str] | None
    """Axis names, outermost first; null for a scalar."""
    dtype: DType
    description: str | None = None
    init: InitRule | None = None
    """envaudit: how a `random` input is drawn (floats default to normal(0, 1))."""


ToleranceRule = Literal["and", "allclose", "abs_or_rel"]


class ToleranceBase(Model):
    """How outputs are compared with the reference."""

    atol: Annotated[float, Field(ge=0.0)] = 1e-2
    rtol: Annotated[float, Field(ge=0.0)] = 1e-2
    rule: ToleranceRule = "and"
    """`and`: an element fails only when |d| > atol AND |d| > rtol*|ref| (FlashInfer-Bench).
    `allclose`: fails when |d| > atol + rtol*|ref|. `abs_or_rel`: passes when |d| <= atol or
    |d| <= rtol*max|ref| (relative to the output's scale, for states where single elements
    near zero have no meaningful relative error)."""
    required_matched_ratio: Annotated[float, Field(ge=0.0, le=1.0)] = 1.0
    """Fraction of elements that must pass, compared as integer counts."""


class Tolerance(ToleranceBase):
    """The definition's tolerance, with optional per-output overrides."""

    per_output: dict[str, ToleranceBase] = Field(default_factory=dict)


class Definition(Model):
    """A kernel contract: axes, ordered inputs and outputs, constraints and a reference."""

    name: Name
    op_type: Name
    axes: dict[str, Axis]
    inputs: dict[str, TensorSpec]
    outputs: dict[str, TensorSpec]
    reference: Annotated[str, Field(min_length=1)]
    """Python source defining `run(**inputs)`, returning the outputs in order."""
    tags: list[str] | None = None
    description: str | None = None
    constraints: list[str] | None = None
    """Python expressions over axes and inputs that every workload satisfies."""
    tolerance: Tolerance | None = None
    """envaudit: comparison rule; FlashInfer-Bench's default (1e-2, 1e-2, `and`) when absent."""
    diagnostic_tolerance: Tolerance | None = None
    """envaudit: a stricter, informative bound beside `tolerance` (e.g. a historical one): with
    --strict-diagnostic each line records whether it holds and by what factor it is missed;
    it never changes a status."""
    flops: str | None = None
    """envaudit: useful floating-point operations of one call, an expression over the axes
    (and inputs, where the work depends on lengths)."""
    bytes: str | None = None
    """envaudit: minimum bytes moved by one call, an expression over the axes (and inputs)."""
    mutable_inputs: list[str] = Field(default_factory=list)
    """envaudit: inputs the kernel may write to."""
    scale_probe_inputs: list[str] | None = None
    """envaudit: the random float inputs `--scale-probe` may multiply without leaving the
    definition's domain (default: those drawn from a zero-mean normal); [] for none. GDN's keys,
    for one, must stay near unit norm or the recurrence itself diverges."""

    @field_validator("reference")
    @classmethod
    def _reference_defines_run(cls, source: str) -> str:
        try:
            tree = ast.parse(source)
        except SyntaxError as exc:
            msg = f"reference is not valid Python (line {exc.lineno}: {exc.msg})"
            raise ValueError(msg) from None
        if not any(isinstance(n, ast.FunctionDef) and n.name == "run" for n in tree.body):
            raise ValueError("reference defines no top-level function `run`")
        return source

    @property
    def effective_tolerance(self) -> Tolerance:
        return self.tolerance or Tolerance()

    def const_axes(self) -> dict[str, int]:
        return {k: a.value for k, a in self.axes.items() if isinstance(a, AxisConst)}

    def var_axes(self) -> list[str]:
        return [k for k, a in self.axes.items() if isinstance(a, AxisVar)]


# ---------------------------------------------------------------- workloads


class RandomInput(Model):
    """An input drawn at run time from the workload's seed and the definition's init rule."""

    type: Literal["random"]


class ScalarInput(Model):
    """A literal scalar argument."""

    type: Literal["scalar"]
    value: int | float | bool


class SafetensorsInput(Model):
    """A tensor stored in a safetensors blob under the TraceSet root."""

    type: Literal["safetensors"]
    path: Annotated[str, Field(min_length=1)]
    """Relative to the TraceSet root."""
    tensor_key: Annotated[str, Field(min_length=1)]
    sha256: str | None = None
    """envaudit: sha256 of the whole blob file."""
    provenance: str | None = None
    """envaudit: where the tensor came from."""


InputSpec = Annotated[
    RandomInput | ScalarInput | SafetensorsInput,
    Field(discriminator="type"),
    BeforeValidator(_implied_type({"path": "safetensors", "value": "scalar", "": "random"})),
]


class Workload(Model):
    """One concrete instance of a definition: var axis values and input sources."""

    uuid: Annotated[str, Field(min_length=1)]
    axes: dict[str, int]
    inputs: dict[str, InputSpec]
    seed: int | None = None
    """envaudit: seed of every `random` input (per input: sha256(seed:name))."""
    label: str | None = None
    """envaudit: a short human-readable name."""


# ---------------------------------------------------------------- solutions


class SourceFile(Model):
    """One source file of a solution; `content` may be omitted when the file sits beside
    solution.json (envaudit's on-disk solutions)."""

    path: Annotated[str, Field(min_length=1)]
    content: str | None = None


NATIVE_LANGUAGES = ("cuda", "cpp")
"""Languages whose sources are compiled into an extension (FlashInfer-Bench's torch binding)."""


class BuildSpec(Model):
    """How a solution is built and called."""

    language: str
    """FlashInfer-Bench: python, triton, cpp, cuda, tilelang, ..."""
    target_hardware: list[str] = Field(default_factory=list)
    entry_point: Annotated[
        str, Field(pattern=r"^[^:]+\.(py|cu|cpp|cc|cxx|c)::[A-Za-z_][A-Za-z0-9_]*$")
    ]
    """`file.py::function`; for `cuda` and `cpp` with the torch binding, `main.cpp::run`: the
    file the extension's symbol is defined in, and the symbol (FlashInfer-Bench's form)."""
    dependencies: list[str] | None = None
    destination_passing_style: bool = True
    """True: outputs are preallocated and passed after the inputs; False: they are returned."""
    binding: str | None = None

    @model_validator(mode="after")
    def _native_entry_needs_native_language(self) -> BuildSpec:
        """A C/C++/CUDA entry file is compiled, never imported: only `cuda` and `cpp` say so."""
        entry = self.entry_point.split("::")[0]
        native = not entry.endswith(".py")
        if native and self.language.lower() not in NATIVE_LANGUAGES:
            raise ValueError(
                f"entry_point {self.entry_point} is a C/C++/CUDA file, but language is"
                f" {self.language!r} (cuda or cpp compile it)"
            )
        if not native and self.language.lower() in NATIVE_LANGUAGES:
            raise ValueError(
                f"language {self.language!r} needs a C/C++/CUDA entry file (main.cpp::run),"
                f" not {self.entry_point}"
            )
        return self


def solution_revision(spec: Mapping[str, Any], read: Callable[[str], bytes]) -> str:
    """The `solution_hash` of a solution.json's sources, inline `content` or files read by
    `read(relative path)` (from a folder, or from a git commit)."""
    files = {source["path"]: source_bytes(source, read) for source in spec["sources"]}
    return solution_source_hash(files)


def solution_source_hash(files: Mapping[str, bytes]) -> str:
    """A solution's revision as result lines record it (`solution_hash`): sha256 over each
    source's relative path and sha256, in path order. The harness computes the same digest with
    its own copy (harness/solution.py imports nothing of envaudit); a test holds them equal."""
    digest = hashlib.sha256()
    for rel in sorted(files):
        digest.update(rel.encode() + b"\0" + hashlib.sha256(files[rel]).digest())
    return digest.hexdigest()


class Solution(Model):
    """An implementation of one definition."""

    name: Name
    definition: Name
    author: Name
    spec: BuildSpec
    sources: list[SourceFile]
    description: str | None = None
    env: Name | None = None
    """envaudit: the lock directory (locks/<env>) the solution runs in."""
    baseline: bool = False
    """envaudit: the definition's baseline, against which speedups are reported."""


# ---------------------------------------------------------------- traces


class EvaluationStatus(StrEnum):
    """FlashInfer-Bench's statuses plus envaudit's INPUT_MUTATED, UNSUPPORTED_DEVICE (the
    solution's target_hardware excludes the device, or the environment cannot compile it at all:
    a CPU build of torch, no nvcc) and WORKLOAD_ERROR (the workload, not the solution, could not
    be evaluated: its inputs could not be drawn, or the definition's reference raised)."""

    PASSED = "PASSED"
    INCORRECT_SHAPE = "INCORRECT_SHAPE"
    INCORRECT_NUMERICAL = "INCORRECT_NUMERICAL"
    INCORRECT_DTYPE = "INCORRECT_DTYPE"
    RUNTIME_ERROR = "RUNTIME_ERROR"
    COMPILE_ERROR = "COMPILE_ERROR"
    TIMEOUT = "TIMEOUT"
    INPUT_MUTATED = "INPUT_MUTATED"
    UNSUPPORTED_DEVICE = "UNSUPPORTED_DEVICE"
    WORKLOAD_ERROR = "WORKLOAD_ERROR"


class Correctness(Model):
    max_relative_error: float = 0.0
    max_absolute_error: float = 0.0
    extra: dict[str, Any] | None = None


class Performance(Model):
    latency_ms: Annotated[float, Field(ge=0.0)] = 0.0
    reference_latency_ms: Annotated[float, Field(ge=0.0)] = 0.0
    speedup_factor: Annotated[float, Field(ge=0.0)] = 0.0


class Environment(Model):
    hardware: Annotated[str, Field(min_length=1)]
    libs: dict[str, str] = Field(default_factory=dict)


class Evaluation(Model):
    status: EvaluationStatus
    environment: Environment
    timestamp: Annotated[str, Field(min_length=1)]
    log: str = ""
    correctness: Correctness | None = None
    performance: Performance | None = None


class Trace(Model):
    """A workload line (solution and evaluation null) or a result of one solution on it."""

    definition: Name
    workload: Workload
    solution: Name | None = None
    evaluation: Evaluation | None = None


# ---------------------------------------------------------------- suites


class Suite(Model):
    """envaudit: a named selection of workloads, per definition."""

    schema_version: Literal[1] = 1
    name: Name
    description: str | None = None
    workloads: dict[str, list[str]]
    """Definition name -> workload UUIDs."""


# ---------------------------------------------------------------- helpers


def unknown_keys(model: BaseModel, prefix: str = "") -> list[str]:
    """Dotted paths of keys the models do not know, anywhere inside `model`."""
    found = [f"{prefix}{key}" for key in (model.model_extra or {})]
    for name in type(model).model_fields:
        found.extend(_unknown_in(getattr(model, name), f"{prefix}{name}."))
    return found


def _unknown_in(value: Any, prefix: str) -> list[str]:
    if isinstance(value, BaseModel):
        return unknown_keys(value, prefix)
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _unknown_in(v, f"{prefix}{k}.")]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _unknown_in(v, f"{prefix}{i}.")]
    return []


def dump(model: BaseModel) -> dict[str, Any]:
    """The model as written on disk: only the keys that were set, unknown keys included."""
    return model.model_dump(mode="json", exclude_unset=True)


MODELS: dict[str, type[BaseModel]] = {
    "definition": Definition,
    "workload": Workload,
    "trace": Trace,
    "solution": Solution,
    "suite": Suite,
}
