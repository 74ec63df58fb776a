"""`envaudit doctor`: what this machine offers, as an ordered list of checks, each with a
severity, a message and, where something is missing, the remedy. It starts with the ENVAUDIT_*
variables set here: each known one with its value (a bad value is an error), an unknown one as a
warning (a typo: envaudit reads no such variable)."""

from __future__ import annotations

import difflib
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from envaudit.errors import EnvauditError
from envaudit.image.base import load_recipe, why_not_buildable
from envaudit.image.build import image_matches, plan_build
from envaudit.image.engine import Engine, EngineError
from envaudit.lock.config import FetchConfig, uv_binary
from envaudit.runtime.devices import gpus
from envaudit.runtime.gpu_access import DEVICE_NODES, choose_gpu_access
from envaudit.runtime.registry import pick_runtime
from envaudit.settings import (
    BY_NAME,
    DOCS_PATH,
    GPU_ACCESS,
    NVIDIA_DRIVER_DIR,
    Setting,
    read,
    set_variables,
)

T = TypeVar("T")


@dataclass(frozen=True)
class Check:
    name: str
    severity: str  # ok, info, warning, error
    message: str
    hint: str | None = None


def diagnose(locks_dir: Path) -> list[Check]:
    checks: list[Check] = _variables()
    engine = _engine(checks)
    checks.append(_gpus())
    checks.append(_uv())
    checks.append(_store())
    if engine is not None:
        checks += _images(engine, locks_dir)
        checks += _bases(locks_dir)
    runtime, why = pick_runtime()
    checks.append(Check("audit runtime", "info", f"{runtime} ({why})"))
    return checks


def _engine(checks: list[Check]) -> Engine | None:
    try:
        engine = Engine.connect()
    except EngineError as exc:
        checks.append(Check("engine", "warning", str(exc), exc.hint))
        return None
    info = engine.info()
    runtimes = sorted((info.get("Runtimes") or {}).keys())
    cdi = info.get("CDISpecDirs") or []
    checks.append(
        Check(
            "engine",
            "ok",
            f"docker {engine.version()} at {engine.address}; storage {info.get('Driver')},"
            f" cgroup v{info.get('CgroupVersion', '?')}; runtimes {', '.join(runtimes)};"
            f" CDI spec dirs {', '.join(cdi) or 'none'}",
        )
    )
    try:
        access = choose_gpu_access(info, _setting(GPU_ACCESS), engine.podman)
    except EnvauditError as exc:
        checks.append(Check("gpu access", "error", exc.message, exc.hint))
        return engine
    driver = _setting(NVIDIA_DRIVER_DIR) or NVIDIA_DRIVER_DIR.fallback
    libraries = f"; driver libraries from {driver}" if access.mode == DEVICE_NODES else ""
    checks.append(
        Check(
            "gpu access",
            "info",
            f"containers get a GPU through {access.mode}: {access.reason}{libraries}",
        )
    )
    for problem in access.problems:
        checks.append(Check("gpu access", "warning", f"unreadable CDI spec {problem}"))
    return engine


def _gpus() -> Check:
    found = gpus()
    if found is None:
        return Check("gpus", "info", "no NVIDIA driver here: CPU runs only (--device cpu)")
    listed = "; ".join(f"{g.uuid} {g.name} (driver {g.driver})" for g in found)
    return Check("gpus", "ok", listed or "the driver lists no GPU")


def _uv() -> Check:
    try:
        return Check("uv", "ok", uv_binary())
    except EnvauditError as exc:
        return Check("uv", "warning", str(exc), exc.hint)


def _variables() -> list[Check]:
    """The ENVAUDIT_* variables set here, by name (values that look like secrets masked)."""
    found = set_variables()
    if not found:
        return [Check("variables", "info", f"no ENVAUDIT_* variable set (all: {DOCS_PATH})")]
    checks = []
    for name, raw in found:
        shown = f"{name}={_masked(raw)}"
        setting = BY_NAME.get(name)
        if setting is None:
            close = difflib.get_close_matches(name, list(BY_NAME), n=1)
            hint = f"did you mean {close[0]}? " if close else ""
            checks.append(
                Check(
                    "variable",
                    "warning",
                    f"{shown}: unknown, envaudit reads no such variable",
                    f"{hint}every variable: {DOCS_PATH}",
                )
            )
            continue
        try:
            read(setting)
        except EnvauditError as exc:
            checks.append(Check("variable", "error", str(exc), exc.hint))
            continue
        checks.append(Check("variable", "info", f"{shown} ({setting.kind})"))
    return checks


def _masked(raw: str) -> str:
    """A URL's password (scheme://user:password@host) as ***."""
    return re.sub(r"(://[^/@\s:]*):[^/@\s]*@", r"\1:***@", raw)


def _setting(setting: Setting[T]) -> T | None:
    """The setting's value, or None when it is bad (_variables reports it)."""
    try:
        return read(setting)
    except EnvauditError:
        return None


def _store() -> Check:
    try:
        store = FetchConfig.from_environment().store
    except EnvauditError as exc:  # a bad ENVAUDIT_OFFLINE, which _variables reports
        return Check("store", "error", f"not checked: {exc}")
    entries = list((store / "sha256").glob("*")) if (store / "sha256").is_dir() else []
    size = sum(p.stat().st_size for p in entries)
    free = shutil.disk_usage(store if store.exists() else Path.home()).free
    return Check(
        "store",
        "ok",
        f"{store}: {len(entries)} artifacts, {size / 1e9:.1f} GB; {free / 1e9:.0f} GB free",
    )


def _images(engine: Engine, locks_dir: Path) -> list[Check]:
    checks = []
    for folder in sorted(p.parent for p in locks_dir.glob("*/env.toml")):
        try:
            plan = plan_build(folder.name, locks_dir).image
        except EnvauditError as exc:
            checks.append(Check(f"image {folder.name}", "warning", str(exc).splitlines()[0]))
            continue
        current = engine.image(plan.tag)
        older = [
            i
            for i in engine.images(f"envaudit/{plan.env}:")
            if current is None or i.id != current.id
        ]
        stale = f"; {len(older)} older image(s) of this env" if older else ""
        if current is None:
            message, severity = f"{plan.tag} not built{stale}", "info"
        elif not image_matches(current, plan):
            message, severity = f"{plan.tag} exists but does not match the lock", "error"
        else:
            message, severity = f"{plan.tag} built ({current.size / 1e9:.2f} GB){stale}", "ok"
        checks.append(Check(f"image {plan.env}", severity, message))
    return checks


def _bases(locks_dir: Path) -> list[Check]:
    checks = []
    for recipe_path in sorted(Path("containers/bases").glob("*.toml")):
        recipe = load_recipe(recipe_path.stem)
        reason = why_not_buildable(recipe)
        checks.append(
            Check(
                f"base {recipe.name}",
                "info",
                "can be built here" if reason is None else f"cannot be built here: {reason}",
            )
        )
    return checks
