"""What differs between two locks, grouped and ordered by how likely it is to matter to a kernel.

A kernel's speed and correctness move first with the interpreter, then with the compiler that
built it (nvcc, its headers), then with torch and the CUDA libraries it calls into, then with
the solution's own libraries, the source commits and build flags of what was compiled here, the
base image, and only last with the rest of the closure. `envaudit diff-env` prints the groups in
that order, each with how many of its items are equal, so the first lines are the ones to read.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from envaudit.lock.history import FoundLock
from envaudit.schema.locks import TORCH_STACK, LockedPackage, LockedSource, split_pin

GROUPS = (
    "Python",
    "CUDA toolchain",
    "torch, Triton and CUDA libraries",
    "the env's own packages",
    "source builds",
    "build flags and files",
    "base image",
    "everything else",
)


@dataclass(frozen=True)
class Change:
    group: str
    item: str
    a: str | None
    """The value in A; None: A does not have it."""
    b: str | None


@dataclass
class EnvDiff:
    a: dict[str, str]
    b: dict[str, str]
    changes: list[Change] = field(default_factory=list)
    equal: dict[str, int] = field(default_factory=dict)

    @property
    def identical(self) -> bool:
        return not self.changes

    def as_dict(self) -> dict[str, Any]:
        return {
            "a": self.a,
            "b": self.b,
            "identical": self.identical,
            "groups": [
                {
                    "group": group,
                    "equal": self.equal.get(group, 0),
                    "changes": [asdict(c) for c in self.changes if c.group == group],
                }
                for group in GROUPS
            ],
        }


Items = dict[str, str]  # item -> value, within one group


def diff_locks(a: FoundLock, b: FoundLock) -> EnvDiff:
    """Every item of both locks, compared within its group. Which packages are "the env's own"
    is read from both sides' env.toml together: a lock copied away from its env.toml groups its
    packages as the original does, so the same content is identical wherever it lies."""
    result = EnvDiff(a=_identity(a), b=_identity(b))
    own = _own_names(a) | _own_names(b)
    items_a, items_b = _items(a, own), _items(b, own)
    for group in GROUPS:
        left, right = items_a.get(group, {}), items_b.get(group, {})
        for item in sorted(set(left) | set(right)):
            if left.get(item) == right.get(item):
                result.equal[group] = result.equal.get(group, 0) + 1
            else:
                result.changes.append(Change(group, item, left.get(item), right.get(item)))
    return result


def _identity(found: FoundLock) -> dict[str, str]:
    return {"env": found.lock.env, "closure_hash": found.lock.closure_hash, "from": found.origin}


def _own_names(found: FoundLock) -> set[str]:
    return _declared_names(found.env_toml) | {s.name for s in found.lock.sources}


def _items(found: FoundLock, own: set[str]) -> dict[str, Items]:
    lock = found.lock
    groups: dict[str, Items] = {g: {} for g in GROUPS}
    groups["Python"] = {"python": lock.python, "platform": lock.platform}
    cuda = groups["CUDA toolchain"]
    if lock.cuda is not None:
        cuda["cuda.version"] = lock.cuda.version
        cuda["cuda.home"] = lock.cuda.home
        cuda["cuda.build_only"] = str(bool(lock.cuda.build_only)).lower()
        if lock.cuda.build_only_components:
            cuda["cuda.build_only_components"] = ", ".join(lock.cuda.build_only_components)
    for package in lock.toolchain_packages():
        cuda[package.name] = _version(package)
    for package in lock.runtime_packages():
        if TORCH_STACK.match(package.name):
            groups["torch, Triton and CUDA libraries"][package.name] = _version(package)
        elif package.name in own:
            groups["the env's own packages"][package.name] = _version(package)
        else:
            groups["everything else"][package.name] = _version(package)
    for source in lock.sources:
        groups["source builds"].update(_source_items(source))
        groups["build flags and files"].update(_build_items(source))
    groups["base image"] = {
        f"base.{k}": str(v) for k, v in lock.base.model_dump().items() if v is not None
    }
    groups["everything else"].update({f"env_vars.{k}": v for k, v in lock.env_vars.items()})
    groups["everything else"]["resolver"] = lock.resolver
    return groups


def _version(package: LockedPackage) -> str:
    """The version, and the artifact's hash when two locks might hold one version built twice."""
    return f"{package.version} (sha256 {package.artifact.sha256[:12]})"


def _source_items(source: LockedSource) -> Items:
    name = source.name
    items: Items = {f"{name}: kind": source.kind, f"{name}: status": source.status}
    if source.rev:
        items[f"{name}: commit"] = source.rev
    for path, commit in source.submodules.items():
        items[f"{name}: submodule {path}"] = commit
    if source.sdist is not None:
        items[f"{name}: sdist"] = f"{source.sdist.filename} (sha256 {source.sdist.sha256[:12]})"
    if source.wheel is not None:
        items[f"{name}: built wheel"] = (
            f"{source.wheel.filename} (sha256 {source.wheel.sha256[:12]})"
        )
    if source.historical is not None:
        items[f"{name}: stands in for"] = source.historical.rev
    return items


def _build_items(source: LockedSource) -> Items:
    name = source.name
    items: Items = {f"{name}: build_env {k}": v for k, v in source.build_env.items()}
    items.update({f"{name}: file {k}": f"sha256 {v[:12]}" for k, v in source.files.items()})
    if source.cuda_arch_list:
        items[f"{name}: cuda_arch_list"] = ";".join(source.cuda_arch_list)
    if source.jobs_env:
        items[f"{name}: jobs_env"] = ",".join(source.jobs_env)
    for package in source.build_requires:
        items[f"{name}: build requires {package.name}"] = package.version
    return items


def _declared_names(env_toml: str | None) -> set[str]:
    """The names env.toml requires directly (not its constraints): the env's own packages."""
    if not env_toml:
        return set()
    try:
        spec = tomllib.loads(env_toml)
    except tomllib.TOMLDecodeError:
        return set()
    requirements: Iterable[str] = spec.get("requirements") or []
    return {split_pin(r)[0] for r in requirements if isinstance(r, str)}


def render_diff(diff: EnvDiff) -> str:
    """Groups in order of what matters; per group the changes, then a count of equal items."""
    lines = [
        f"A  {diff.a['env']}  closure {diff.a['closure_hash'][:16]}  ({diff.a['from']})",
        f"B  {diff.b['env']}  closure {diff.b['closure_hash'][:16]}  ({diff.b['from']})",
        "",
    ]
    if diff.identical:
        lines.append("identical: every item of every group is equal")
    same_only = []
    for group in GROUPS:
        changes = [c for c in diff.changes if c.group == group]
        equal = diff.equal.get(group, 0)
        if not changes:
            if equal:
                same_only.append(f"{group} ({equal})")
            continue
        lines.append(f"{group}: {len(changes)} differ, {equal} equal")
        width = max(len(c.item) for c in changes)
        for change in changes:
            lines.append(
                f"  {change.item:<{width}}  {change.a or '(absent)'}  ->  {change.b or '(absent)'}"
            )
        lines.append("")
    if same_only:
        lines.append("equal: " + ", ".join(same_only))
    return "\n".join(lines).rstrip() + "\n"
