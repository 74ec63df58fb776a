"""Interface metadata: the native call a definition stands for, and what a drop-in would take.

A definition is a contract a solution is measured against; it is not automatically a call site
in a serving engine. One interface file per definition (`interfaces/<op_type>/<def>.json` under
the data root, a folder FlashInfer-Bench loaders ignore) records the native function, where
its source is pinned, how each operand maps onto the native arguments and at what cost, and
whether a solution could replace the native call as is. The record is meant to be honest, so
the model refuses the combinations that would overstate it (`drop_in: "yes"` with a copying
adapter, `"no"` without saying what is missing). Unlike the TraceSet models, unknown keys are
refused: these files are envaudit's own format, and a typo would silently drop information.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationInfo, field_validator

DropIn = Literal["yes", "with adapters", "no"]

Cost = Literal["none", "free (view)", "prepare", "copy", "kernel", "engine change"]
"""What an adapter costs per call, cheapest first:

- `none`: the operand is passed as it is.
- `free (view)`: a reshape, slice, unsqueeze or transpose view; no data moves.
- `prepare`: work done once per batch outside the timed call (plans, scheduling metadata).
- `copy`: data moves (gather, scatter, pad, contiguous, dtype cast of an index tensor).
- `kernel`: a computation beyond a copy (an elementwise transform, a reduction, an index remap).
- `engine change`: cannot be done at the call site; the engine's code around the call changes.
"""

# A drop-in ("yes") may need views and per-batch preparation, nothing that moves data per call.
_DROP_IN_COSTS = frozenset({"none", "free (view)", "prepare"})


def _no_url(value: str) -> str:
    """Committed metadata names sources by repo/rev/path, never by link: links rot and redirect."""
    if "://" in value:
        raise ValueError("must not contain a URL; name the source by repo, rev and path")
    return value


def _relative_path(value: str) -> str:
    """A path that stays inside the repository, so `repo` + `rev` + `path` name one file."""
    parts = value.split("/")
    if value.startswith("/") or ".." in parts or any(not p or p.isspace() for p in parts):
        raise ValueError("must be a relative path inside the repository (no '/' start, no '..')")
    return value


Text = Annotated[str, Field(min_length=1), AfterValidator(_no_url)]


class _Model(BaseModel):
    """Base: refuse unknown keys, take attribute docstrings into the JSON Schema."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


class PinnedSource(_Model):
    """Where the native call is defined or made, at a fixed revision."""

    repo: Annotated[Text, Field(pattern=r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")]
    """GitHub-style `owner/name`."""
    rev: Annotated[Text, Field(pattern=r"^[A-Za-z0-9._+/-]+$")]
    """A commit (full or abbreviated hex) or a release tag; never a branch that moves."""
    path: Annotated[Text, AfterValidator(_relative_path)]
    """A file inside the repository, relative to its root."""
    symbol: Text
    """The function, method or binding in that file (`Class.method` for methods)."""


class Adapter(_Model):
    """One operand of the definition and what it takes to meet the native argument."""

    operand: Text
    """An input or output name of the definition."""
    native: Text
    """The native argument (or return value) it corresponds to."""
    conversion: Text
    """What has to happen: layout change, dtype cast, index remap, or `none`."""
    cost: Cost
    """What the conversion costs per call; see `Cost`."""


class Interface(_Model):
    """The native call a definition stands for, and what dropping a solution into it takes."""

    schema_version: Literal[1]
    """Format version of this file."""
    definition: Annotated[Text, Field(pattern=r"^[A-Za-z0-9_.-]+$")]
    """Name of the definition this file describes."""
    library: Text
    """Library that owns the native call: SGLang, FlashInfer, FlashMLA, NATTEN, DeepGEMM, ..."""
    function: Annotated[Text, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$")]
    """Fully qualified call, e.g. `flash_mla.flash_mla_with_kvcache`."""
    pinned_source: PinnedSource
    """Source of the native call (or of the engine code making it) at the audited revision."""
    call_signature: Text
    """The native call's argument list as text, as read at `pinned_source` or noted otherwise."""
    adapters: list[Adapter]
    """Per operand: the native counterpart and the conversion a drop-in needs."""
    drop_in: DropIn
    """`yes`: views only; `with adapters`: conversions listed; `no`: the call site must change."""
    integration_work: list[Text]
    """What is left to do before a solution could serve in place of the native call."""
    notes: Text
    """Caveats, and everything that could not be confirmed at the pinned revision."""

    @field_validator("drop_in")
    @classmethod
    def _drop_in_is_honest(cls, value: DropIn, info: ValidationInfo) -> DropIn:
        """Refuse a verdict its own adapters contradict (adapters validate before drop_in)."""
        adapters: list[Adapter] = info.data.get("adapters") or []
        costs = {a.cost for a in adapters}
        if value == "yes" and not costs <= _DROP_IN_COSTS:
            raise ValueError(f"'yes' needs view-only adapters; these cost {sorted(costs)}")
        if value != "no" and "engine change" in costs:
            raise ValueError("an adapter costs an engine change, so the verdict must be 'no'")
        return value

    @field_validator("integration_work")
    @classmethod
    def _no_says_why(cls, value: list[str], info: ValidationInfo) -> list[str]:
        """A 'no' verdict must list what is missing, or it tells the reader nothing."""
        if info.data.get("drop_in") == "no" and not value:
            raise ValueError("drop_in is 'no': list what the integration still needs")
        return value
