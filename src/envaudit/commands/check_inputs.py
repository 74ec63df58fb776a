"""`envaudit check-inputs`: every definition, workload, tensor path and blob of a TraceSet
root checked (dataset/checks.py), and whether what was found fails the check."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from envaudit.dataset.checks import check_inputs
from envaudit.dataset.traceset import DatasetRootError
from envaudit.errors import EnvauditError
from envaudit.schema.findings import Finding


@dataclass(frozen=True)
class CheckInputsRequest:
    data_root: Path
    definitions: tuple[str, ...] = ()
    """Check only these definitions (none: every one)."""
    strict: bool = False
    """Count warnings (no hash, no provenance, ...) as problems too."""


@dataclass(frozen=True)
class CheckInputsResult:
    """Every finding in the order the checks made them, the counts line, and the verdict."""

    data_root: Path
    findings: list[Finding]
    summary: str
    errors: int
    warnings: int
    failed: bool


def check_data_root(request: CheckInputsRequest) -> CheckInputsResult:
    """The findings of every check; an EnvauditError (exit 2) when the root is no TraceSet
    root at all, with what to pass instead: there is nothing to check then, which is not the
    same as a dataset with problems (exit 1)."""
    try:
        report = check_inputs(request.data_root, request.definitions)
    except DatasetRootError as exc:
        hint = "pass --data-root pointing at a folder holding definitions/"
        raise EnvauditError(str(exc), hint=hint) from None
    errors, warnings = report.errors, report.warnings
    return CheckInputsResult(
        data_root=request.data_root,
        findings=list(report.findings),
        summary=report.summary(),
        errors=len(errors),
        warnings=len(warnings),
        failed=bool(errors or (request.strict and warnings)),
    )
