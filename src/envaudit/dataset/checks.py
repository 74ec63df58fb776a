"""`check-inputs`: every definition, workload, tensor path and blob of a TraceSet, checked.

The checks run in a fixed order (definitions, then each workload's axes, inputs and
constraints, then blobs, suites and interface files) and collect every finding rather than
stopping at the first. Nothing under the root is written.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envaudit.dataset.blobs import BlobError, BlobInfo, read_blob
from envaudit.dataset.interfaces import check_interfaces
from envaudit.dataset.traceset import DefinitionFile, TraceSet, WorkloadLine, load_traceset
from envaudit.errors import EXIT_USAGE, EnvauditError
from envaudit.schema.dtypes import FLOAT_DTYPES, ITEMSIZE, canonical_dtype
from envaudit.schema.expressions import (
    ExpressionError,
    UnresolvedName,
    evaluate,
    expression_names,
    parse_expression,
)
from envaudit.schema.findings import Finding
from envaudit.schema.models import AxisConst, Definition, SafetensorsInput, ScalarInput
from envaudit.schema.paths import PathOutsideRoot, path_inside


@dataclass
class CheckReport:
    """What `check-inputs` found and counted."""

    findings: list[Finding] = field(default_factory=list)
    definitions: int = 0
    workloads: int = 0
    tensor_paths: int = 0
    unique_blobs: int = 0
    constraints_checked: int = 0
    constraints_deferred: int = 0

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "warning"]

    def summary(self) -> str:
        return (
            f"{self.definitions} definitions, {self.workloads} workloads, "
            f"{self.tensor_paths} tensor paths, {self.unique_blobs} unique blobs, "
            f"{self.constraints_checked} constraint checks "
            f"({self.constraints_deferred} deferred to the harness: they read random inputs); "
            f"{len(self.errors)} problems, {len(self.warnings)} warnings"
        )


class _ShapeOnly:
    """Stands in for a random input in constraints: its shape is known, its values are not."""

    def __init__(self, name: str, shape: tuple[int, ...]) -> None:
        self._name = name
        self.shape = shape

    def __getattr__(self, attr: str) -> Any:
        raise UnresolvedName(self._name)

    def _unresolved(self, *args: Any) -> Any:
        raise UnresolvedName(self._name)

    __getitem__ = __len__ = __iter__ = __bool__ = _unresolved
    __lt__ = __le__ = __gt__ = __ge__ = __eq__ = __ne__ = _unresolved
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _unresolved
    __truediv__ = __floordiv__ = __mod__ = __pow__ = __neg__ = __abs__ = _unresolved


@dataclass
class _Context:
    ts: TraceSet
    report: CheckReport
    blobs: dict[Path, BlobInfo | BlobError] = field(default_factory=dict)
    referenced: set[Path] = field(default_factory=set)

    def add(self, *args: Any, **kwargs: Any) -> None:
        self.report.findings.append(Finding(*args, **kwargs))


def check_inputs(root: Path, only: Iterable[str] = ()) -> CheckReport:
    """Check a TraceSet root; raises DatasetRootError when the root cannot be read, and an
    EnvauditError (usage, exit 2) when `only` names a definition the root does not have."""
    ts = load_traceset(root)
    selected = set(only)
    unknown = sorted(selected - set(ts.definitions))
    if unknown:
        known = sorted(ts.definitions)
        listed = ", ".join(known[:20]) + (
            f" (and {len(known) - 20} more)" if len(known) > 20 else ""
        )
        raise EnvauditError(
            f"--definition: no definition named {', '.join(unknown)} under {root}/definitions",
            EXIT_USAGE,
            hint=f"known definitions: {listed or 'none'}",
        )
    ctx = _Context(ts, CheckReport(findings=list(ts.findings)))
    for name, dfile in ts.definitions.items():
        if selected and name not in selected:
            continue
        ctx.report.definitions += 1
        _check_definition(ctx, dfile)
    for wl in ts.workloads:
        if selected and wl.trace.definition not in selected:
            continue
        ctx.report.workloads += 1
        _check_workload(ctx, wl)
    if not selected:
        _check_unreferenced_blobs(ctx)
        _check_suites(ctx)
    _check_interfaces(ctx, selected)
    ctx.report.unique_blobs = len({p for p in ctx.referenced if isinstance(ctx.blobs[p], BlobInfo)})
    return ctx.report


# ---------------------------------------------------------------- definitions


def _check_definition(ctx: _Context, dfile: DefinitionFile) -> None:
    d, path = dfile.definition, dfile.path
    for kind, tensors in (("inputs", d.inputs), ("outputs", d.outputs)):
        for tname, spec in tensors.items():
            for axis in spec.shape or []:
                if axis not in d.axes:
                    msg = f"shape names axis {axis}, which the definition does not declare"
                    ctx.add("error", "unknown-axis", path, msg, field=f"{kind}.{tname}.shape")
            if kind == "outputs" and spec.init is not None:
                msg = "init applies to random inputs only"
                ctx.add("warning", "init-on-output", path, msg, field=f"outputs.{tname}.init")
    for i, constraint in enumerate(d.constraints or []):
        try:
            parse_expression(constraint)
        except ExpressionError as exc:
            ctx.add(
                "error", "bad-constraint", path, f"{constraint!r}: {exc}", field=f"constraints.{i}"
            )
    for key in ("flops", "bytes"):
        formula = getattr(d, key)
        if formula is None:
            continue
        try:
            unknown = expression_names(formula) - set(d.axes) - set(d.inputs)
        except ExpressionError as exc:
            ctx.add("error", "bad-formula", path, f"{formula!r}: {exc}", field=key)
            continue
        if unknown:
            msg = f"{formula!r} names {sorted(unknown)}, which are neither axes nor inputs"
            ctx.add("error", "bad-formula", path, msg, field=key)
    for field_name, names in (
        ("mutable_inputs", d.mutable_inputs),
        ("scale_probe_inputs", d.scale_probe_inputs or []),
    ):
        for name in names:
            if name not in d.inputs:
                ctx.add("error", "unknown-input", path, f"{name} is not an input", field=field_name)
    tolerance = d.effective_tolerance
    for name in tolerance.per_output:
        if name not in d.outputs:
            msg = f"{name} is not an output"
            ctx.add("error", "unknown-output", path, msg, field="tolerance.per_output")


# ---------------------------------------------------------------- workloads


def _check_workload(ctx: _Context, wl: WorkloadLine) -> None:
    trace, where = wl.trace, {"workload": wl.uuid, "line": wl.line}
    dfile = ctx.ts.definitions.get(trace.definition)
    if dfile is None:
        msg = f"definition {trace.definition} does not exist under definitions/"
        ctx.add("error", "unknown-definition", wl.path, msg, field="definition", **where)
        return
    d = dfile.definition
    axes = _check_axes(ctx, wl, d)
    namespace: dict[str, Any] = dict(axes) if axes is not None else {}
    for name in trace.workload.inputs.keys() - d.inputs.keys():
        msg = f"input {name} is not an input of {d.name}"
        ctx.add("error", "unknown-input", wl.path, msg, field=f"inputs.{name}", **where)
    for name, spec in d.inputs.items():
        source = trace.workload.inputs.get(name)
        if source is None:
            msg = f"input {name} of {d.name} is not given"
            ctx.add("error", "missing-input", wl.path, msg, field=f"inputs.{name}", **where)
            continue
        value = _check_input(ctx, wl, d, name, axes)
        if value is not None:
            namespace[name] = value
        elif source.type == "random" and spec.shape is not None and axes is not None:
            namespace[name] = _ShapeOnly(name, tuple(axes[a] for a in spec.shape if a in axes))
    if axes is not None:
        _check_constraints(ctx, wl, d, namespace)
        _check_input_size(ctx, wl, d, axes)


LARGEST_DEVICE_BYTES = 288 * 10**9
"""The most memory one accelerator has (B300 and MI355X: 288 GB): inputs larger than this
cannot be drawn on any GPU, so their workload could only ever read WORKLOAD_ERROR."""


def _check_input_size(ctx: _Context, wl: WorkloadLine, d: Definition, axes: dict[str, int]) -> None:
    total = 0
    for spec in d.inputs.values():
        if spec.shape is not None and all(a in axes for a in spec.shape):
            elements = math.prod(axes[a] for a in spec.shape)
            total += elements * ITEMSIZE.get(canonical_dtype(spec.dtype), 1)
    if total > LARGEST_DEVICE_BYTES:
        msg = (
            f"its inputs need {total / 1e9:.1f} GB, more than any GPU holds"
            f" ({LARGEST_DEVICE_BYTES / 1e9:.0f} GB)"
        )
        where = {"workload": wl.uuid, "line": wl.line, "field": "axes"}
        ctx.add("error", "inputs-too-large", wl.path, msg, **where)


def _check_axes(ctx: _Context, wl: WorkloadLine, d: Definition) -> dict[str, int] | None:
    """All axis values, or None when the workload's axes do not match the definition."""
    given, where = wl.trace.workload.axes, {"workload": wl.uuid, "line": wl.line}
    ok = True
    for name, value in given.items():
        axis = d.axes.get(name)
        if axis is None:
            msg = f"axis {name} is not an axis of {d.name} (axes: {', '.join(d.axes)})"
            ctx.add("error", "unknown-axis", wl.path, msg, field=f"axes.{name}", **where)
            ok = False
        elif isinstance(axis, AxisConst) and axis.value != value:
            msg = f"const axis {name} is {axis.value} in the definition, workload says {value}"
            ctx.add("error", "axis-mismatch", wl.path, msg, field=f"axes.{name}", **where)
            ok = False
        elif value < 0:
            ctx.add(
                "error", "axis-negative", wl.path, f"{value} < 0", field=f"axes.{name}", **where
            )
            ok = False
    for name in d.var_axes():
        if name not in given:
            msg = f"var axis {name} has no value"
            ctx.add("error", "missing-axis", wl.path, msg, field=f"axes.{name}", **where)
            ok = False
    return {**d.const_axes(), **given} if ok else None


def _check_input(
    ctx: _Context, wl: WorkloadLine, d: Definition, name: str, axes: dict[str, int] | None
) -> Any:
    """Check one input source; return its value when constraints can use it, else None."""
    spec, source = d.inputs[name], wl.trace.workload.inputs[name]
    where = {"workload": wl.uuid, "line": wl.line, "field": f"inputs.{name}"}
    if isinstance(source, ScalarInput):
        if spec.shape is not None:
            ctx.add("error", "scalar-for-tensor", wl.path, f"shape is {spec.shape}", **where)
        return source.value
    if spec.shape is None:
        msg = f"the definition declares a scalar, the workload gives {source.type}"
        ctx.add("error", "tensor-for-scalar", wl.path, msg, **where)
        return None
    if not isinstance(source, SafetensorsInput):
        dtype = canonical_dtype(spec.dtype)
        if dtype not in FLOAT_DTYPES and spec.init is None:
            msg = (
                f"random {dtype} input has no init rule: drawn as FlashInfer-Bench draws it"
                " (bool coin flips, int8 its whole range, other integers in [-1024, 1024))"
            )
            hint = f"add inputs.{name}.init to {d.name} when indices or lengths need a range"
            ctx.add("warning", "random-without-init", wl.path, msg, hint=hint, **where)
        return None
    ctx.report.tensor_paths += 1
    return _check_blob_input(ctx, wl, d, name, source, axes)


def _check_blob_input(
    ctx: _Context,
    wl: WorkloadLine,
    d: Definition,
    name: str,
    source: SafetensorsInput,
    axes: dict[str, int] | None,
) -> Any:
    where = {"workload": wl.uuid, "line": wl.line, "field": f"inputs.{name}"}
    spec = d.inputs[name]
    if not source.provenance:
        ctx.add(
            "warning",
            "no-provenance",
            wl.path,
            f"blob {source.path} has no provenance note",
            **where,
        )
    path = _blob_path(ctx, wl, source.path, where)
    if path is None:
        return None
    blob = _read_blob(ctx, path)
    if isinstance(blob, BlobError):
        ctx.add("error", "corrupt-blob", wl.path, f"blob {source.path}: {blob}", **where)
        return None
    if source.sha256 is None:
        ctx.add(
            "warning", "no-sha256", wl.path, f"blob {source.path} has no recorded sha256", **where
        )
    elif source.sha256 != blob.sha256:
        msg = f"blob {source.path}: sha256 is {blob.sha256}, workload records {source.sha256}"
        hint = (
            "the blob's bytes changed; restore it, or re-record the hash if the change is intended"
        )
        ctx.add("error", "hash-mismatch", wl.path, msg, hint=hint, **where)
    entry = blob.tensors.get(source.tensor_key)
    if entry is None:
        keys = ", ".join(blob.tensors)
        msg = f"blob {source.path} has no tensor {source.tensor_key!r} (has: {keys})"
        ctx.add("error", "missing-tensor", wl.path, msg, **where)
        return None
    ok = True
    if entry.dtype != canonical_dtype(spec.dtype):
        msg = f"blob tensor {source.tensor_key} is {entry.dtype}, definition says {spec.dtype}"
        ctx.add("error", "wrong-dtype", wl.path, msg, **where)
        ok = False
    if axes is not None and spec.shape is not None:
        want = tuple(axes.get(a, -1) for a in spec.shape)
        if entry.shape != want:
            shape_text = ", ".join(f"{a}={n}" for a, n in zip(spec.shape, want, strict=True))
            got = list(entry.shape)
            msg = f"blob tensor {source.tensor_key} has shape {got}, expected [{shape_text}]"
            ctx.add("error", "wrong-shape", wl.path, msg, **where)
            ok = False
    return blob.array(source.tensor_key) if ok else None


def _blob_path(
    ctx: _Context, wl: WorkloadLine, relative: str, where: dict[str, Any]
) -> Path | None:
    try:
        path = path_inside(ctx.ts.root, relative)
    except PathOutsideRoot as exc:
        ctx.add("error", "path-escapes-root", wl.path, str(exc), **where)
        return None
    ctx.referenced.add(path)
    if not path.is_file():
        ctx.add("error", "missing-blob", wl.path, f"blob {relative} does not exist", **where)
        ctx.referenced.discard(path)
        return None
    return path


def _read_blob(ctx: _Context, path: Path) -> BlobInfo | BlobError:
    if path not in ctx.blobs:
        try:
            ctx.blobs[path] = read_blob(path)
        except BlobError as exc:
            ctx.blobs[path] = exc
    return ctx.blobs[path]


def _check_constraints(
    ctx: _Context, wl: WorkloadLine, d: Definition, namespace: dict[str, Any]
) -> None:
    for i, constraint in enumerate(d.constraints or []):
        where = {"workload": wl.uuid, "line": wl.line, "field": f"constraints.{i}"}
        try:
            holds = bool(evaluate(constraint, namespace))
        except UnresolvedName as exc:
            if exc.name in d.inputs:
                ctx.report.constraints_deferred += 1
                continue
            msg = f"{constraint!r} names {exc.name}, which is neither an axis nor an input"
            ctx.add("error", "bad-constraint", wl.path, msg, **where)
            continue
        except ExpressionError:
            continue  # reported once per definition
        except Exception as exc:  # a constraint is dataset code; any failure is a finding
            msg = f"{constraint!r} raised {type(exc).__name__}: {exc}"
            ctx.add("error", "constraint-error", wl.path, msg, **where)
            continue
        ctx.report.constraints_checked += 1
        if not holds:
            ctx.add("error", "constraint-failed", wl.path, f"{constraint!r} is false", **where)


# ---------------------------------------------------------------- root-wide


def _check_unreferenced_blobs(ctx: _Context) -> None:
    blob_dir = ctx.ts.root / "blob"
    if not blob_dir.is_dir():
        return
    for path in sorted(blob_dir.rglob("*")):
        if path.is_file() and path.resolve() not in ctx.referenced:
            rel = path.relative_to(ctx.ts.root).as_posix()
            hint = "delete it, or reference it from a workload"
            ctx.add(
                "error", "unreferenced-blob", rel, "no workload references this file", hint=hint
            )


def _check_interfaces(ctx: _Context, selected: set[str]) -> None:
    """interfaces/**/*.json: model, definition, operands; a missing file is only a warning."""
    checked = check_interfaces(ctx.ts.root, ctx.ts.definitions, selected)
    ctx.report.findings.extend(checked.findings)


def _check_suites(ctx: _Context) -> None:
    by_uuid = {w.uuid: w for w in ctx.ts.workloads}
    seen: dict[str, WorkloadLine] = {}
    for wl in ctx.ts.workloads:
        if wl.uuid in seen:
            first = seen[wl.uuid]
            msg = f"uuid also used at {first.path}:{first.line}"
            ctx.add("error", "duplicate-uuid", wl.path, msg, workload=wl.uuid, line=wl.line)
        seen.setdefault(wl.uuid, wl)
    for suite in ctx.ts.suites.values():
        rel = f"suites/{suite.name}.json"
        for definition, uuids in suite.workloads.items():
            for uuid in uuids:
                listed = by_uuid.get(uuid)
                if listed is None:
                    msg = f"suite lists {uuid}, which no workload file has"
                    ctx.add("error", "unknown-workload", rel, msg, workload=uuid, field=definition)
                elif listed.trace.definition != definition:
                    owner = listed.trace.definition
                    msg = f"listed under {definition}, but it belongs to {owner}"
                    ctx.add("error", "suite-mismatch", rel, msg, workload=uuid, field=definition)
