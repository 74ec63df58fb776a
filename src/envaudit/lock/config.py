"""Where artifacts are looked for and kept. Nothing here is committed: it comes from the
environment (or command-line flags), the way uv and pip are configured.

- ENVAUDIT_STORE: the content-addressed store (default ~/.cache/envaudit/store).
- ENVAUDIT_FIND_LINKS, then UV_FIND_LINKS / PIP_FIND_LINKS: folders of artifacts (spaces or
  commas between them).
- ENVAUDIT_MIRRORS: folders or http(s) bases holding artifacts as <base>/<filename> or
  <base>/sha256/<hash>.
- ENVAUDIT_GIT_BASES: git hosts or mirror folders; a source's `owner/name` is cloned from
  `<base>/owner/name`, trying each base in order.
- ENVAUDIT_OFFLINE=1: use only the store (what `--offline` does), e.g. for an audit that must
  not download.
- ENVAUDIT_INDEX_URL, then UV_DEFAULT_INDEX / UV_INDEX_URL / PIP_INDEX_URL: a PEP 691 simple
  index; without any, uv's and pip's own default index.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_INDEX = "https://pypi.org/simple"  # the packaging default, as in pip and uv


def _split(value: str | None) -> list[str]:
    """Entries separated by spaces or commas (as pip and uv read theirs): not by ':', which
    http mirrors contain."""
    return [part for part in re.split(r"[\s,]+", value or "") if part]


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

    @classmethod
    def from_environment(
        cls,
        store: Path | None = None,
        find_links: list[Path] | None = None,
        offline: bool = False,
    ) -> FetchConfig:
        default_store = Path(os.path.expanduser("~/.cache/envaudit/store"))
        links = _split(_first_env("ENVAUDIT_FIND_LINKS", "UV_FIND_LINKS", "PIP_FIND_LINKS"))
        return cls(
            store=store or Path(os.environ.get("ENVAUDIT_STORE") or default_store),
            find_links=[*(find_links or []), *(Path(p) for p in links)],
            mirrors=_split(os.environ.get("ENVAUDIT_MIRRORS")),
            git_bases=_split(os.environ.get("ENVAUDIT_GIT_BASES")),
            index_url=(
                _first_env(
                    "ENVAUDIT_INDEX_URL", "UV_DEFAULT_INDEX", "UV_INDEX_URL", "PIP_INDEX_URL"
                )
                or DEFAULT_INDEX
            ).rstrip("/"),
            offline=offline or os.environ.get("ENVAUDIT_OFFLINE") == "1",
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
