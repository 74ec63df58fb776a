"""`envaudit doctor`: what this machine offers, as an ordered list of checks, each with a
severity, a message and, where something is missing, the remedy."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from envaudit.errors import EnvauditError
from envaudit.image.base import load_recipe, why_not_buildable
from envaudit.image.build import image_matches, plan_build
from envaudit.image.engine import Engine, EngineError
from envaudit.lock.config import FetchConfig, uv_binary
from envaudit.runtime.devices import gpus
from envaudit.runtime.registry import pick_runtime


@dataclass(frozen=True)
class Check:
    name: str
    severity: str  # ok, info, warning, error
    message: str
    hint: str | None = None


def diagnose(locks_dir: Path) -> list[Check]:
    checks: list[Check] = []
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
    gpu_mode = "nvidia-runtime" if "nvidia" in runtimes else "device-nodes"
    driver = os.environ.get("ENVAUDIT_NVIDIA_DRIVER_DIR") or "/usr/local/nvidia"
    checks.append(
        Check(
            "gpu access",
            "info",
            f"containers get a GPU through {os.environ.get('ENVAUDIT_GPU_ACCESS') or gpu_mode}"
            + (f" (driver libraries from {driver})" if gpu_mode == "device-nodes" else ""),
        )
    )
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


def _store() -> Check:
    store = FetchConfig.from_environment().store
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
