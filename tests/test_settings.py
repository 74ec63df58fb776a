"""Every ENVAUDIT_* variable is declared once, in envaudit.settings: read there when used, a bad
value a usage error naming it, docs/settings.md generated from the declarations, the harness's
own reads in agreement with them, and `envaudit doctor` showing the ones set."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envaudit import settings
from envaudit.cli import app
from envaudit.errors import EXIT_USAGE, EnvauditError
from envaudit.schema.harness import HARNESS_FILES, SOURCE_ROOT
from tests.conftest import REPO, source_lines_matching

NAME = re.compile(r"ENVAUDIT_[A-Z_]+")
SCANNED = ("src", "tests", "scripts", "benchmarks", "docs", "locks", "containers", ".ci")
SUFFIXES = {".py", ".md", ".sh", ".toml", ".json", ""}
NOWHERE = {"ENVAUDIT_ENGINE_HOST": "unix:///nonexistent/envaudit-test.sock"}
TYPO = "ENVAUDIT_" + "CAHCE"  # spelled in two parts: the scan below must not find it


def scanned_files() -> list[Path]:
    files = [REPO / "README.md", REPO / "Makefile"]
    for root in SCANNED:
        for path in sorted((REPO / root).rglob("*")):
            if path.is_file() and path.suffix in SUFFIXES and "__pycache__" not in path.parts:
                files.append(path)
    return files


def test_every_variable_named_anywhere_is_declared() -> None:
    undeclared = {
        f"{name} ({path.relative_to(REPO)})"
        for path in scanned_files()
        for name in NAME.findall(path.read_text(errors="replace"))
        if name not in settings.BY_NAME
    }
    assert not undeclared, "declare these in src/envaudit/settings.py: " + ", ".join(
        sorted(undeclared)
    )


def test_declarations_are_unique_and_used() -> None:
    assert len(settings.BY_NAME) == len(settings.SETTINGS)
    identifiers = {id(v): k for k, v in vars(settings).items() if isinstance(v, settings.Setting)}
    elsewhere = "\n".join(
        path.read_text()
        for root in ("src", "tests", "scripts", "benchmarks")
        for path in (REPO / root).rglob("*.py")
        if path.name not in ("settings.py", "test_settings.py")
    )
    for setting in settings.SETTINGS:
        assert setting.name.startswith(settings.PREFIX) and setting.meaning, setting
        identifier = identifiers[id(setting)]
        used = re.search(rf"\b{identifier}\b", elsewhere) or setting.name in elsewhere
        assert used, f"nothing reads {setting.name}: remove it"


def test_only_settings_reads_envaudit_variables() -> None:
    direct = re.compile(r"""(environ(\.get)?|getenv)\(?\[?\s*["']ENVAUDIT_""")
    found = source_lines_matching(direct, but="settings.py")
    assert not found, "read these through envaudit.settings: " + ", ".join(found)


def _module_level_calls(tree: ast.Module) -> list[ast.Call]:
    """Calls made when the module is imported (not inside a function body)."""
    calls: list[ast.Call] = []
    pending: list[ast.AST] = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            continue
        if isinstance(node, ast.Call):
            calls.append(node)
        pending.extend(ast.iter_child_nodes(node))
    return calls


def test_no_variable_is_read_at_import() -> None:
    readers = {"read", "value", "cache_root", "server_idle_s", "getenv"}
    found = []
    for path in sorted((REPO / "src").rglob("*.py")):
        for call in _module_level_calls(ast.parse(path.read_text())):
            func = call.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
            environ = isinstance(func, ast.Attribute) and ast.unparse(func.value).endswith(
                "environ"
            )
            if name in readers or environ:
                found.append(f"{path.relative_to(REPO)}:{call.lineno} {ast.unparse(call)}")
    assert not found, "read variables when they are used, not at import: " + ", ".join(found)


def test_the_committed_docs_are_the_generated_ones() -> None:
    committed = (REPO / settings.DOCS_PATH).read_text()
    assert committed == settings.render_docs(), "run `make settings`"
    for setting in settings.SETTINGS:
        assert f"`{setting.name}`" in committed
    assert "docs/settings.md" in (REPO / "README.md").read_text()


def test_the_generator_writes_and_checks(tmp_path: Path) -> None:
    out = tmp_path / "settings.md"
    assert settings.main(["settings", "--check", str(out)]) == 1
    assert settings.main(["settings", str(out)]) == 0
    assert out.read_text() == settings.render_docs()
    assert settings.main(["settings", "--check", str(out)]) == 0


BAD_VALUES = [
    (settings.BUILD_JOBS, "eight"),
    (settings.BUILD_JOBS, "0"),
    (settings.STAGE_NEXT, "two"),
    (settings.STAGE_NEXT, "5"),
    (settings.SERVER_IDLE_S, "soon"),
    (settings.SERVER_IDLE_S, "-1"),
    (settings.SERVER_IDLE_S, "inf"),
    (settings.OFFLINE, "yes"),
    (settings.FORKSERVER, "off"),
    (settings.PRELOAD, "eager"),
    (settings.GPU_ACCESS, "nvidia"),
    (settings.CONTAINER_MEMORY_BYTES, "8G"),
    (settings.CONTAINER_TMPFS, "lots"),
]


@pytest.mark.parametrize(("setting", "raw"), BAD_VALUES)
def test_a_bad_value_is_a_usage_error_naming_the_variable(
    setting: settings.Setting[object], raw: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(setting.name, raw)
    with pytest.raises(EnvauditError) as refused:
        settings.read(setting)
    assert refused.value.exit_code == EXIT_USAGE
    assert str(refused.value) == f"{setting.name}={raw!r} is not {setting.expected}"
    assert refused.value.hint is not None and setting.name in refused.value.hint


def test_values_are_read_when_asked_and_empty_is_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ENVAUDIT_STAGE_NEXT", raising=False)
    assert settings.read(settings.STAGE_NEXT) is None
    monkeypatch.setenv("ENVAUDIT_STAGE_NEXT", " 3 ")
    assert settings.read(settings.STAGE_NEXT) == 3
    monkeypatch.setenv("ENVAUDIT_STAGE_NEXT", "")
    assert settings.read(settings.STAGE_NEXT) is None
    monkeypatch.setenv("ENVAUDIT_CONTAINER_TMPFS", "")
    assert settings.value(settings.CONTAINER_TMPFS) == "8g"
    monkeypatch.setenv("ENVAUDIT_CONTAINER_TMPFS", "512m")
    assert settings.value(settings.CONTAINER_TMPFS) == "512m"
    monkeypatch.setenv("ENVAUDIT_FORKSERVER", "0")
    assert settings.value(settings.FORKSERVER) is False
    monkeypatch.setenv("ENVAUDIT_MIRRORS", "/a, http://m/b  /c")
    assert settings.read(settings.MIRRORS) == ("/a", "http://m/b", "/c")
    monkeypatch.setenv("ENVAUDIT_CACHE", "~/elsewhere")
    assert settings.cache_root() == Path.home() / "elsewhere"
    with pytest.raises(TypeError):
        settings.value(settings.STAGE_NEXT)  # no fallback: the caller's default


def test_every_fallback_parses() -> None:
    for setting in settings.SETTINGS:
        if setting.fallback is not None:
            setting.parse(setting.fallback)


def test_the_harness_reads_its_variables_under_the_declared_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The harness imports only its declared files, settings.py not among them: its reads keep
    their own names, which must be the declared ones (and no other ENVAUDIT_* name)."""
    from envaudit.harness import forkserver
    from envaudit.schema import progress

    assert settings.PRELOAD.name == forkserver.PRELOAD_MODE_ENV
    assert settings.BYTECODE_CACHE.name == progress.BYTECODE_CACHE_ENV
    in_harness = {
        name
        for relative in HARNESS_FILES
        for name in NAME.findall((SOURCE_ROOT / relative).read_text())
    }
    assert in_harness == {s.name for s in settings.SETTINGS if s.harness}
    assert "envaudit/settings.py" not in HARNESS_FILES
    for mode in settings.PRELOAD_MODES:
        monkeypatch.setenv(settings.PRELOAD.name, mode)
        assert forkserver.preload_beside_jobs() == (mode == "beside")
    assert f"at least {forkserver.PRELOAD_BESIDE_MIN_CPUS} CPUs" in settings.PRELOAD.default


def test_a_bad_preload_is_refused_before_the_harness_sees_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from envaudit.runtime.supervision.launchers import ForkServerLauncher

    monkeypatch.setenv(settings.PRELOAD.name, "eager")
    with pytest.raises(EnvauditError, match="ENVAUDIT_PRELOAD='eager'"):
        ForkServerLauncher("python3", {}, {})


def _doctor(env: dict[str, str]) -> str:
    result = CliRunner().invoke(
        app, ["doctor", "--locks-dir", str(REPO / "locks")], env={**NOWHERE, **env}
    )
    assert "Traceback" not in result.output, result.output
    return result.output


def test_doctor_lists_the_variables_set_and_flags_unknown_ones(tmp_path: Path) -> None:
    output = _doctor(
        {
            "ENVAUDIT_STORE": str(tmp_path / "store"),
            "ENVAUDIT_INDEX_URL": "https://user:s3cret@index.example/simple",
            TYPO: str(tmp_path),
        }
    )
    lines = output.splitlines()
    assert any(
        line.startswith("info") and f"ENVAUDIT_STORE={tmp_path / 'store'} (user)" in line
        for line in lines
    ), output
    assert "ENVAUDIT_INDEX_URL=https://user:***@index.example/simple" in output
    assert "s3cret" not in output
    assert any(
        line.startswith("warning") and f"{TYPO}={tmp_path}: unknown" in line for line in lines
    )
    assert "did you mean ENVAUDIT_CACHE?" in output
    assert f"ENVAUDIT_ENGINE_HOST={NOWHERE['ENVAUDIT_ENGINE_HOST']}" in output


def test_doctor_names_a_bad_value_and_goes_on() -> None:
    output = _doctor({"ENVAUDIT_OFFLINE": "yes", "ENVAUDIT_GPU_ACCESS": "nvidia"})
    assert "error   variable" in output and "ENVAUDIT_OFFLINE='yes' is not 0 or 1" in output
    assert "ENVAUDIT_GPU_ACCESS='nvidia' is not one of nvidia-runtime, cdi, device-nodes" in output
    assert "audit runtime" in output  # the checks after it still ran


def test_a_command_given_a_bad_value_exits_2_naming_it(tmp_path: Path) -> None:
    out = tmp_path / "upstreams.json"
    env = {"ENVAUDIT_OFFLINE": "maybe", "ENVAUDIT_CACHE": str(tmp_path)}
    for argv in (["fetch", "torch-cpu"], ["upstreams", "--offline", "--out", str(out)]):
        result = CliRunner().invoke(app, argv, env=env)
        assert result.exit_code == 2, result.output
        assert "ENVAUDIT_OFFLINE='maybe' is not 0 or 1" in result.output
        assert "Traceback" not in result.output
    assert not out.exists()
