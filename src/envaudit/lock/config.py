"""Where artifacts are looked for and kept. Nothing here is committed: it comes from the
environment (or command-line flags), the way uv and pip are configured. The ENVAUDIT_*
variables (ENVAUDIT_STORE, _FIND_LINKS, _MIRRORS, _GIT_BASES, _OFFLINE, _INDEX_URL) are declared
in envaudit.settings (docs/settings.md); without ENVAUDIT_FIND_LINKS or ENVAUDIT_INDEX_URL,
uv's and pip's own variables are read, then the default index.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from envaudit.settings import (
    FIND_LINKS,
    GIT_BASES,
    INDEX_URL,
    MIRRORS,
    OFFLINE,
    STORE,
    read,
    value,
)

DEFAULT_INDEX = "https://pypi.org/simple"  # the packaging default, as in pip and uv


def _first_env(*names: str) -> str | None:
    for name in names:
        if os.environ.get(name):
            return os.environ[name]
    return None


@dataclass
class FetchConfig:
    store: Path
    find_links: list[Path] = field(default_factory=list)
    mirrors: list[str] = field(default_factory=list)
    git_bases: list[str] = field(default_factory=list)
    index_url: str = DEFAULT_INDEX
    offline: bool = False
    no_index: bool = False
    """Resolve from the find-links alone (uv --no-index --offline): what `bisect-env` resolves
    its intermediate locks with, from a folder of the store's files."""

    @classmethod
    def from_environment(
        cls,
        store: Path | None = None,
        find_links: list[Path] | None = None,
        offline: bool = False,
    ) -> FetchConfig:
        links = read(FIND_LINKS)
        if links is None:
            links = FIND_LINKS.parse(_first_env("UV_FIND_LINKS", "PIP_FIND_LINKS") or "")
        index = read(INDEX_URL) or _first_env("UV_DEFAULT_INDEX", "UV_INDEX_URL", "PIP_INDEX_URL")
        mirrors, git_bases = read(MIRRORS), read(GIT_BASES)
        return cls(
            store=store or value(STORE),
            find_links=[*(find_links or []), *(Path(p) for p in links)],
            mirrors=list(mirrors or ()),
            git_bases=list(git_bases or ()),
            index_url=(index or DEFAULT_INDEX).rstrip("/"),
            offline=value(OFFLINE) or offline,
        )

    def git_remotes(self, git: str) -> list[str]:
        """Where to clone a source's `git` from: a local path as it is, a repository name
        under each configured base (none configured: nowhere)."""
        if git.startswith(("/", "./", "../")):
            return [git]
        return [f"{base.rstrip('/')}/{git}" for base in self.git_bases]

    def uv_source_args(self) -> list[str]:
        """Flags that give uv the same find-links (uv reads its index settings itself)."""
        args: list[str] = []
        for folder in self.find_links:
            args += ["--find-links", str(folder)]
        if self.no_index:
            args += ["--no-index", "--offline"]
        return args


def uv_binary() -> str:
    """The uv executable: the one installed with envaudit, else the one on PATH."""
    try:
        from uv import find_uv_bin  # type: ignore[import-not-found,unused-ignore]

        return str(find_uv_bin())
    except (ImportError, FileNotFoundError):
        found = shutil.which("uv")
        if found is None:
            from envaudit.lock.files import LockError

            raise LockError("uv is not installed", hint="pip install uv") from None
        return found
