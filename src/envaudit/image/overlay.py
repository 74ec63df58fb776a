"""An env's image over an imported machine stack (a base recipe of kind `import`).

Where the lock's own base cannot be made (a GPU machine with no registry and no distribution
archive), its image can be built over the machine's own stack, but only when that stack holds
the lock's packages: the stack's interpreter is listed inside the base image and compared with
the lock (verify-env's comparison, versions only: the stack's files are not the store's wheels).
The stack must hold the lock's Python and its torch stack (torch, triton and the CUDA libraries
torch pins) at the locked versions, or the base is refused (exit 1): reusing them is the point of
an overlay. A package the stack lacks is installed over it from the store, by hash, offline; any
other package the stack holds at another version is replaced the same way (pip uninstalls the
stack's copy in the image, never on the machine). The image records the base, its manifest and
the comparison, replacements by name, so every line run in it says what it ran on.

Sources are installed only as the wheels the lock holds: nothing is compiled over a stack (its
compilers and build requirements are the machine's, not the lock's). A source the lock holds no
wheel of (`built_in = "image"`, or not built yet) refuses the overlay (exit 2) before the base is
imported, rather than give an image that silently lacks it.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from typing import Any

from envaudit.errors import EXIT_FAILED, EXIT_USAGE, EnvauditError
from envaudit.image.dockerfile import (
    PIP_OFFLINE,
    cuda_home_link,
    env_instruction,
    toolchain_install,
)
from envaudit.image.plan import HARNESS_MOUNT, LABEL_PREFIX, USER, WheelLayer
from envaudit.lock.verify import Drift
from envaudit.schema.locks import TORCH_STACK, Lock

PATH_TAIL = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
DRIVER_LIBS = "/usr/local/nvidia/lib64"


@dataclass(frozen=True)
class OverlayPlan:
    env: str
    closure_hash: str
    base: str
    recipe: str
    interpreter: str
    added: WheelLayer | None
    verified: dict[str, Any]
    env_vars: tuple[tuple[str, str], ...]
    labels: dict[str, str] = field(default_factory=dict)
    path: tuple[str, ...] = ()
    """Folders of the stack put on PATH after the venv's (compilers, CUDA)."""
    toolchain: WheelLayer | None = None
    """The lock's own CUDA toolchain (role `cuda`), installed as in the lock's own image."""
    cuda_home: str | None = None

    @property
    def tag(self) -> str:
        return overlay_tag(self.env, self.closure_hash, self.recipe)


def overlay_tag(env: str, closure_hash: str, recipe: str) -> str:
    return f"envaudit/{env}:{closure_hash[:16]}-on-{recipe}"


def refuse_unbuilt_sources(lock: Lock, recipe: str) -> None:
    """Refuse (exit 2) an overlay of a lock with a source it holds no wheel of.

    An overlay installs what the stack lacks from the store, and a source without a wheel has
    nothing in the store: its image over the stack would lack the very package the env exists
    for (flash_mla in flashmla-13.3), and the first line run in it would fail at import, not at
    build. Compiling it over the stack instead would build with the machine's compilers and
    packages rather than the lock's, so the env's own image is the way."""
    unbuilt = [s for s in lock.sources if s.wheel is None]
    if not unbuilt:
        return
    what = "; ".join(
        f"{s.name} ("
        + (
            'built_in = "image": built only in the build stage of the env\'s own image'
            if s.built_in == "image"
            else "not built yet"
        )
        + ")"
        for s in unbuilt
    )
    rebuild = [s.name for s in unbuilt if s.built_in != "image"]
    hint = (
        f"run {lock.env} in its own image instead, without --over: `envaudit build --env"
        f" {lock.env}` (add `--substitute-base NAME` where its declared base cannot be made"
        " here, as its env.toml says)"
    )
    if rebuild:
        hint += "; or put the wheel in the lock: " + ", ".join(
            f"`envaudit lock {lock.env} --rebuild {name}`" for name in rebuild
        )
    raise EnvauditError(
        f"{lock.env}: no image over the imported stack {recipe}: such an image installs only"
        f" wheels the lock holds, and lock.json holds no wheel of {what}; the image would lack"
        f" {', '.join(s.name for s in unbuilt)}",
        EXIT_USAGE,
        hint=hint,
    )


def plan_overlay(
    lock: Lock,
    base: str,
    recipe: str,
    interpreter: str,
    manifest_sha256: str,
    drift: Drift,
    stack_env: tuple[tuple[str, str], ...] = (),
    stack_path: tuple[str, ...] = (),
) -> OverlayPlan:
    """The overlay of `lock` on a base whose interpreter compared as `drift`; refused when the
    base holds another Python or another version of the lock's torch stack, and (exit 2) when
    the lock lacks the wheel of one of its sources (`refuse_unbuilt_sources`)."""
    refuse_unbuilt_sources(lock, recipe)
    contradicting = [d for d in drift.different if TORCH_STACK.match(d.name)]
    if drift.python is not None or contradicting:
        found = [f"Python {drift.python[1]} (locked {drift.python[0]})"] if drift.python else []
        found += [f"{d.name} {d.installed} (locked {d.locked})" for d in contradicting]
        raise EnvauditError(
            f"the base {recipe} cannot carry {lock.env}: it holds {'; '.join(found[:8])}",
            EXIT_FAILED,
            hint=f"build {lock.env} on its own base, or choose a lock that matches this stack",
        )
    every_tool = {p.name for p in lock.toolchain_packages()}
    missing = {d.name for d in drift.missing} - every_tool
    # the sources were built (their wheels are in the lock): only what runs is installed
    tools = tuple((p.name, p.version, p.artifact) for p in lock.run_toolchain_packages())
    replaced = {d.name: d for d in drift.different}
    wanted = missing | set(replaced)
    added = tuple(
        (p.name, p.version, p.artifact) for p in lock.runtime_packages() if p.name in wanted
    )
    built = [s for s in lock.sources if s.name in wanted]
    added += tuple((s.name, s.version or "", s.wheel) for s in built if s.wheel is not None)
    verified = {
        "locked": drift.locked,
        "present": len(drift.matching),
        "added": len(added) - len(replaced),
        "replaced": [f"{d.name} {d.installed} -> {d.locked}" for d in replaced.values()],
        "toolchain": len(tools),
        "extra_in_base": len(drift.extra),
        "file_hashes": "not checked (the stack's files are not the store's wheels)",
    }
    labels = {
        f"{LABEL_PREFIX}.env": lock.env,
        f"{LABEL_PREFIX}.closure-hash": lock.closure_hash,
        f"{LABEL_PREFIX}.spec-sha256": lock.spec_sha256,
        f"{LABEL_PREFIX}.base": base,
        f"{LABEL_PREFIX}.overlay-on": recipe,
        f"{LABEL_PREFIX}.base-manifest-sha256": manifest_sha256,
        f"{LABEL_PREFIX}.overlay-verified": json.dumps(verified, sort_keys=True),
    }
    return OverlayPlan(
        env=lock.env,
        closure_hash=lock.closure_hash,
        base=base,
        recipe=recipe,
        interpreter=interpreter,
        added=WheelLayer("added", added) if added else None,
        verified=verified,
        env_vars=(*stack_env, *sorted(lock.env_vars.items())),
        labels=labels,
        path=stack_path,
        toolchain=WheelLayer("toolchain", tools, target="toolchain") if tools else None,
        cuda_home=lock.cuda.home if lock.cuda is not None and tools else None,
    )


BYTECODE_SCRIPT = (
    "import compileall, sysconfig\n"
    "paths = sysconfig.get_paths()\n"
    "for folder in sorted({paths['stdlib'], paths['purelib'], paths['platlib']}):\n"
    "    compileall.compile_dir(folder, quiet=2, workers=0)\n"
)
"""Compiles the stack interpreter's standard library and site-packages. A file that does not
compile (a template, a test fixture in old syntax) is left as it is: its module, if anything
imports it, is compiled from source as before, so the build does not stop for it."""


def compile_bytecode(interpreter: str) -> str:
    """The RUN instruction that gives an imported stack its bytecode.

    A machine's stack is often installed without it (the GPU machine's torch venv has no
    `__pycache__`, and its Python runs with PYTHONDONTWRITEBYTECODE), and the images run with
    `/` read-only, so without this every container would compile torch's sources again at
    each start: `import torch` took 3.1-3.3 s from sources there against 1.4-1.5 s from
    bytecode (docs/lab/audit-throughput.md). It comes first after FROM, the same instruction for
    every env over one base, so the engine's layer cache builds it once per base; what pip installs
    above it is compiled by pip."""
    return "RUN " + json.dumps([interpreter, "-c", BYTECODE_SCRIPT])


def render_overlay_dockerfile(plan: OverlayPlan) -> str:
    venv_bin = plan.interpreter.rsplit("/", 1)[0]
    venv = venv_bin.rsplit("/", 1)[0]
    lines = [
        f"# envaudit image of {plan.env}, closure {plan.closure_hash}, over the imported stack"
        f" {plan.recipe}",
        f"# the stack holds {plan.verified['present']} of the lock's {plan.verified['locked']}"
        f" packages at the locked versions; {plan.verified['added']} are added below",
        *(f"# replaced: {r}" for r in plan.verified.get("replaced", [])),
        f"FROM {plan.base}",
        compile_bytecode(plan.interpreter),
    ]
    if plan.added is not None:
        lines += [
            f"COPY {plan.added.folder}/ /tmp/wheels/",
            f"RUN {shlex.quote(plan.interpreter)} -m pip install {PIP_OFFLINE}"
            " --find-links /tmp/wheels -r /tmp/wheels/requirements.txt && rm -rf /tmp/wheels",
        ]
    toolchain_bin: list[str] = []
    if plan.toolchain is not None and plan.cuda_home is not None:
        folder = f"/tmp/{plan.toolchain.folder}"
        lines += [
            f"COPY {plan.toolchain.folder}/ {folder}/",
            f"RUN {toolchain_install(f'{shlex.quote(plan.interpreter)} -m pip', folder)}"
            f" \\\n && rm -rf {folder} && {cuda_home_link(plan.cuda_home)}",
        ]
        toolchain_bin = [f"{plan.cuda_home}/bin"]
    variables = [
        ("PATH", ":".join([venv_bin, *toolchain_bin, *plan.path, PATH_TAIL])),
        ("VIRTUAL_ENV", venv),
        ("LD_LIBRARY_PATH", DRIVER_LIBS),
        ("PYTHONPATH", HARNESS_MOUNT),
        ("PYTHONNOUSERSITE", "1"),
        ("PYTHONDONTWRITEBYTECODE", "1"),
        ("HOME", "/tmp/home"),
        *plan.env_vars,
    ]
    if plan.cuda_home is not None:  # the lock's toolchain, not the stack's
        variables = [(k, v) for k, v in variables if k != "CUDA_HOME"]
        variables.append(("CUDA_HOME", plan.cuda_home))
    lines.append(env_instruction(variables))
    lines.append(f'RUN ["{plan.interpreter}", "-c", "import sys; print(sys.version)"]')
    # An imported stack has only the folders its recipe names: give it a scratch folder.
    lines.append("RUN mkdir -p /tmp /var/tmp && chmod 1777 /tmp /var/tmp")
    lines += [f"USER {USER}", "WORKDIR /tmp"]
    return "\n".join(lines) + "\n"
