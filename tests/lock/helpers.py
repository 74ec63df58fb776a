"""Helpers shared by the source-build tests: real git in tmp repositories, env.toml headers for
this interpreter, and the CLI run against a tmp locks folder."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner, Result

from envaudit.cli import app
from tests.conftest import base_recipe_for

FILE_ALLOWED = ["-c", "protocol.file.allow=always"]
PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"


def env_header() -> str:
    """The first lines of an env.toml for this interpreter's Python (and a base that has it)."""
    return (
        f'python = "{PYTHON}"\nplatform = "x86_64-manylinux_2_28"\n'
        f'base = {{ recipe = "{base_recipe_for(PYTHON)}" }}\n'
    )


def setuptools_pyproject(name: str) -> str:
    """pyproject.toml of a setuptools project `name` 0.1.0 (its setup.py says the rest)."""
    return (
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n\n'
        f'[project]\nname = "{name}"\nversion = "0.1.0"\n'
    )


def envaudit(places: Path, *argv: str) -> Result:
    """The CLI with `--locks-dir places/locks`."""
    return CliRunner().invoke(app, [*argv, "--locks-dir", str(places / "locks")])


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "LC_ALL": "C"}
    env.update(GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t")
    done = subprocess.run(
        ["git", *args], cwd=repo, env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def commit_all(repo: Path) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "--quiet", "-m", "tiny")
    return git(repo, "rev-parse", "HEAD")


def write(root: Path, files: dict[str, str]) -> None:
    for relative, text in files.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(text)


def new_repo(path: Path, files: dict[str, str]) -> str:
    """A repository at path holding files, committed; its commit."""
    path.mkdir(parents=True)
    git(path, "init", "--quiet", "-b", "main")
    write(path, files)
    return commit_all(path)
