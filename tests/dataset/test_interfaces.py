"""Interface metadata: the shipped files cover every definition, and each break is named."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from envaudit.cli import app
from envaudit.dataset.checks import check_inputs
from envaudit.dataset.interfaces import load_interfaces
from envaudit.dataset.traceset import load_traceset
from envaudit.schema.interfaces import Interface
from tests.conftest import SHIPPED_ROOT, tree_digest

TOY_INTERFACE = "interfaces/toy/toy_scale.json"


def toy_interface() -> dict[str, Any]:
    """A valid interface for conftest's toy_scale definition (inputs x, lengths, scale; out)."""
    return {
        "schema_version": 1,
        "definition": "toy_scale",
        "library": "PyTorch",
        "function": "torch.mul",
        "pinned_source": {
            "repo": "pytorch/pytorch",
            "rev": "v2.11.0",
            "path": "torch/_torch_docs.py",
            "symbol": "mul",
        },
        "call_signature": "mul(input, other, *, out=None)",
        "adapters": [
            {"operand": "x", "native": "input", "conversion": "none", "cost": "none"},
            {"operand": "scale", "native": "other", "conversion": "none", "cost": "none"},
            {
                "operand": "lengths",
                "native": "no native argument",
                "conversion": "mask rows past lengths[b] after the call",
                "cost": "kernel",
            },
            {"operand": "out", "native": "return value", "conversion": "none", "cost": "none"},
        ],
        "drop_in": "with adapters",
        "integration_work": ["mask the rows past each length"],
        "notes": "A made-up interface for the tests.",
    }


def write_interface(root: Path, doc: dict[str, Any], rel: str = TOY_INTERFACE) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2))


def run_check(root: Path, *extra: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["check-inputs", "--data-root", str(root), *extra])
    return result.exit_code, result.output


def lines_with(out: str, code: str) -> list[str]:
    return [line for line in out.splitlines() if f"[{code}]" in line]


# ---------------------------------------------------------------- shipped data


def test_every_shipped_definition_has_a_valid_interface() -> None:
    definitions = load_traceset(SHIPPED_ROOT).definitions
    interfaces = load_interfaces(SHIPPED_ROOT)
    assert set(interfaces) == set(definitions)
    for name, interface in interfaces.items():
        d = definitions[name].definition
        operands = {a.operand for a in interface.adapters}
        assert operands == set(d.inputs) | set(d.outputs), f"{name}: adapters miss operands"


def test_shipped_interfaces_pass_check_inputs() -> None:
    report = check_inputs(SHIPPED_ROOT)
    codes = [f.render() for f in report.findings if "interface" in f.path]
    assert codes == []


@pytest.mark.parametrize(
    "path",
    sorted((SHIPPED_ROOT / "interfaces").rglob("*.json")),
    ids=lambda p: p.stem,
)
def test_shipped_file_validates_and_carries_no_url(path: Path) -> None:
    text = path.read_text()
    assert "://" not in text
    interface = Interface.model_validate_json(text)
    assert path.stem == interface.definition
    if interface.drop_in != "yes":
        assert interface.integration_work, "a partial fit must say what is left to do"


def test_missing_interface_in_shipped_copy_is_a_warning(tmp_path: Path) -> None:
    root = tmp_path / "root"
    shutil.copytree(SHIPPED_ROOT, root)
    gone = "interfaces/gdn/gdn_decode_qk4_v8_d128_k_last.json"
    (root / gone).unlink()
    code, out = run_check(root)
    assert code == 0, out
    warned = lines_with(out, "missing-interface")
    assert warned == [
        f"warning[missing-interface] {gone}: "
        "definition gdn_decode_qk4_v8_d128_k_last has no interface file "
        "(hint: describe the native call it stands for (docs/schema/interface.schema.json))"
    ]
    assert "0 problems, 1 warnings" in out
    code, _ = run_check(root, "--strict")
    assert code == 1


# ---------------------------------------------------------------- toy root


def test_valid_interface_is_clean(toy_root: Path) -> None:
    write_interface(toy_root, toy_interface())
    code, out = run_check(toy_root, "--strict")
    assert code == 0, out
    assert "0 problems, 0 warnings" in out
    assert set(load_interfaces(toy_root)) == {"toy_scale"}


def test_root_without_interfaces_folder_reports_nothing(toy_root: Path) -> None:
    """Third-party datasets carry no interfaces; that must not even warn."""
    code, out = run_check(toy_root, "--strict")
    assert code == 0, out
    assert "interface" not in out
    assert load_interfaces(toy_root) == {}


def test_missing_interface_is_a_warning_once_the_folder_exists(toy_root: Path) -> None:
    (toy_root / "interfaces/toy").mkdir(parents=True)
    code, out = run_check(toy_root)
    assert code == 0, out
    assert any(TOY_INTERFACE in line for line in lines_with(out, "missing-interface")), out
    code, _ = run_check(toy_root, "--strict")
    assert code == 1


def unknown_definition(root: Path) -> None:
    write_interface(root, toy_interface())
    write_interface(
        root, dict(toy_interface(), definition="toy_gone"), "interfaces/toy/toy_gone.json"
    )


def unknown_operand(root: Path) -> None:
    doc = toy_interface()
    doc["adapters"][1]["operand"] = "y"
    write_interface(root, doc)


def extra_key(root: Path) -> None:
    write_interface(root, dict(toy_interface(), homepage="pytorch.org"))


def extra_nested_key(root: Path) -> None:
    doc = toy_interface()
    doc["pinned_source"]["branch"] = "main"
    write_interface(root, doc)


def bad_drop_in(root: Path) -> None:
    write_interface(root, dict(toy_interface(), drop_in="maybe"))


def bad_cost(root: Path) -> None:
    doc = toy_interface()
    doc["adapters"][0]["cost"] = "cheap"
    write_interface(root, doc)


def url_in_source(root: Path) -> None:
    doc = toy_interface()
    doc["pinned_source"]["path"] = "https://example.org/torch/_torch_docs.py"
    write_interface(root, doc)


def yes_with_copy(root: Path) -> None:
    doc = toy_interface()
    doc["adapters"][2]["cost"] = "copy"
    write_interface(root, dict(doc, drop_in="yes"))


def no_without_work(root: Path) -> None:
    write_interface(root, dict(toy_interface(), drop_in="no", integration_work=[]))


def missing_field(root: Path) -> None:
    doc = toy_interface()
    del doc["call_signature"]
    write_interface(root, doc)


def malformed(root: Path) -> None:
    path = root / TOY_INTERFACE
    path.parent.mkdir(parents=True)
    path.write_text('{"definition": "toy_scale", ')


# (break, finding code, strings one finding line must contain: file, field, detail)
CASES: list[tuple[Callable[[Path], None], str, list[str]]] = [
    (unknown_definition, "unknown-definition", ["interfaces/toy/toy_gone.json", ": definition:"]),
    (unknown_operand, "unknown-operand", [TOY_INTERFACE, "adapters.1.operand", "y is not"]),
    (extra_key, "invalid-field", [TOY_INTERFACE, ": homepage:", "not in the interface format"]),
    (extra_nested_key, "invalid-field", [TOY_INTERFACE, "pinned_source.branch"]),
    (bad_drop_in, "invalid-field", [TOY_INTERFACE, ": drop_in:", "'with adapters'"]),
    (bad_cost, "invalid-field", [TOY_INTERFACE, "adapters.0.cost"]),
    (url_in_source, "invalid-field", [TOY_INTERFACE, "pinned_source.path", "URL"]),
    (yes_with_copy, "invalid-field", [TOY_INTERFACE, ": drop_in:", "view-only"]),
    (no_without_work, "invalid-field", [TOY_INTERFACE, "integration_work", "list what"]),
    (missing_field, "invalid-field", [TOY_INTERFACE, "call_signature", "Field required"]),
    (malformed, "malformed-json", [TOY_INTERFACE, "malformed JSON"]),
]


@pytest.mark.parametrize(("breaker", "code", "needles"), CASES, ids=[c[0].__name__ for c in CASES])
def test_break_is_reported_with_file_and_field(
    toy_root: Path, breaker: Callable[[Path], None], code: str, needles: list[str]
) -> None:
    breaker(toy_root)
    before = tree_digest(toy_root)
    exit_code, out = run_check(toy_root)
    assert exit_code == 1, out
    lines = lines_with(out, code)
    assert lines, f"no {code} finding in:\n{out}"
    assert any(all(n in line for n in needles) for line in lines), out
    assert all(line.startswith("error[") for line in lines), out
    assert tree_digest(toy_root) == before, "check-inputs modified the root"
    assert "toy_scale" not in load_interfaces(toy_root) or code == "unknown-definition"


def test_broken_file_is_not_also_reported_missing(toy_root: Path) -> None:
    malformed(toy_root)
    _, out = run_check(toy_root)
    assert not lines_with(out, "missing-interface"), out


def test_misplaced_file_is_a_warning(toy_root: Path) -> None:
    write_interface(toy_root, toy_interface(), "interfaces/elsewhere/toy_scale.json")
    code, out = run_check(toy_root)
    assert code == 0, out
    assert any(TOY_INTERFACE in line for line in lines_with(out, "interface-location")), out


def test_duplicate_interface_is_an_error(toy_root: Path) -> None:
    write_interface(toy_root, toy_interface())
    write_interface(toy_root, toy_interface(), "interfaces/toy/zz_copy.json")
    code, out = run_check(toy_root)
    assert code == 1, out
    assert any("zz_copy.json" in line for line in lines_with(out, "duplicate-interface")), out


def test_definition_filter_limits_interface_findings(toy_root: Path) -> None:
    unknown_definition(toy_root)
    code, out = run_check(toy_root, "--definition", "toy_scale")
    assert code == 0, out
    assert "toy_gone" not in out


def test_model_rejects_a_path_that_leaves_the_repository() -> None:
    doc = toy_interface()
    doc["pinned_source"]["path"] = "../outside.py"
    with pytest.raises(ValidationError, match="relative path inside the repository"):
        Interface.model_validate(doc)
