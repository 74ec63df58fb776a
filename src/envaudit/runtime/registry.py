"""The runtimes by name: the one list `run`, `audit`, `reproduce` and `doctor` choose from.

Only names to classes: each runtime's module is imported when it is asked for (the container
runtimes bring the Docker SDK and the image layer, 0.1-0.3 s of every command's start, which a
run on the host or local runtime never uses), and no runtime imports this module.
"""

from __future__ import annotations

import importlib

from envaudit.runtime.base import Runtime
from envaudit.runtime.jobs import RunRequestError
from envaudit.schema.names import name_problem, shown

RUNTIME_CLASSES = {
    "docker": "envaudit.runtime.runtimes.docker:ContainerRuntime",
    "podman": "envaudit.runtime.runtimes.docker:ContainerRuntime",
    "local": "envaudit.runtime.runtimes.local:LocalRuntime",
    "host": "envaudit.runtime.runtimes.host:HostRuntime",
}
"""Runtime name -> its class, as module:attribute."""

RUNTIME_NAMES = tuple(RUNTIME_CLASSES)
"""Every runtime, in the order `audit` prefers them."""


def make_runtime(name: str) -> Runtime:
    """The runtime of this name (one of RUNTIME_NAMES), importing only its own module."""
    module, _, attribute = RUNTIME_CLASSES[name].partition(":")
    runtime: Runtime = getattr(importlib.import_module(module), attribute)(name)
    return runtime


def runtimes() -> dict[str, Runtime]:
    """Every runtime, in the order `audit` prefers them."""
    return {name: make_runtime(name) for name in RUNTIME_NAMES}


def get_runtime(
    name: str, env: str | None = None, over: str | None = None, substitute: str | None = None
) -> Runtime:
    """The runtime `name`, refusing (exit 2) an --env, --over or --substitute-base it would
    silently ignore."""
    if name not in RUNTIME_NAMES:
        raise RunRequestError(
            f"no runtime {shown(name)}", hint=f"choose one of: {', '.join(RUNTIME_NAMES)}"
        )
    runtime = make_runtime(name)
    if env is not None and name_problem(env) is not None:
        raise RunRequestError(
            f"--env {shown(env)} is not an environment name: {name_problem(env)}",
            hint="name a folder of locks/ (`envaudit lock --all --check` lists them)",
        )
    if env is not None and not runtime.takes_env:
        raise RunRequestError(
            f"--env does not apply to the {name} runtime (it runs this interpreter as it is)",
            hint="use --runtime local or docker to run a solution in another lock",
        )
    if over is not None and not runtime.takes_over:
        raise RunRequestError(
            f"--over {shown(over)} does not apply to the {name} runtime (it has no image to"
            " lay over an imported stack)",
            hint="use --runtime docker (or podman) with --over, or leave --over out",
        )
    if substitute is not None and not runtime.takes_over:
        raise RunRequestError(
            f"--substitute-base {shown(substitute)} does not apply to the {name} runtime (it"
            " builds no image over a base)",
            hint="use --runtime docker (or podman) with --substitute-base, or leave it out",
        )
    if substitute is not None and over is not None:
        raise RunRequestError(
            f"--substitute-base {shown(substitute)} and --over {shown(over)} name two bases",
            hint="choose one",
        )
    return runtime


def pick_runtime() -> tuple[str, str]:
    """(runtime, why) for an audit given no --runtime: a container engine when one answers,
    else local environments when uv can make them, else this interpreter."""
    reasons: list[str] = []
    for name in ("docker", "local"):
        why_not = make_runtime(name).unavailable()
        if why_not is None:
            chosen = "an engine answers" if name == "docker" else "uv is available"
            return name, "; ".join([*reasons, f"{name}: {chosen}"])
        reasons.append(f"{name}: {why_not}")
    return "host", "; ".join([*reasons, "host: this interpreter"])
