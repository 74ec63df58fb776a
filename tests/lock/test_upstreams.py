"""`envaudit upstreams` against real things: the configured index for registry pins, a git
repository made here for a git pin that `git ls-remote` can reach without network."""

from __future__ import annotations

import json
import os
import re
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from envaudit.cli import app
from envaudit.lock.config import FetchConfig
from envaudit.lock.upstreams import SIMPLE_JSON, render, summarize_index

ENV_TOML = """\
description = "{description}"
python = "3.11"
platform = "x86_64-manylinux_2_28"
base = {{ recipe = "bookworm-minbase" }}
requirements = [{requirements}]
"""

GIT_SOURCES = """
[[sources]]
name = "localrepo"
git = "{repo}"
rev = "{rev}"

[[sources]]
name = "gone"
git = "{missing}"
rev = "{rev}"
"""

INDEX_VARS = ("ENVAUDIT_INDEX_URL", "UV_DEFAULT_INDEX", "UV_INDEX_URL", "PIP_INDEX_URL")


def _git(repo: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    done = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True, env=env
    )
    return done.stdout.strip()


def _local_repo(path: Path) -> str:
    """A one-commit repository; returns its HEAD commit."""
    path.mkdir()
    _git(path, "init", "-q")
    (path / "README").write_text("upstream\n")
    _git(path, "add", "README")
    _git(path, "commit", "-q", "-m", "first")
    return _git(path, "rev-parse", "HEAD")


def _write_env(locks: Path, name: str, requirements: list[str], extra: str = "") -> None:
    folder = locks / name
    folder.mkdir(parents=True)
    listed = ", ".join(f'"{r}"' for r in requirements)
    text = ENV_TOML.format(description=name, requirements=listed) + extra
    (folder / "env.toml").write_text(text)


@pytest.fixture
def locks(tmp_path: Path) -> Path:
    """Two envs sharing six==1.16.0; the second also pins idna and two git sources."""
    root = tmp_path / "locks"
    rev = _local_repo(tmp_path / "upstream")
    _write_env(root, "alpha", ["six==1.16.0"])
    sources = GIT_SOURCES.format(repo=tmp_path / "upstream", rev=rev, missing=tmp_path / "nope")
    _write_env(root, "beta", ["six==1.16.0", "idna==3.10"], sources)
    return root


def _index_reachable() -> bool:
    url = FetchConfig.from_environment(store=Path("unused")).index_url
    request = urllib.request.Request(f"{url}/six/", headers={"Accept": SIMPLE_JSON})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            json.loads(response.read())
    except (OSError, ValueError):
        return False
    return True


def _run(locks: Path, out: Path, *flags: str) -> tuple[int, str]:
    argv = ["upstreams", "--locks-dir", str(locks), "--out", str(out), *flags]
    result = CliRunner().invoke(app, argv)
    return result.exit_code, result.output


def _pins(out: Path) -> list[dict[str, Any]]:
    pins: list[dict[str, Any]] = json.loads(out.read_text())["pins"]
    return pins


def _one(pins: list[dict[str, Any]], env: str, name: str) -> dict[str, Any]:
    (found,) = [p for p in pins if p["env"] == env and p["name"] == name]
    return found


def _assert_names_no_host(text: str, *secrets: str) -> None:
    assert "http" not in text
    assert not re.search(r"\b[a-z0-9-]+\.(org|com|io|net|dev)\b", text)
    for secret in secrets:
        assert secret not in text


def test_git_pins_current_and_unreachable(locks: Path, tmp_path: Path) -> None:
    out = tmp_path / "out" / "upstreams.json"
    code, output = _run(locks, out)
    assert code == 0, output
    pins = _pins(out)
    local = _one(pins, "beta", "localrepo")
    assert local["kind"] == "git"
    assert local["status"] == "current"
    assert local["latest"] == local["pinned"]
    gone = _one(pins, "beta", "gone")
    assert gone["status"] == "unreachable"
    assert gone["detail"]
    text = out.read_text()
    assert str(tmp_path / "upstream") not in text  # remotes are named by source, never by URL
    assert str(tmp_path / "nope") not in text
    assert "localrepo" in output


def test_registry_pins_against_the_index(locks: Path, tmp_path: Path) -> None:
    if not _index_reachable():
        pytest.skip("the configured index cannot be reached from here")
    out = tmp_path / "upstreams.json"
    code, output = _run(locks, out)
    assert code == 0, output
    pins = _pins(out)
    for env in ("alpha", "beta"):
        six = _one(pins, env, "six")
        assert six["status"] == "behind"
        assert six["pinned"] == "1.16.0"
        assert summarize_index({"versions": [six["latest"], "1.17.0"]}).latest == six["latest"]
    idna = _one(pins, "beta", "idna")
    assert idna["status"] in ("current", "behind")
    report = json.loads(out.read_text())
    assert report["summary"]["behind"] >= 2
    assert report["summary"]["unreachable"] == 1
    _assert_names_no_host(out.read_text(), FetchConfig.from_environment(store=Path(".")).index_url)
    six_rows = [line for line in output.splitlines() if line.startswith("six ")]
    assert len(six_rows) == 1 and "alpha,beta" in six_rows[0]  # shared pin shown once


def test_offline_asks_nothing(locks: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENVAUDIT_INDEX_URL", "http://127.0.0.1:9/simple")
    out = tmp_path / "upstreams.json"
    code, output = _run(locks, out, "--offline")
    assert code == 0, output
    report = json.loads(out.read_text())
    assert {p["status"] for p in report["pins"]} == {"not checked (offline)"}
    assert report["summary"] == {"not checked (offline)": 5}
    assert report["index"] == "configured"
    _assert_names_no_host(out.read_text(), "127.0.0.1", ":9")


def test_offline_does_not_overwrite_checked_results(locks: Path, tmp_path: Path) -> None:
    """A report that holds answers (docs/report/upstreams.json) is not replaced by one that asked
    nothing: refused, exit 2, naming the file; an offline report may replace an offline one."""
    out = tmp_path / "upstreams.json"
    checked = {"offline": False, "pins": [{"name": "six", "status": "current"}], "summary": {}}
    out.write_text(json.dumps(checked))
    before = out.read_bytes()
    code, output = _run(locks, out, "--offline")
    assert code == 2, output
    assert str(out) in output and "checked results" in output and "--out" in output, output
    assert out.read_bytes() == before
    out.write_text(json.dumps({**checked, "offline": True}))
    code, output = _run(locks, out, "--offline")
    assert code == 0, output
    assert json.loads(out.read_text())["summary"] == {"not checked (offline)": 5}


def test_unreachable_index_is_reported_not_an_error(
    locks: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENVAUDIT_INDEX_URL", "http://127.0.0.1:9/simple")
    out = tmp_path / "upstreams.json"
    code, output = _run(locks, out)
    assert code == 0, output
    pins = _pins(out)
    assert _one(pins, "alpha", "six")["status"] == "unreachable"
    _assert_names_no_host(out.read_text(), "127.0.0.1")


def test_no_env_toml_exits_2(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    code, output = _run(tmp_path / "empty", tmp_path / "upstreams.json", "--offline")
    assert code == 2
    assert "no env.toml" in output
    assert not (tmp_path / "upstreams.json").exists()


def test_unwritable_output_exits_2(locks: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    code, output = _run(locks, blocker / "upstreams.json", "--offline")
    assert code == 2
    assert "could not write" in output


def test_index_summary_skips_yanked_and_separates_prereleases() -> None:
    answer = summarize_index(
        {
            "versions": ["1.0", "1.1", "2.0rc1", "1.2"],
            "files": [
                {"filename": "pkg-1.2-py3-none-any.whl", "yanked": "broken"},
                {"filename": "pkg-1.1.tar.gz", "yanked": False},
            ],
        }
    )
    assert (answer.latest, answer.latest_prerelease) == ("1.1", "2.0rc1")
    assert answer.yanked == {"1.2"}


def test_render_lists_a_shared_pin_once() -> None:
    pin = {"kind": "registry", "name": "six", "pinned": "1.16.0", "latest": "1.17.0"}
    report = {
        "pins": [{**pin, "env": "a", "status": "behind"}, {**pin, "env": "b", "status": "behind"}],
        "summary": {"behind": 2},
    }
    lines = render(report).splitlines()
    assert lines[1].split() == ["six", "a,b", "1.16.0", "1.17.0", "behind"]
    assert lines[-1] == "2 pins: 2 behind"


def test_historical_pins_are_listed_never_asked(tmp_path: Path) -> None:
    """A source's historical pins (unreachable by definition) are in the report, each saying
    which built rev stands in for it; no remote is asked about them."""
    root = tmp_path / "locks"
    rev = _local_repo(tmp_path / "upstream")
    source = GIT_SOURCES.format(repo=tmp_path / "upstream", rev=rev, missing=tmp_path / "nope")
    source = source.split('[[sources]]\nname = "gone"')[0]
    source += '[sources.historical]\nrev = "0f11e178"\nnote = "the audit\'s commit"\n'
    source += 'submodules = { "vendor" = "' + "4" * 40 + '" }\n'
    _write_env(root, "gamma", ["six==1.16.0"], source)
    out = tmp_path / "upstreams.json"
    code, output = _run(root, out)
    assert code == 0, output
    pins = [p for p in _pins(out) if p["kind"] == "historical"]
    assert [(p["name"], p["pinned"], p["status"]) for p in pins] == [
        ("localrepo", "0f11e178", "not checked"),
        ("localrepo/vendor", "4" * 40, "not checked"),
    ]
    assert all(f"{rev[:12]} stands in for it (the audit's commit)" in p["detail"] for p in pins)
    (built,) = [p for p in _pins(out) if p["kind"] == "git" and p["name"] == "localrepo"]
    assert (built["pinned"], built["status"]) == (rev, "current")
