"""Render an image plan as a Dockerfile: a pure function of small ordered steps.

Stages: `installer` (the base with a pip of its own), one stage per wheel layer (each installs
only its wheels into an empty venv, offline, every hash required), the CUDA toolchain stage, one
build stage per unbuilt source (from the run layer its build requirements hold whole, when there
is one: plan.py); the final stage copies the layers' venvs in plan order, so a layer shared by
two environments is one layer on disk, and carries no wheel file. A stage copies its layer's
folder and, file by file, the wheels staged in an earlier layer's folder (each wheel is in the
context once). Nothing in any step can download: installs are `--no-index --require-hashes` from
the build context, and the build runs with no network.
"""

from __future__ import annotations

import json
import shlex

from envaudit.image.plan import (
    HARNESS_MOUNT,
    INSTALLER,
    TOOLCHAIN,
    USER,
    VENV,
    ImagePlan,
    SourceStage,
    WheelLayer,
)

PIP_OFFLINE = (
    "--no-index --no-deps --require-hashes --no-cache-dir --disable-pip-version-check"
    " --no-warn-script-location"
)
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
ENV_FILES = "/opt/envaudit/env-files"


def render_dockerfile(plan: ImagePlan) -> str:
    steps = [_header(plan), _installer(plan)]
    steps += [_layer_stage(layer, plan) for layer in plan.layers]
    if plan.toolchain is not None:
        steps.append(_toolchain_stage(plan.toolchain))
    if plan.run_toolchain is not None:
        steps.append(_toolchain_stage(plan.run_toolchain))
    for source in plan.sources:
        steps.append(_build_stage(source, plan))
        steps.append(_built_stage(source))
    steps.append(_final(plan))
    return "\n\n".join(step.strip("\n") for step in steps) + "\n"


def _header(plan: ImagePlan) -> str:
    header = (
        f"# envaudit image of {plan.env}, closure {plan.closure_hash}\n"
        "# Generated from lock.json by `envaudit build`; every artifact is installed by hash\n"
        "# from the build context, and the build runs with no network."
    )
    if plan.substitute is not None:
        header += (
            f"\n# Over a {plan.substitute}, asked for with"
            f" `--substitute-base {plan.substitute_base}`: this closure is"
            f" substitutes/{plan.substitute_base}.json."
        )
    return header


def _installer(plan: ImagePlan) -> str:
    major, minor = plan.python.split(".")
    check = f"import sys; assert sys.version_info[:2] == ({major}, {minor}), sys.version"
    return (
        f"FROM {plan.base} AS installer\n"
        f"RUN python3 -c {shlex.quote(check)} \\\n"
        f" && python3 -m venv {INSTALLER}"
    )


def _copy_wheels(layer: WheelLayer, folder: str = "/tmp/wheels") -> str:
    """The layer's folder into `folder`, then the wheels it borrows from earlier layers' folders
    (one COPY of named files: the engine's cache key is their content)."""
    lines = f"COPY {layer.folder}/ {folder}/"
    if layer.borrowed:
        paths = [path for _, path in layer.borrowed]
        lines += "\nCOPY " + " \\\n    ".join([*paths, f"{folder}/"])
    return lines


def _venv_install(layer: WheelLayer) -> str:
    return (
        _copy_wheels(layer) + "\n"
        f"RUN python3 -m venv --without-pip {VENV} \\\n"
        f" && {INSTALLER}/bin/pip --python {VENV}/bin/python install {PIP_OFFLINE} \\\n"
        f"    --find-links /tmp/wheels -r /tmp/wheels/requirements.txt"
    )


REQUIRES = "/tmp/build-requires"
"""Where a build stage started from a run layer gets the rest of its build requirements (that
layer's own wheels are still under /tmp/wheels in its stage)."""


def _requires_install(source: SourceStage) -> list[str]:
    """The build requirements of a source's stage: into an empty venv, or, in a stage started
    from a run layer, the ones that layer lacks into its venv (none: nothing to do)."""
    if source.from_layer is None:
        return [_venv_install(source.build_requires)]
    if not source.build_requires.packages:
        return []
    return [
        _copy_wheels(source.build_requires, REQUIRES),
        f"RUN {INSTALLER}/bin/pip --python {VENV}/bin/python install {PIP_OFFLINE} \\\n"
        f"    --find-links {REQUIRES} -r {REQUIRES}/requirements.txt && rm -rf {REQUIRES}",
    ]


def _layer_stage(layer: WheelLayer, plan: ImagePlan) -> str:
    names = ", ".join(f"{n}=={v}" for n, v, _ in layer.packages[:6])
    more = f" and {len(layer.packages) - 6} more" if len(layer.packages) > 6 else ""
    return (
        f"# layer {layer.name}: {len(layer.packages)} wheels ({names}{more})\n"
        f"FROM installer AS layer-{layer.name}\n" + _venv_install(layer)
    )


def _toolchain_stage(layer: WheelLayer) -> str:
    names = ", ".join(f"{n}=={v}" for n, v, _ in layer.packages)
    return (
        f"# the CUDA toolchain ({names}), a prefix of its own, not on the run-time path\n"
        f"FROM installer AS {layer.name}\n"
        + _copy_wheels(layer)
        + f"\nRUN {toolchain_install(f'{INSTALLER}/bin/pip', '/tmp/wheels')}"
    )


def toolchain_install(pip: str, wheels: str) -> str:
    """The shell step that installs a toolchain layer's wheels (in `wheels`) into TOOLCHAIN;
    each versioned library (libcudart.so.13, libnvrtc.so.13) gets the unversioned name linkers
    look for, and lib/ the lib64 name nvcc links from (as `offline.expose_libraries` does for
    source builds)."""
    return (
        f"{pip} install {PIP_OFFLINE} --target {TOOLCHAIN} \\\n"
        f"    --find-links {wheels} -r {wheels}/requirements.txt \\\n"
        f" && home=$(ls -d {TOOLCHAIN}/nvidia/cu1*) \\\n"
        ' && for so in "$home"/lib/lib*.so.[0-9]*; do v=${so##*.so.};'
        " case $v in *[!0-9]*) continue;; esac;"
        ' [ -e "${so%.so.*}.so" ] || ln -s "${so##*/}" "${so%.so.*}.so"; done \\\n'
        ' && if [ ! -e "$home/lib64" ]; then ln -s lib "$home/lib64"; fi'
    )


def _build_env(source: SourceStage, plan: ImagePlan) -> list[tuple[str, str]]:
    variables: list[tuple[str, str]] = [("SOURCE_DATE_EPOCH", "315532800")]
    if plan.cuda_home is not None:
        variables.append(("CUDA_HOME", plan.cuda_home))
        # host compiles of CUTLASS include cuda/std/..., which torch adds only for nvcc
        variables.append(("CPLUS_INCLUDE_PATH", f"{plan.cuda_home}/include/cccl"))
    if source.cuda_arch_list:
        variables.append(("TORCH_CUDA_ARCH_LIST", ";".join(source.cuda_arch_list)))
    folder = f"{ENV_FILES}/{source.name}"
    variables += [(k, v.replace("{env_dir}", folder)) for k, v in source.build_env]
    return variables


def _build_stage(source: SourceStage, plan: ImagePlan) -> str:
    pins = [f"rev {source.rev}"] if source.rev else [f"sdist {source.sdist}"]
    pins += [f"{path} at {rev}" for path, rev in source.submodules]
    lines = [f"# source build of {source.name}: {', '.join(pins)}"]
    if source.from_layer is not None:
        lines += [
            f"# its build requirements hold the layer {source.from_layer} whole: the stage starts"
            f" from it and adds {len(source.build_requires.packages)} wheel(s)",
            f"FROM layer-{source.from_layer} AS build-{source.name}",
        ]
    else:
        lines.append(f"FROM installer AS build-{source.name}")
    lines += _requires_install(source)
    if plan.toolchain is not None:
        lines.append(f"COPY --from=cuda-toolchain {TOOLCHAIN}/ {TOOLCHAIN}/")
        lines.append(_cuda_home_link(plan))
    if source.files:
        lines.append(f"COPY {source.files_folder}/ {ENV_FILES}/{source.name}/")
    lines.append(f"ADD {source.archive} /src/{source.name}/")
    variables = _build_env(source, plan)
    lines.append("ENV " + " ".join(f"{k}={env_value(v)}" for k, v in variables))
    lines.append(
        f"RUN cd /src/{source.name} && {INSTALLER}/bin/pip --python {VENV}/bin/python wheel"
        " --no-deps --no-build-isolation --no-index --no-cache-dir --disable-pip-version-check"
        " -w /out . > /build.log 2>&1 || { tail -n 60 /build.log; exit 1; }"
    )
    return "\n".join(lines)


def _built_stage(source: SourceStage) -> str:
    return (
        f"FROM installer AS layer-built-{source.name}\n"
        f"COPY --from=build-{source.name} /out/ /tmp/wheels/\n"
        f"RUN python3 -m venv --without-pip {VENV} \\\n"
        f" && {INSTALLER}/bin/pip --python {VENV}/bin/python install"
        " --no-index --no-deps --no-cache-dir --disable-pip-version-check /tmp/wheels/*.whl"
    )


def _cuda_home_link(plan: ImagePlan) -> str:
    assert plan.cuda_home is not None
    return f"RUN {cuda_home_link(plan.cuda_home)}"


def cuda_home_link(cuda_home: str) -> str:
    """The lock's CUDA_HOME, a link to the toolchain prefix's nvidia/cu* folder."""
    home = shlex.quote(cuda_home)
    return f"mkdir -p $(dirname {home}) && ln -s $(ls -d {TOOLCHAIN}/nvidia/cu1*) {home}"


def _final(plan: ImagePlan) -> str:
    lines = [f"# the environment {plan.env}", f"FROM {plan.base}"]
    for layer in plan.layers:
        lines.append(f"COPY --from=layer-{layer.name} {VENV}/ {VENV}/")
    for source in plan.sources:
        lines.append(f"COPY --from=layer-built-{source.name} {VENV}/ {VENV}/")
    path = f"{VENV}/bin:{PATH}"
    variables = [("PATH", path), ("VIRTUAL_ENV", VENV)]
    run_toolchain = plan.run_toolchain or plan.toolchain
    if run_toolchain is not None and plan.toolchain_at_run_time:
        lines.append(f"COPY --from={run_toolchain.name} {TOOLCHAIN}/ {TOOLCHAIN}/")
        lines.append(_cuda_home_link(plan))
    if plan.cuda_home is not None and plan.toolchain_at_run_time:
        variables.append(("CUDA_HOME", plan.cuda_home))
    variables += [
        ("PYTHONPATH", HARNESS_MOUNT),
        ("PYTHONNOUSERSITE", "1"),
        ("PYTHONDONTWRITEBYTECODE", "1"),
        ("HOME", "/tmp/home"),
        *plan.env_vars,
    ]
    lines.append(env_instruction(variables))
    lines.append(f'RUN ["{VENV}/bin/python", "-c", "import sys; print(sys.version)"]')
    lines.append(f"USER {USER}")
    lines.append("WORKDIR /tmp")
    return "\n".join(lines)


def env_instruction(variables: list[tuple[str, str]]) -> str:
    """One ENV instruction, a variable per line."""
    return "ENV " + " \\\n    ".join(f"{k}={env_value(v)}" for k, v in variables)


def env_value(value: str) -> str:
    """A value for ENV: JSON quoting is what the Dockerfile parser accepts for any string."""
    return json.dumps(value)
