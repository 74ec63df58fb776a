"""What an environment's image is made of, resolved from its lock before anything is rendered.

The image holds one virtual environment (`VENV`) assembled from layers of wheels, each installed
in a stage of its own and copied into the final stage in a fixed order, so that environments
sharing a layer's exact wheels share that layer on disk (Docker reuses a step whose parent and
inputs are the same). The order puts what is most often shared first:

1. `torch-stack`: torch, triton and the NVIDIA CUDA libraries torch pins (by name, below);
2. `packages`: every other runtime package of the lock;
3. `built`: wheels of source builds (staged by hash when the lock has them, else built in a
   stage of their own with the locked toolchain);

and, beside the venv, the CUDA toolchain (`cuda` role: nvcc and its components) in a prefix of
its own whose `nvidia/cu*` folder is the lock's `cuda.home`. Pure functions only: what the
store holds or which images exist is looked up elsewhere.

Two rules keep a build within the disk it needs. A source's build stage starts from the run
layer its build requirements hold whole (FlashMLA's hold the torch stack's exact wheels), and
installs only the rest: the torch stack is installed once, not again for the build. And each
wheel is in the build context once: a layer's folder holds the wheels no earlier layer holds,
and a stage copies the others file by file out of the folder that has them (the toolchain's
cuBLAS out of the torch stack's), so the context the engine is sent and unpacks is not
doubled by the torch stack's wheels.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

from envaudit.schema.locks import TORCH_STACK, Artifact, Lock, LockedSource

VENV = "/opt/envaudit/venv"
INSTALLER = "/opt/envaudit/installer"
TOOLCHAIN = "/opt/envaudit/toolchain"
HARNESS_MOUNT = "/opt/envaudit/harness"
USER = "10001:10001"
LABEL_PREFIX = "dev.envaudit"


Pinned = tuple[str, str, Artifact]


@dataclass(frozen=True)
class WheelLayer:
    """Wheels installed together in one stage; `folder` is their place in the build context."""

    name: str
    packages: tuple[Pinned, ...]
    target: Literal["venv", "toolchain"] = "venv"
    borrowed: tuple[tuple[str, str], ...] = ()
    """(sha256, context path) of the wheels of this layer staged in an earlier layer's folder
    (`share_wheels`): copied from there, so each wheel is in the build context once."""

    @property
    def folder(self) -> str:
        return f"wheels/{self.name}"

    def own(self) -> tuple[Pinned, ...]:
        """The packages whose wheels this layer's folder holds."""
        elsewhere = {sha for sha, _ in self.borrowed}
        return tuple(p for p in self.packages if p[2].sha256 not in elsewhere)

    def requirements(self) -> str:
        return "".join(f"{n}=={v} --hash=sha256:{a.sha256}\n" for n, v, a in self.packages)


@dataclass(frozen=True)
class SourceStage:
    """A source without a built wheel in the lock, built inside the image build."""

    name: str
    kind: Literal["git", "sdist"]
    rev: str | None
    submodules: tuple[tuple[str, str], ...]
    build_env: tuple[tuple[str, str], ...]
    cuda_arch_list: tuple[str, ...]
    build_requires: WheelLayer
    sdist: Artifact | None = None
    files: tuple[str, ...] = ()
    """Files of the env folder the build reads (build_env names their folder as {env_dir})."""
    absent_files: tuple[str, ...] = ()
    """Files of the pinned commits the lock records as lacking from the repository: the tree
    the image builds from must lack exactly these."""
    built_in_image: bool = False
    """Declared `built_in = "image"`: no lock ever holds its wheel; only the image builds it."""
    from_layer: str | None = None
    """The run layer the build stage starts from (its venv holds exactly that layer's wheels, all
    of them build requirements); `build_requires` then holds only the others."""

    def wheel_instead(self, env: str) -> str:
        """The other way to a wheel, for a hint: none for a source built in images only."""
        if self.built_in_image:
            return ""
        return f"; or `envaudit lock {env} --rebuild {self.name}` builds the wheel instead"

    @property
    def archive(self) -> str:
        """The source tree in the build context (a tar the build unpacks)."""
        return f"sources/{self.name}.tar"

    @property
    def files_folder(self) -> str:
        return f"env-files/{self.name}"


@dataclass(frozen=True)
class ImagePlan:
    env: str
    closure_hash: str
    spec_sha256: str
    python: str
    base: str
    """FROM: a local tag, the offline base's or, for a base pinned by digest, the tag the build
    points at the image it verified (`pinned_base_tag`)."""
    base_recipe: str | None
    layers: tuple[WheelLayer, ...]
    toolchain: WheelLayer | None
    sources: tuple[SourceStage, ...]
    cuda_home: str | None
    env_vars: tuple[tuple[str, str], ...]
    labels: dict[str, str] = field(default_factory=dict)
    toolchain_at_run_time: bool = True
    """False for a build-only toolchain (cuda.build_only): it builds the source stages, and the
    final image has neither it nor CUDA_HOME."""
    run_toolchain: WheelLayer | None = None
    """The final image's toolchain where it is a part of `toolchain` (cuda.build_only_components
    left out) and source stages need the whole: a stage of its own."""
    base_pinned: str | None = None
    """`name@sha256:...` of a base pinned by registry digest (None for a recipe)."""
    base_registry: str | None = None
    """The tag that digest was resolved from (a base.registry lock)."""
    substitute: str | None = None
    """The lock is a declared substitute base's closure: what it stands in for, in words
    (LockedSubstitute.text); None for the declared base's."""
    substitute_base: str | None = None
    """That substitute's name (`--substitute-base NAME`)."""

    @property
    def tag(self) -> str:
        """`envaudit/<env>:<closure16>`, with `-over-<substitute>` for a substitute base's
        closure, so that the tag alone says the image is not over the declared base."""
        tag = image_tag(self.env, self.closure_hash)
        return tag if self.substitute_base is None else f"{tag}-over-{self.substitute_base}"

    def staged_artifacts(self) -> list[tuple[str, Artifact]]:
        """(context folder, artifact) of every file copied out of the store, each once."""
        found = [(layer.folder, a) for layer in self.all_layers() for _, _, a in layer.own()]
        found += [("sources", s.sdist) for s in self.sources if s.sdist is not None]
        return found

    def all_layers(self) -> list[WheelLayer]:
        layers = list(self.layers)
        layers += [t for t in (self.toolchain, self.run_toolchain) if t is not None]
        layers += [s.build_requires for s in self.sources]
        return layers


def image_tag(env: str, closure_hash: str) -> str:
    return f"envaudit/{env}:{closure_hash[:16]}"


def base_tag(recipe: str, recipe_sha256: str) -> str:
    return f"envaudit-base/{recipe}:{recipe_sha256[:16]}"


def pinned_base_tag(reference: str) -> str:
    """The local tag of a base pinned by digest (`name@sha256:...`), which builds name in FROM:
    an image loaded from an archive has no digest reference in the engine (`docker load` keeps
    none), so FROM cannot name the digest itself. A build points the tag at the image it
    verified (pulled by that digest, or loaded and matched by id) before it builds."""
    return f"envaudit-base/pinned:{reference.rpartition('@sha256:')[2][:16]}"


def plan_image(lock: Lock) -> ImagePlan:
    """The image of this lock: its layers, toolchain, source stages, variables and labels."""
    runtime = [(p.name, p.version, p.artifact) for p in lock.packages if p.role == "runtime"]
    stack = tuple(p for p in runtime if TORCH_STACK.match(p[0]))
    rest = tuple(p for p in runtime if not TORCH_STACK.match(p[0]))
    built = tuple((s.name, s.version or "", s.wheel) for s in lock.sources if s.wheel is not None)
    layers = [
        WheelLayer(name, packages)
        for name, packages in (("torch-stack", stack), ("packages", rest), ("built", built))
        if packages
    ]
    cuda = tuple((p.name, p.version, p.artifact) for p in lock.toolchain_packages())
    at_run = tuple((p.name, p.version, p.artifact) for p in lock.run_toolchain_packages())
    sources = tuple(_source_stage(s, layers) for s in lock.sources if s.wheel is None)
    at_run_time = bool(at_run)
    # source stages build with the whole toolchain; the final image keeps the run-time part
    built_with = cuda if sources else at_run
    toolchain = WheelLayer("cuda-toolchain", built_with, target="toolchain") if built_with else None
    run_toolchain = None
    if sources and at_run and at_run != cuda:
        run_toolchain = WheelLayer("cuda-run-toolchain", at_run, target="toolchain")
    plan = ImagePlan(
        env=lock.env,
        closure_hash=lock.closure_hash,
        spec_sha256=lock.spec_sha256,
        python=lock.python,
        base=_from(lock),
        base_recipe=lock.base.recipe,
        layers=tuple(layers),
        toolchain=toolchain,
        sources=sources,
        cuda_home=lock.cuda.home if lock.cuda is not None and toolchain is not None else None,
        env_vars=tuple(sorted(lock.env_vars.items())),
        toolchain_at_run_time=at_run_time,
        run_toolchain=run_toolchain,
        base_pinned=lock.base.image,
        base_registry=lock.base.registry,
        labels=_labels(lock),
        substitute=lock.substitute.text(lock.python) if lock.substitute is not None else None,
        substitute_base=lock.substitute.name if lock.substitute is not None else None,
    )
    return share_wheels(plan)


def share_wheels(plan: ImagePlan) -> ImagePlan:
    """The plan with every wheel staged once: in the folder of the first layer (in
    `all_layers` order) that installs it; later layers borrow it from there. The run layers
    come first, so their folders, and the engine's cache of their stages, are the same
    whatever toolchain or build stage an env adds."""
    first: dict[str, str] = {}

    def borrow(layer: WheelLayer) -> WheelLayer:
        borrowed = []
        for _, _, artifact in layer.packages:
            if artifact.sha256 in first:
                borrowed.append((artifact.sha256, f"{first[artifact.sha256]}/{artifact.filename}"))
            else:
                first[artifact.sha256] = layer.folder
        return replace(layer, borrowed=tuple(borrowed))

    layers = tuple(borrow(layer) for layer in plan.layers)
    toolchain = borrow(plan.toolchain) if plan.toolchain is not None else None
    run_toolchain = borrow(plan.run_toolchain) if plan.run_toolchain is not None else None
    sources = tuple(replace(s, build_requires=borrow(s.build_requires)) for s in plan.sources)
    return replace(
        plan, layers=layers, toolchain=toolchain, run_toolchain=run_toolchain, sources=sources
    )


def _labels(lock: Lock) -> dict[str, str]:
    labels = {
        f"{LABEL_PREFIX}.env": lock.env,
        f"{LABEL_PREFIX}.closure-hash": lock.closure_hash,
        f"{LABEL_PREFIX}.spec-sha256": lock.spec_sha256,
        f"{LABEL_PREFIX}.base": lock.base.image or _from(lock),
        "org.opencontainers.image.title": f"envaudit environment {lock.env}",
    }
    if lock.base.registry is not None:
        labels[f"{LABEL_PREFIX}.base-registry-tag"] = lock.base.registry
    if lock.substitute is not None:
        labels.update(substitute_labels(lock))
    return labels


SUBSTITUTE_LABEL = f"{LABEL_PREFIX}.substitute-base"


def substitute_labels(lock: Lock) -> dict[str, str]:
    """What an image built over a declared substitute base says of it: the substitute, the
    declared base and Python it stands in for, and its own Python."""
    assert lock.substitute is not None
    return {
        SUBSTITUTE_LABEL: lock.substitute.name,
        f"{LABEL_PREFIX}.declared-base": lock.substitute.declared_base,
        f"{LABEL_PREFIX}.declared-python": lock.substitute.declared_python,
        f"{LABEL_PREFIX}.python": lock.python,
    }


def _from(lock: Lock) -> str:
    if lock.base.image is not None:
        return pinned_base_tag(lock.base.image)
    assert lock.base.recipe is not None and lock.base.recipe_sha256 is not None
    return base_tag(lock.base.recipe, lock.base.recipe_sha256)


def _source_stage(source: LockedSource, layers: list[WheelLayer]) -> SourceStage:
    """The build stage of a source, starting from the largest run layer whose wheels are all
    among its build requirements (the torch stack, for a torch extension) when there is one."""
    requires = tuple((p.name, p.version, p.artifact) for p in source.build_requires)
    wanted = {a.sha256 for _, _, a in requires}
    held = [layer for layer in layers if {a.sha256 for _, _, a in layer.packages} <= wanted]
    start = max(held, key=lambda layer: sum(a.size for _, _, a in layer.packages), default=None)
    if start is not None:
        there = {a.sha256 for _, _, a in start.packages}
        requires = tuple(p for p in requires if p[2].sha256 not in there)
    return SourceStage(
        name=source.name,
        kind=source.kind,
        rev=source.rev,
        submodules=tuple(sorted(source.submodules.items())),
        build_env=tuple(sorted(source.build_env.items())),
        cuda_arch_list=tuple(source.cuda_arch_list),
        build_requires=WheelLayer(f"build-{source.name}", requires),
        sdist=source.sdist,
        files=tuple(sorted(source.files)),
        absent_files=tuple(sorted(source.absent_files or ())),
        built_in_image=source.built_in == "image",
        from_layer=start.name if start is not None else None,
    )
