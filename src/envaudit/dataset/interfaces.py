"""Read `interfaces/**/*.json` under a data root and cross-check them against the definitions.

Interface files are optional: a root without an `interfaces/` folder (a plain FlashInfer-Bench
dataset) yields no findings at all. Once the folder exists, every definition is expected to have
one, but a missing file is only a warning: the metadata describes integration, not the contract
a solution is measured against. Like the TraceSet loader, this never stops at the first bad
file; every problem becomes a Finding naming the file and the field.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from envaudit.dataset.traceset import DefinitionFile, load_traceset
from envaudit.schema.findings import Finding
from envaudit.schema.interfaces import Interface
from envaudit.schema.reading import UnreadableFile, load_json

INTERFACES_DIR = "interfaces"


@dataclass(frozen=True)
class InterfaceFile:
    path: str
    """Relative to the data root, with forward slashes."""
    interface: Interface


@dataclass
class InterfaceCheck:
    """The interface files that passed every check, and the findings of those that did not."""

    valid: dict[str, InterfaceFile] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    described: set[str] = field(default_factory=set)
    """Definition names some file claims, valid or not: those are not reported as missing."""


def load_interfaces(root: Path) -> dict[str, Interface]:
    """Definition name -> its interface, for every interface file that passes `check_interfaces`.

    Raises DatasetRootError when `root` is not a TraceSet root.
    """
    checked = check_interfaces(root, load_traceset(root).definitions)
    return {name: entry.interface for name, entry in checked.valid.items()}


def check_interfaces(
    root: Path, definitions: Mapping[str, DefinitionFile], only: Collection[str] = ()
) -> InterfaceCheck:
    """Validate every interface file; with `only`, report on those definitions alone."""
    result = InterfaceCheck()
    folder = root / INTERFACES_DIR
    if not folder.is_dir():
        return result
    for path in sorted(folder.rglob("*.json")):
        _check_file(result, root, path, definitions, set(only))
    for name, dfile in definitions.items():
        if (only and name not in only) or name in result.described:
            continue
        expected = f"{INTERFACES_DIR}/{dfile.definition.op_type}/{name}.json"
        hint = "describe the native call it stands for (docs/schema/interface.schema.json)"
        msg = f"definition {name} has no interface file"
        result.findings.append(Finding("warning", "missing-interface", expected, msg, hint=hint))
    return result


def _check_file(
    result: InterfaceCheck,
    root: Path,
    path: Path,
    definitions: Mapping[str, DefinitionFile],
    only: set[str],
) -> None:
    rel = path.relative_to(root).as_posix()
    findings: list[Finding] = []
    data = _read_json(findings, path, rel)
    claimed = data.get("definition") if isinstance(data, dict) else None
    name = claimed if isinstance(claimed, str) else path.stem
    if only and name not in only:
        return
    result.described.add(name)
    interface = _validate(findings, data, rel) if data is not None else None
    if interface is not None:
        _cross_check(findings, result, rel, interface, definitions)
    result.findings.extend(findings)
    if interface is not None and not any(f.severity == "error" for f in findings):
        result.valid[interface.definition] = InterfaceFile(rel, interface)


def _read_json(findings: list[Finding], path: Path, rel: str) -> Any:
    try:
        return load_json(path)
    except json.JSONDecodeError as exc:
        msg = f"malformed JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        findings.append(Finding("error", "malformed-json", rel, msg))
    except (OSError, UnreadableFile) as exc:
        findings.append(Finding("error", "unreadable", rel, str(exc)))
    return None


def _validate(findings: list[Finding], data: Any, rel: str) -> Interface | None:
    """The parsed interface, or None with one finding per invalid or unknown field."""
    try:
        return Interface.model_validate(data)
    except ValidationError as exc:
        for err in exc.errors():
            loc = ".".join(str(p) for p in err["loc"]) or None
            msg = (
                "key not in the interface format"
                if err["type"] == "extra_forbidden"
                else err["msg"]
            )
            findings.append(Finding("error", "invalid-field", rel, msg, field=loc))
        return None


def _cross_check(
    findings: list[Finding],
    result: InterfaceCheck,
    rel: str,
    interface: Interface,
    definitions: Mapping[str, DefinitionFile],
) -> None:
    """Against the definitions: it exists, once, where expected, and names only its operands."""
    name = interface.definition
    if name in result.valid:
        msg = f"definition {name} also has an interface in {result.valid[name].path}"
        findings.append(Finding("error", "duplicate-interface", rel, msg, field="definition"))
    dfile = definitions.get(name)
    if dfile is None:
        msg = f"no definition named {name} under definitions/"
        findings.append(Finding("error", "unknown-definition", rel, msg, field="definition"))
        return
    expected = f"{INTERFACES_DIR}/{dfile.definition.op_type}/{name}.json"
    if rel != expected:
        msg = f"expected at {expected}, beside its definition's op_type"
        findings.append(Finding("warning", "interface-location", rel, msg, field="definition"))
    d = dfile.definition
    operands = set(d.inputs) | set(d.outputs)
    for i, adapter in enumerate(interface.adapters):
        if adapter.operand not in operands:
            known = ", ".join([*d.inputs, *d.outputs])
            msg = f"{adapter.operand} is not an input or output of {name} (has: {known})"
            field_name = f"adapters.{i}.operand"
            findings.append(Finding("error", "unknown-operand", rel, msg, field=field_name))
