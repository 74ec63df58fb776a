"""`envaudit export-solutions`: every solution written as a FlashInfer-Bench Solution, sources
inlined (report/solutions.py), for FlashInfer-Bench itself to read."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from envaudit.report.solutions import export_solutions


@dataclass(frozen=True)
class ExportRequest:
    out: Path
    """Root to write solutions/ under."""
    data_root: Path = Path("workloads")
    solutions_root: Path = Path("solutions")


@dataclass(frozen=True)
class ExportResult:
    folder: Path
    """OUT/solutions, where every file went."""
    written: list[Path]


def export_all(request: ExportRequest) -> ExportResult:
    """Every solution under --solutions-root and the data root's solutions/, written under
    OUT/solutions/<author>/<op_type>/<definition>/<name>.json."""
    written = export_solutions(request.solutions_root, request.data_root, request.out)
    return ExportResult(request.out / "solutions", written)
