"""An environment's two files: `locks/<env>/env.toml` (hand-written), `lock.json` (generated).

env.toml declares; lock.json is the closure: every artifact by file name, size and sha256, the
base, the source builds and their inputs, and `closure_hash`, the sha256 of the canonical JSON
of all of it. Neither file names a download URL or a registry host: artifacts are found by hash
through whatever indexes, mirrors or find-links the user configures (docs/locks.md).
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

LOCK_VERSION = 1
SHA256 = re.compile(r"^[0-9a-f]{64}$")
FULL_COMMIT = re.compile(r"^[0-9a-f]{40}$")
COMMIT = re.compile(r"^[0-9a-f]{7,40}$")
PINNED = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9_,.-]+\])?==[A-Za-z0-9.+!_-]+$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
REPOSITORY = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")  # owner/name, found via git bases

Role = Literal["runtime", "cuda", "build"]
"""Where a locked package goes. `runtime`: into the run environment (the venv the harness runs
in). `cuda`: the CUDA toolchain, a build-only closure resolved on its own: installed into a prefix
of its own whose `nvidia/cu<major>` folder is `cuda.home`, never into the run environment and
never on the run-time library path (the process keeps loading the runtime packages' libraries).
`build`: a build input of one source only (its `build_requires`)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


def normalize_name(name: str) -> str:
    """PEP 503 normalised distribution name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def split_pin(requirement: str) -> tuple[str, str]:
    """'Foo_Bar[x]==1.0' -> ('foo-bar', '1.0')."""
    name, _, version = requirement.partition("==")
    return normalize_name(name.split("[")[0].strip()), version.strip()


# --- env.toml -------------------------------------------------------------------------------


DOMAIN = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*"
COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
IMAGE_NAME = rf"(?:{DOMAIN}(?::[0-9]+)?/)?{COMPONENT}(?:/{COMPONENT})*"
TAGGED = re.compile(rf"^({IMAGE_NAME}):([A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}})$")
DIGESTED = re.compile(rf"^({IMAGE_NAME})@(sha256:[0-9a-f]{{64}})$")


def tagged_reference(reference: str, where: str) -> tuple[str, str]:
    """(name, tag) of a `name:tag` image reference; a ValueError naming `where` otherwise (a
    digest belongs in base.image; a missing tag is not taken to mean :latest)."""
    match = TAGGED.match(reference)
    if match is not None:
        return match.group(1), match.group(2)
    if "@" in reference:
        raise ValueError(
            f"{where} {reference!r} names a digest: write it as base.image (already pinned),"
            " or name a tag here"
        )
    raise ValueError(
        f"{where} {reference!r} is not an image reference with a tag (name:tag, e.g."
        " ubuntu:24.04; an implicit :latest is refused)"
    )


def digested_reference(reference: str) -> tuple[str, str] | None:
    """(name, "sha256:...") of a `name@sha256:...` reference, or None."""
    match = DIGESTED.match(reference)
    return (match.group(1), match.group(2)) if match is not None else None


class BaseSpec(_Strict):
    """The base image: pinned by digest (`image = "name@sha256:..."`), a registry tag that
    `envaudit lock` resolves to its digest (`registry = "name:tag"`, as uv records a wheel's
    hash), or an offline recipe under containers/bases."""

    image: str | None = None
    recipe: str | None = None
    registry: str | None = Field(
        None,
        description="A registry tag (name:tag, e.g. ubuntu:24.04); lock.json records the digest"
        " it pointed to when locked, and builds pull that digest only.",
    )

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _without_absent(handler(self), "registry")

    @model_validator(mode="after")
    def _one_of(self) -> BaseSpec:
        if sum(x is not None for x in (self.image, self.recipe, self.registry)) != 1:
            raise ValueError(
                "set exactly one of base.image (pinned by digest), base.registry (a tag that"
                " `envaudit lock` resolves to its digest) or base.recipe"
            )
        if self.image is not None and not re.search(r"@sha256:[0-9a-f]{64}$", self.image):
            raise ValueError(
                f"base.image {self.image!r} is not pinned by digest (@sha256:<64 hex>); to name"
                ' a tag, write base.registry = "name:tag" and let `envaudit lock` pin it'
            )
        if self.registry is not None:
            tagged_reference(self.registry, "base.registry")
        return self


class CudaSpec(_Strict):
    """A CUDA toolchain made of pinned PyPI component wheels, visible at one canonical path.

    The toolchain is a build-only closure: its components are resolved apart from the
    requirements (the env's constraints apply to it, except those naming a component), so it
    may hold another version of a package the run environment also holds, e.g. the runtime
    headers of nvcc's own release (nvidia-cuda-runtime 13.3.29 for nvcc 13.3.73) while the
    process keeps loading torch's cudart 13.0.96."""

    version: str = Field(pattern=r"^\d+\.\d+$")
    home: str = Field(description="Canonical CUDA_HOME inside images and local environments.")
    components: list[str] = Field(min_length=1)
    build_only: bool | None = Field(
        None,
        description="true: the toolchain only builds the env's sources; images leave it out of"
        " the run environment (a JIT compiler such as TileLang's needs it there: leave unset).",
    )
    build_only_components: list[str] | None = Field(
        None,
        description="Components (by name) that only the env's source builds need: the run"
        " environment's toolchain leaves them out, e.g. the cuBLAS/cuSPARSE/cuSOLVER headers"
        " ATen's CUDA headers include, which a JIT compiling its own kernels never reads.",
    )

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _without_absent(handler(self), "build_only", "build_only_components")

    @model_validator(mode="after")
    def _build_only_names(self) -> CudaSpec:
        if not self.build_only_components:
            return self
        if self.build_only:
            raise ValueError(
                "cuda.build_only_components with cuda.build_only = true: the whole toolchain is"
                " build-only already; drop one of them"
            )
        names = [split_pin(p)[0] for p in self.components]
        asked = [normalize_name(n) for n in self.build_only_components]
        unknown = [n for n in self.build_only_components if normalize_name(n) not in names]
        if unknown:
            raise ValueError(
                f"cuda.build_only_components names {', '.join(unknown)}, not among"
                f" cuda.components ({', '.join(names)})"
            )
        if set(asked) == set(names):
            raise ValueError(
                "cuda.build_only_components names every component: write cuda.build_only = true"
            )
        return self

    @field_validator("components")
    @classmethod
    def _pinned(cls, value: list[str]) -> list[str]:
        pinned = _all_pinned(value, "cuda.components")
        names = [split_pin(p)[0] for p in pinned]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"cuda.components name {', '.join(repeated)} more than once")
        return pinned

    @field_validator("home")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError(f"cuda.home {value!r} must be an absolute path")
        return value


class HistoricalPin(_Strict):
    """A source's original pins, kept for the record when they cannot be reached here (e.g. a
    commit prefix named by an audit that no readable snapshot holds). Never fetched or built:
    the source's `rev` and `submodules` are the stand-in that is built, and every figure
    measured in the environment is for that stand-in."""

    rev: str = Field(description="The original commit, or the prefix that was all it named.")
    submodules: dict[str, str] = Field(
        default_factory=dict, description="path -> the original submodule commit"
    )
    note: str = Field(
        min_length=1, description="Where these pins come from and why they are not built."
    )

    @model_validator(mode="after")
    def _commits(self) -> HistoricalPin:
        for where, rev in [("rev", self.rev), *self.submodules.items()]:
            if not COMMIT.match(rev):
                raise ValueError(f"historical {where}: {rev!r} is not a git commit (7-40 hex)")
        return self


def _without_absent(data: dict[str, Any], *keys: str) -> dict[str, Any]:
    """Fields added after locks were committed are left out while unset, so the spec and
    closure hashes of every lock that does not use them stay what they were."""
    for key in keys:
        if key in data and data[key] in (None, []):
            del data[key]
    return data


class SourceSpec(_Strict):
    """A package built from source: a git repository at a full commit, or a registry sdist."""

    name: str
    git: str | None = Field(
        None,
        description="Repository as owner/name (cloned from the configured git bases,"
        " ENVAUDIT_GIT_BASES), or a local path; never a URL.",
    )
    rev: str | None = Field(None, description="Full 40-hex commit.")
    rev_unresolved: bool = Field(
        False, description="rev is a prefix that could not be resolved here; builds refuse it."
    )
    submodules: dict[str, str] = Field(default_factory=dict, description="path -> full commit")
    sdist: str | None = Field(None, description="name==version of a registry sdist.")
    build_requires: list[str] = Field(default_factory=list)
    build_env: dict[str, str] = Field(default_factory=dict)
    jobs_env: list[str] = Field(
        default_factory=list,
        description="Variables that set the build's parallelism (NATTEN_N_WORKERS, MAX_JOBS):"
        " set at build time to ENVAUDIT_BUILD_JOBS or the CPU count, not pinned, since they"
        " change how long a build takes, not what it produces.",
    )
    cuda_arch_list: list[str] = Field(default_factory=list)
    files: list[str] = Field(
        default_factory=list,
        description="Files of the env folder the build reads (hashed into the lock); build_env"
        " values may name that folder as {env_dir}.",
    )
    historical: HistoricalPin | None = Field(
        None,
        description="The original pins this git source stands in for, unreachable here"
        " (recorded, never built).",
    )
    built_in: Literal["image"] | None = Field(
        None,
        description='"image": built only in the build stage of the env\'s image, from the lock'
        " alone (`envaudit lock` surveys its tree and records no wheel, whatever base the image"
        " is built over); unset: `envaudit lock` builds its wheel here and hashes it in.",
    )
    note: str | None = None

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _without_absent(handler(self), "historical", "jobs_env", "built_in")

    @model_validator(mode="after")
    def _kind(self) -> SourceSpec:
        for name in self.files:
            if name.startswith("/") or ".." in Path(name).parts or not name:
                raise ValueError(
                    f"source {self.name!r}: file {name!r} must be inside the env folder"
                )
        if (self.git is None) == (self.sdist is None):
            raise ValueError(f"source {self.name!r}: set exactly one of git (with rev) or sdist")
        if self.git is not None:
            local = self.git.startswith(("/", "./", "../"))
            if not local and not REPOSITORY.match(self.git):
                raise ValueError(
                    f"source {self.name!r}: git {self.git!r} is not a repository name: write"
                    " owner/name (committed files name no hosts; ENVAUDIT_GIT_BASES says where"
                    " to clone from) or a local path"
                )
            if self.rev is None or not COMMIT.match(self.rev):
                raise ValueError(f"source {self.name!r}: rev must be a git commit (hex)")
            if not FULL_COMMIT.match(self.rev) and not self.rev_unresolved:
                raise ValueError(
                    f"source {self.name!r}: rev {self.rev!r} is not a full 40-hex commit; write"
                    " the full commit, or set rev_unresolved = true when only this prefix is known"
                )
            for path, rev in self.submodules.items():
                if not FULL_COMMIT.match(rev):
                    raise ValueError(
                        f"source {self.name!r}: submodule {path!r} rev must be a full 40-hex commit"
                    )
            if self.historical is not None and self.rev.startswith(self.historical.rev):
                raise ValueError(
                    f"source {self.name!r}: historical rev {self.historical.rev!r} is the built"
                    " rev itself; a historical pin names what could not be built"
                )
        elif self.sdist is not None:
            _all_pinned([self.sdist], f"source {self.name!r} sdist")
        if self.historical is not None and self.git is None:
            raise ValueError(f"source {self.name!r}: historical pins are for git sources only")
        _all_pinned(self.build_requires, f"source {self.name!r} build_requires")
        for key in self.build_env:
            if not ENV_NAME.match(key):
                raise ValueError(f"source {self.name!r}: build_env key {key!r} is not a name")
        for key in self.jobs_env:
            if not ENV_NAME.match(key) or key in self.build_env:
                raise ValueError(
                    f"source {self.name!r}: jobs_env {key!r} must be a variable name that"
                    " build_env does not also set"
                )
        return self

    @property
    def kind(self) -> Literal["git", "sdist"]:
        return "git" if self.git is not None else "sdist"


SUBSTITUTE_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]*$")


class SubstituteSpec(_Strict):
    """A base this env may be built over instead of its declared `base`, where that base cannot
    be made (no archive, no registry): a declared equivalent, resolved as a closure of its own
    (`locks/<env>/substitutes/<name>.json`) for the Python that base provides. Never taken
    unless asked for by name (`--substitute-base NAME`); every image and result line built
    over it names it (docs/locks.md, "Substitute bases")."""

    name: str = Field(description="How it is asked for: `--substitute-base NAME`.")
    base: BaseSpec
    python: str | None = Field(
        None,
        pattern=r"^3\.\d+$",
        description="The Python the substitute base provides when it is not the env's: the"
        " substitute's closure is resolved for it (its wheels differ where a package ships per"
        " Python), and every line run over it records it.",
    )
    note: str = Field(min_length=1, description="Why it is equivalent, and what differs.")

    @field_validator("name")
    @classmethod
    def _plain(cls, value: str) -> str:
        if not SUBSTITUTE_NAME.match(value):
            raise ValueError(f"substitute name {value!r}: lowercase letters, digits, . _ - only")
        return value


def base_text(base: BaseSpec) -> str:
    """The base in words, as labels and result lines name it: `recipe NAME`, `registry TAG`
    or `image REF`."""
    if base.recipe is not None:
        return f"recipe {base.recipe}"
    if base.registry is not None:
        return f"registry {base.registry}"
    return f"image {base.image}"


class EnvSpec(_Strict):
    """What a person writes in locks/<env>/env.toml."""

    python: str = Field(pattern=r"^3\.\d+$")
    platform: str = Field(description="uv --python-platform target, e.g. x86_64-manylinux_2_28.")
    base: BaseSpec
    description: str = ""
    requirements: list[str] = Field(min_length=1)
    constraints: list[str] = Field(
        default_factory=list, description="Pins for transitive packages (uv -c)."
    )
    find_links_only: list[str] = Field(
        default_factory=list,
        description="Packages taken only from the configured find-links (e.g. a local CPU torch).",
    )
    cuda: CudaSpec | None = None
    sources: list[SourceSpec] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict, description="Runtime environment variables.")
    substitutes: list[SubstituteSpec] = Field(
        default_factory=list,
        description="Bases this env may be built over, when asked for by name, where `base`"
        " cannot be made; each is locked as a closure of its own.",
    )

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _without_absent(handler(self), "substitutes")

    @field_validator("requirements", "constraints")
    @classmethod
    def _pinned(cls, value: list[str]) -> list[str]:
        return _all_pinned(value, "requirements/constraints")

    @model_validator(mode="after")
    def _names(self) -> EnvSpec:
        for key in self.env:
            if not ENV_NAME.match(key):
                raise ValueError(f"env key {key!r} is not an environment variable name")
        names = [s.name for s in self.sources]
        if len(set(names)) != len(names):
            raise ValueError(f"source names repeat: {names}")
        substitutes = [s.name for s in self.substitutes]
        if len(set(substitutes)) != len(substitutes):
            raise ValueError(f"substitute names repeat: {substitutes}")
        for substitute in self.substitutes:
            if substitute.base == self.base:
                raise ValueError(f"substitute {substitute.name!r} is the declared base itself")
        return self

    def canonical_sha256(self) -> str:
        """Hash of what was declared (independent of TOML formatting and comments). The
        substitutes are left out: declaring where else the env may be built does not change
        the env, so its lock stays current; each substitute's closure carries the hash of
        `for_substitute(name)` instead."""
        return canonical_sha256(self.model_dump(mode="json", exclude={"substitutes"}))

    def substitute(self, name: str) -> SubstituteSpec | None:
        return next((s for s in self.substitutes if s.name == name), None)

    def for_substitute(self, name: str) -> EnvSpec:
        """The spec a substitute's closure is resolved from: this one over the substitute's
        base, for its Python, with no substitutes of its own (KeyError: not declared)."""
        found = self.substitute(name)
        if found is None:
            raise KeyError(name)
        return self.model_copy(
            update={"base": found.base, "python": found.python or self.python, "substitutes": []}
        )


def _all_pinned(values: list[str], where: str) -> list[str]:
    for value in values:
        if not PINNED.match(value.strip()):
            raise ValueError(f"{where}: {value!r} is not pinned with == (name==version)")
    return [v.strip() for v in values]


# --- lock.json ------------------------------------------------------------------------------


class Artifact(_Strict):
    """One file, identified by name, size and content hash; never by where it came from."""

    filename: str
    size: int = Field(ge=0)
    sha256: str

    @field_validator("sha256")
    @classmethod
    def _hex(cls, value: str) -> str:
        if not SHA256.match(value):
            raise ValueError(f"sha256 {value!r} is not 64 lowercase hex digits")
        return value

    @field_validator("filename")
    @classmethod
    def _plain(cls, value: str) -> str:
        if "/" in value or "\\" in value or value in ("", ".", ".."):
            raise ValueError(f"filename {value!r} must be a bare file name")
        return value


class LockedPackage(_Strict):
    """One locked wheel. A name may appear twice in `Lock.packages`, once per role (the
    toolchain's nvidia-cuda-runtime beside torch's): (role, name) is the key, never name alone."""

    name: str
    version: str
    index: str = Field(description="Named source: 'default' index or 'find-links'.")
    role: Role = Field("runtime", description="Where it is installed: see `Role`.")
    artifact: Artifact
    built_from: str | None = Field(None, description="Source name when the wheel was built here.")


class LockedSource(_Strict):
    name: str
    kind: Literal["git", "sdist"]
    rev: str | None = None
    rev_unresolved: bool = False
    submodules: dict[str, str] = Field(default_factory=dict)
    sdist: Artifact | None = None
    version: str | None = None
    build_requires: list[LockedPackage] = Field(default_factory=list)
    build_env: dict[str, str] = Field(default_factory=dict)
    jobs_env: list[str] = Field(default_factory=list)
    cuda_arch_list: list[str] = Field(default_factory=list)
    files: dict[str, str] = Field(default_factory=dict, description="name -> sha256")
    wheel: Artifact | None = Field(None, description="The built wheel, once built.")
    absent_files: list[str] | None = Field(
        None,
        description="Files of the pinned commits the repository lacked, left out of the tree the"
        " wheel was built from (sources.py: a mirror missing a blob).",
    )
    status: Literal["declared", "surveyed", "built"] = Field(
        "declared",
        description="declared: not built, its tree not reached; surveyed: not built, its tree"
        " checked out when the lock was made (`lock --no-build`: absent_files is what the"
        " repository lacked), so an image can build it from exactly that tree; built: `wheel`.",
    )
    historical: HistoricalPin | None = Field(
        None, description="The original pins `rev` stands in for (from env.toml; never built)."
    )
    built_in: Literal["image"] | None = Field(
        None, description='"image": built in the image\'s build stage only (SourceSpec.built_in).'
    )
    note: str | None = None

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _without_absent(handler(self), "historical", "absent_files", "jobs_env", "built_in")

    @model_validator(mode="after")
    def _image_built(self) -> LockedSource:
        if self.built_in == "image" and self.wheel is not None:
            raise ValueError(
                f"source {self.name!r} is built in the image (built_in) but records a wheel"
            )
        return self

    def stand_in(self) -> str | None:
        """In words, when this source stands in for unreachable historical pins: what is built
        instead of what (None when it does not)."""
        if self.historical is None:
            return None
        built = _pins_text(self.rev or "?", self.submodules)
        original = _pins_text(self.historical.rev, self.historical.submodules)
        return (
            f"source {self.name}: {built} stands in for the historical pin {original}, which"
            " cannot be reached here; figures measured in this environment are for the stand-in"
        )


def _pins_text(rev: str, submodules: dict[str, str]) -> str:
    """'9241ae3ef9ba (csrc/cutlass 147f5673d0c1)': commits shortened to 12 digits, as git does."""
    modules = ", ".join(f"{path} {commit[:12]}" for path, commit in sorted(submodules.items()))
    return f"{rev[:12]} ({modules})" if modules else rev[:12]


# The NVIDIA libraries torch's wheels depend on: shared by every env on one torch build.
TORCH_STACK = re.compile(
    r"^(torch|triton|nvidia-(cublas|cuda-cupti|cuda-nvrtc|cuda-runtime|cudnn|cufft|cufile|curand"
    r"|cusolver|cusparse|cusparselt|nccl|nvjitlink|nvshmem|nvtx)(-cu\d+)?)$"
)


class LockedBase(_Strict):
    """The base as locked: an image by digest (`image`, `name@sha256:...`; with `registry`,
    the tag that digest was resolved from when the lock was made) or a recipe and its hash."""

    image: str | None = None
    recipe: str | None = None
    recipe_sha256: str | None = None
    registry: str | None = Field(
        None, description="The tag `image` was resolved from (env.toml's base.registry)."
    )

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _without_absent(handler(self), "registry")


class LockedCuda(_Strict):
    """The toolchain's release and canonical CUDA_HOME. Its packages are the lock's role-"cuda"
    packages; installed with `--target PREFIX`, they put the toolchain at
    PREFIX/`prefix_subdir`, which is what `home` names."""

    version: str
    home: str
    build_only: bool | None = None
    """true: images leave the toolchain out of the run environment (CudaSpec.build_only)."""
    build_only_components: list[str] | None = None
    """Canonical names of the components only source builds get (CudaSpec's field)."""

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _without_absent(handler(self), "build_only", "build_only_components")

    @property
    def prefix_subdir(self) -> str:
        """Where CUDA component wheels put the toolchain inside their install prefix."""
        return f"nvidia/cu{self.version.split('.')[0]}"


class LockedSubstitute(_Strict):
    """On a substitute's closure: which declared base it stands in for, and how it differs.
    Its `base` and `python` are the substitute's; these are the declared ones."""

    name: str
    declared_base: str = Field(description="env.toml's base in words (`recipe noble-devbase`).")
    declared_python: str
    note: str

    def text(self, python: str) -> str:
        """One line for messages and labels."""
        change = f", Python {python} for {self.declared_python}"
        return f"substitute base {self.name} for the declared {self.declared_base}" + (
            change if python != self.declared_python else ""
        )


class Lock(_Strict):
    lock_version: Literal[1] = 1
    env: str
    spec_sha256: str
    python: str
    platform: str
    base: LockedBase
    cuda: LockedCuda | None = None
    packages: list[LockedPackage]
    sources: list[LockedSource] = Field(default_factory=list)
    env_vars: dict[str, str] = Field(default_factory=dict)
    resolver: str = Field(description="Tool and version that resolved the closure.")
    substitute: LockedSubstitute | None = Field(
        None,
        description="Set on a substitute's closure (locks/<env>/substitutes/<name>.json): the"
        " declared base and Python it stands in for.",
    )
    closure_hash: str

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _without_absent(handler(self), "substitute")

    @model_validator(mode="after")
    def _keys(self) -> Lock:
        seen: set[tuple[str, str]] = set()
        for package in self.packages:
            key = (package.role, package.name)
            if key in seen:
                raise ValueError(f"package {package.name} is locked twice with role {package.role}")
            seen.add(key)
        if self.cuda is None and self.toolchain_packages():
            raise ValueError("packages with role cuda need a cuda section (version, home)")
        return self

    def runtime_packages(self) -> list[LockedPackage]:
        """What goes into the run environment (source wheels aside)."""
        return [p for p in self.packages if p.role == "runtime"]

    def toolchain_packages(self) -> list[LockedPackage]:
        """The CUDA toolchain: installed into its own prefix (cuda.home), never the run venv."""
        return [p for p in self.packages if p.role == "cuda"]

    def run_toolchain_packages(self) -> list[LockedPackage]:
        """The part of the toolchain the run environment keeps: none when it is build-only,
        else every component but those only source builds need."""
        if self.cuda is None or self.cuda.build_only:
            return []
        left_out = set(self.cuda.build_only_components or ())
        return [p for p in self.toolchain_packages() if normalize_name(p.name) not in left_out]

    def closure_body(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude={"closure_hash"})

    def computed_closure_hash(self) -> str:
        return canonical_sha256(self.closure_body())

    def artifacts(self) -> list[tuple[str, Artifact]]:
        """(what it is, artifact) for every file `fetch` must provide, built wheels included."""
        found: list[tuple[str, Artifact]] = []
        for package in self.packages:
            found.append((package_label(package), package.artifact))
        for source in self.sources:
            for package in source.build_requires:
                found.append(
                    (f"{package.name}=={package.version} (builds {source.name})", package.artifact)
                )
            if source.sdist is not None:
                found.append((f"{source.name} sdist", source.sdist))
            if source.wheel is not None:
                found.append((f"{source.name} built wheel", source.wheel))
        return found


def package_label(package: LockedPackage) -> str:
    """name==version, marked when it belongs to the CUDA toolchain (a name may be locked twice)."""
    label = f"{package.name}=={package.version}"
    return f"{label} (CUDA toolchain)" if package.role == "cuda" else label


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def canonical_sha256(value: Any) -> str:
    return hashlib.sha256(canonical_json(value).encode()).hexdigest()


def seal(body: dict[str, Any]) -> Lock:
    """A Lock whose closure_hash is computed from its (validated, defaults-filled) body."""
    draft = Lock.model_validate({**body, "closure_hash": "0" * 64})
    return draft.model_copy(update={"closure_hash": draft.computed_closure_hash()})
