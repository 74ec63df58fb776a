"""Environments for solutions that declare none, and the dependencies a solution names.

FlashInfer-Bench's solutions name no environment, only `spec.dependencies` ("torch",
"flashinfer", "triton >= 3.3") and `target_hardware`. envaudit runs every solution in a lock, so
one that declares none gets one assigned, in this order:

1. `--env ENV` on the command line (which also overrides a declared env);
2. `envs.toml` beside the data (`<data root>/envs.toml`):

       default = "torch-2.11-cu130"          # every solution no rule below names
       [solutions]                           # glob on the solution's name
       "*_cuda" = "torch-2.11-cu130"
       [authors]                             # glob on its author
       "flashinfer-ai" = "flashinfer-0.7.2"
       [definitions]                         # glob on its definition
       "gdn_*" = "flashinfer-0.7.2"

   the first matching rule of [solutions], then [authors], then [definitions], then `default`.

Its lines record how (`context.env_assigned`: "--env", "envs.toml [authors] 'flashinfer-ai'",
"envs.toml default"), so an assigned env is never mistaken for a declared one. Whether the
chosen lock has the solution's dependencies is envaudit.lock.dependencies' question.
"""

from __future__ import annotations

import fnmatch
import tomllib
from dataclasses import dataclass
from pathlib import Path

from envaudit.errors import EnvauditError
from envaudit.schema.names import name_problem, shown

ENV_MAP_FILE = "envs.toml"
RULE_KINDS = ("solutions", "authors", "definitions")


class EnvMapError(EnvauditError):
    """envs.toml cannot be read or says something impossible (exit 2)."""


@dataclass(frozen=True)
class EnvAssignment:
    env: str
    how: str
    """"--env", "envs.toml [authors] 'flashinfer-ai'", "envs.toml default"."""


@dataclass(frozen=True)
class EnvMap:
    path: Path | None
    default: str | None = None
    rules: tuple[tuple[str, str, str], ...] = ()
    """(kind, glob, env) in the order they are tried."""

    def assign(self, solution: str, author: str, definition: str) -> EnvAssignment | None:
        subject = {"solutions": solution, "authors": author, "definitions": definition}
        for kind, pattern, env in self.rules:
            if fnmatch.fnmatchcase(subject[kind], pattern):
                return EnvAssignment(env, f"{ENV_MAP_FILE} [{kind}] {shown(pattern)}")
        if self.default is not None:
            return EnvAssignment(self.default, f"{ENV_MAP_FILE} default")
        return None


def load_env_map(data_root: Path) -> EnvMap:
    """The data root's envs.toml, or an empty map where there is none."""
    path = data_root / ENV_MAP_FILE
    if not path.is_file():
        return EnvMap(None)
    try:
        raw = tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise EnvMapError(f"{path}: cannot be read: {exc}") from None
    unknown = sorted(set(raw) - {"default", *RULE_KINDS})
    if unknown:
        raise EnvMapError(
            f"{path}: unknown key {shown(unknown[0])}",
            hint=f"keys: default, {', '.join(f'[{k}]' for k in RULE_KINDS)}",
        )
    default = raw.get("default")
    if default is not None:
        _require_env_name(path, "default", default)
    rules = []
    for kind in RULE_KINDS:
        table = raw.get(kind, {})
        if not isinstance(table, dict):
            raise EnvMapError(f"{path}: [{kind}] must be a table of glob = env")
        for pattern, env in table.items():
            _require_env_name(path, f"[{kind}] {shown(pattern)}", env)
            rules.append((kind, str(pattern), str(env)))
    return EnvMap(path, default, tuple(rules))


def _require_env_name(path: Path, where: str, env: object) -> None:
    problem = name_problem(env) if isinstance(env, str) else "not a string"
    if problem:
        raise EnvMapError(f"{path}: {where}: the env {shown(str(env))} is not valid: {problem}")
