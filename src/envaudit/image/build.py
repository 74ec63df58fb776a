"""Plan, then build: one image per lock, tagged by its closure hash, a no-op when it exists.

`plan_build` resolves everything a build needs (the current lock, its image plan, the git
repositories of its sources) without touching the engine; `build_image` executes a plan: the
base first (a recipe's made when it is missing and can be made here; one pinned by registry
digest pulled by that digest or loaded from the store's archive, and verified:
image/registry_base.py), then a staged context and the build.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from envaudit.errors import EXIT_USAGE, EnvauditError
from envaudit.image.base import BaseRecipe, build_base, load_recipe, why_not_buildable
from envaudit.image.context import StagedFile, planned_files, stage_context
from envaudit.image.dockerfile import render_dockerfile
from envaudit.image.engine import BuildOutcome, Engine, ImageInfo
from envaudit.image.overlay import (
    OverlayPlan,
    overlay_tag,
    plan_overlay,
    refuse_unbuilt_sources,
    render_overlay_dockerfile,
)
from envaudit.image.plan import LABEL_PREFIX, VENV, ImagePlan, plan_image
from envaudit.image.registry_base import PinnedBase, ensure_base
from envaudit.lock.config import FetchConfig
from envaudit.lock.files import env_dir, load_spec
from envaudit.lock.resolve import current_lock
from envaudit.lock.store import Store
from envaudit.lock.verify import LIST_SCRIPT, InstalledDist, compare, parse_listing
from envaudit.schema.locks import SubstituteSpec, base_text
from envaudit.settings import cache_root

CLOSURE_LABEL = f"{LABEL_PREFIX}.closure-hash"
PYTHON_VERSION = "import sys; print('%d.%d' % sys.version_info[:2])"


@dataclass(frozen=True)
class BuildPlan:
    image: ImagePlan
    env_dir: Path
    git_sources: dict[str, str]
    recipe: BaseRecipe | None
    substitutes: tuple[SubstituteSpec, ...] = ()
    """The substitute bases env.toml declares (offered by name when the base cannot be made)."""

    @property
    def dockerfile(self) -> str:
        return render_dockerfile(self.image)

    def files(self) -> list[StagedFile]:
        return planned_files(self.image)


@dataclass
class BuildResult:
    env: str
    tag: str
    image: ImageInfo
    built: bool
    seconds: float
    steps: int = 0
    cached_steps: int = 0
    base_built: bool = False
    staged: list[StagedFile] = field(default_factory=list)


def plan_build(
    env: str, locks_dir: Path = Path("locks"), substitute: str | None = None
) -> BuildPlan:
    """The build of this env's current lock (a stale or edited lock is refused); with
    `substitute`, of that declared substitute base's closure (one env.toml does not declare is
    refused, exit 2)."""
    folder = env_dir(env, locks_dir)
    spec = load_spec(folder)
    if substitute is not None:
        load_spec(folder, substitute)  # refuses a substitute env.toml does not declare
    lock = current_lock(folder, substitute=substitute)
    git_sources = {s.name: s.git for s in spec.sources if s.git is not None}
    recipe = load_recipe(lock.base.recipe) if lock.base.recipe is not None else None
    return BuildPlan(plan_image(lock), folder, git_sources, recipe, tuple(spec.substitutes))


def image_matches(image: ImageInfo, plan: ImagePlan) -> bool:
    return image.labels.get(CLOSURE_LABEL) == plan.closure_hash


def existing_image(engine: Engine, plan: ImagePlan) -> ImageInfo | None:
    """The image of this plan when it exists; an image under its tag built from anything else
    is refused rather than trusted."""
    image = engine.image(plan.tag)
    if image is not None and not image_matches(image, plan):
        found = image.labels.get(CLOSURE_LABEL) or "none"
        raise EnvauditError(
            f"image {plan.tag} ({image.id[:19]}) does not match the lock of {plan.env}: its"
            f" closure label is {found}, the lock's closure hash is {plan.closure_hash}",
            EXIT_USAGE,
            hint=f"remove it (`docker rmi {plan.tag}`) and run `envaudit build --env {plan.env}`",
        )
    return image


def build_image(
    build: BuildPlan,
    engine: Engine,
    config: FetchConfig,
    no_cache: bool = False,
    on_step: Callable[[int, int, str], None] | None = None,
    on_base_line: Callable[[str], None] | None = None,
) -> BuildResult:
    plan = build.image
    started = time.monotonic()
    existing = existing_image(engine, plan)
    if existing is not None and not no_cache:
        return BuildResult(plan.env, plan.tag, existing, False, time.monotonic() - started)
    refuse_unmade_base(build, engine)
    problems = preflight(build, engine, config)
    if problems:
        raise EnvauditError(
            f"the image of {plan.env} cannot be built here:\n"
            + "\n".join(f"  - {p}" for p in problems),
            hint="each line names what is missing; `envaudit doctor` lists what this machine has",
        )
    base_built = False
    labels = dict(plan.labels)
    if build.recipe is not None:
        base, base_built = build_base(engine, build.recipe, on_base_line)
        labels.update({k: v for k, v in base.labels.items() if k.startswith(LABEL_PREFIX)})
    else:
        assert plan.base_pinned is not None
        pinned = PinnedBase(plan.env, plan.base_pinned, plan.base_registry)
        ensure_base(engine, pinned, Store(config.store), config.offline, on_base_line)
    root = _contexts_root()
    with tempfile.TemporaryDirectory(prefix=f"{plan.env}-", dir=root) as tmp:
        staged = stage_context(
            plan, Store(config.store), config, Path(tmp), build.env_dir, build.git_sources
        )
        outcome = engine.build(Path(tmp), plan.tag, labels, no_cache=no_cache, on_step=on_step)
    return _built(plan.env, plan.tag, outcome, started, base_built, staged)


def _built(
    env: str,
    tag: str,
    outcome: BuildOutcome,
    started: float,
    base_built: bool,
    staged: list[StagedFile],
) -> BuildResult:
    seconds = time.monotonic() - started
    return BuildResult(
        env,
        tag,
        outcome.image,
        True,
        seconds,
        outcome.steps,
        outcome.cached_steps,
        base_built,
        staged,
    )


def refuse_unmade_base(build: BuildPlan, engine: Engine) -> None:
    """A declared base that is not built and cannot be made here stops the build (exit 2),
    naming the env, the base, why, and how to ask for a declared substitute: a substitute is
    never taken unless asked for (`--substitute-base NAME`)."""
    recipe = build.recipe
    if recipe is None or build.image.substitute is not None:
        return
    if engine.image(recipe.tag) is not None:
        return
    reason = why_not_buildable(recipe)
    if reason is None:
        return
    env = build.image.env
    lock = build.env_dir / "lock.json"
    message = (
        f"{env}: the base its lock declares, {recipe.name} ({lock}), is not built and cannot"
        f" be made here: {reason}"
    )
    if not build.substitutes:
        raise EnvauditError(
            message,
            EXIT_USAGE,
            hint=f"make {recipe.name} where it can be made and load it here, or declare a"
            f" substitute base under [[substitutes]] in {build.env_dir / 'env.toml'}, lock it"
            f" (`envaudit lock {env} --substitute-base NAME`) and ask for it by name",
        )
    offered = "; ".join(
        f"`envaudit build --env {env} --substitute-base {s.name}` ({base_text(s.base)},"
        f" Python {s.python or build.image.python})"
        for s in build.substitutes
    )
    raise EnvauditError(
        message + "; a substitute base is used only when asked for",
        EXIT_USAGE,
        hint=f"to build it over a substitute its env.toml declares (named in the image's labels"
        f" and in every result line's env_check): {offered}",
    )


def preflight(build: BuildPlan, engine: Engine, config: FetchConfig) -> list[str]:
    """Everything the build would stop on, found before it starts: the base, the store, the
    sources' repositories."""
    plan = build.image
    problems = []
    if build.recipe is not None and engine.image(build.recipe.tag) is None:
        reason = why_not_buildable(build.recipe)
        if reason is not None:
            problems.append(f"base {build.recipe.name} is not built and cannot be made: {reason}")
    store = Store(config.store)
    absent = [a for _, a in plan.staged_artifacts() if not store.has(a)]
    if absent:
        size = sum(a.size for a in absent) / 1e6
        asked = f" --substitute-base {plan.substitute_base}" if plan.substitute_base else ""
        problems.append(
            f"{len(absent)} artifact(s) ({size:.0f} MB) are not in the store {store.root}, e.g."
            f" {absent[0].filename}: run `envaudit fetch {plan.env}{asked}`"
        )
    for source in plan.sources:
        if source.kind == "git":
            git = build.git_sources.get(source.name, "?")
            if not config.git_remotes(git):
                problems.append(
                    f"source {source.name}: {git} at {source.rev} cannot be reached: no git"
                    " base is configured (ENVAUDIT_GIT_BASES)"
                )
    return problems


def _contexts_root() -> Path:
    """Build contexts are staged under the cache, beside the default store, so wheels can be
    hard-linked rather than copied."""
    root = cache_root() / "contexts"
    root.mkdir(parents=True, exist_ok=True)
    return root


def build_overlay(
    env: str,
    recipe_name: str,
    engine: Engine,
    config: FetchConfig,
    locks_dir: Path = Path("locks"),
    no_cache: bool = False,
    on_line: Callable[[str], None] | None = None,
) -> tuple[BuildResult, OverlayPlan | None]:
    """The image of `env` over the imported stack `recipe_name` (image/overlay.py); a no-op
    when it exists. The base is imported first when missing and this machine is its source;
    a lock with a source it holds no wheel of is refused before that (exit 2)."""
    started = time.monotonic()
    lock = current_lock(env_dir(env, locks_dir))
    recipe = load_recipe(recipe_name)
    if recipe.kind != "import":
        os_only = " (a machine's OS layer without its Python stack)" if recipe.imported else ""
        raise EnvauditError(
            f"--over {recipe_name}: not an imported stack (kind {recipe.kind!r}){os_only}",
            hint='name a base recipe of kind "import" under containers/bases; an env that'
            f" declares {recipe_name} as a substitute is built over it with --substitute-base",
        )
    refuse_unbuilt_sources(lock, recipe.name)
    tag = overlay_tag(lock.env, lock.closure_hash, recipe.name)
    existing = engine.image(tag)
    if existing is not None and not no_cache:
        if existing.labels.get(CLOSURE_LABEL) != lock.closure_hash:
            raise EnvauditError(f"image {tag} does not match the lock of {env}", EXIT_USAGE)
        return BuildResult(env, tag, existing, False, time.monotonic() - started), None
    base, base_built = build_base(engine, recipe, on_line)
    listing = engine.run_python(base.id, recipe.interpreter, LIST_SCRIPT)
    installed = parse_listing(recipe.interpreter, listing)
    version = engine.run_python(base.id, recipe.interpreter, PYTHON_VERSION).strip()
    drift = compare(lock, installed, None, version.splitlines()[-1] if version else None)
    manifest = base.labels.get(f"{LABEL_PREFIX}.base-manifest-sha256", "")
    stack = (recipe.tag, recipe.name, recipe.interpreter, manifest)
    plan = plan_overlay(lock, *stack, drift, recipe.env, recipe.search_path)
    with tempfile.TemporaryDirectory(prefix=f"{env}-", dir=_contexts_root()) as tmp:
        context = Path(tmp)
        (context / "Dockerfile").write_text(render_overlay_dockerfile(plan))
        layers = [layer for layer in (plan.added, plan.toolchain) if layer is not None]
        store = Store(config.store)
        absent = [a for layer in layers for _, _, a in layer.packages if not store.has(a)]
        if absent:
            raise EnvauditError(
                f"the base {recipe.name} lacks {len(absent)} package(s) of {env} and the"
                f" store lacks their wheels: {', '.join(a.filename for a in absent[:5])}",
                hint=f"carry them into the store, then `envaudit fetch {env} --offline`",
            )
        for layer in layers:
            folder = context / layer.folder
            folder.mkdir(parents=True)
            (folder / "requirements.txt").write_text(layer.requirements())
            for _, _, artifact in layer.packages:
                shutil.copyfile(store.path_of(artifact), folder / artifact.filename)
        outcome = engine.build(context, plan.tag, plan.labels, no_cache=no_cache)
    return _built(env, plan.tag, outcome, started, base_built, []), plan


def image_distributions(
    image: str, interpreter: str | None = None
) -> tuple[list[InstalledDist], str]:
    """What `interpreter` (default: the image's env) sees inside `image`, every RECORD file
    hashed in a container of it (this process cannot read an image's files), and its Python's
    major.minor: what `verify-env --image` compares with a lock."""
    engine = Engine.connect()
    info = engine.image(image)
    if info is None:
        raise EnvauditError(
            f"no image {image!r} in the engine",
            EXIT_USAGE,
            hint="build it first (`envaudit build --env ENV`), or name it by tag or id",
        )
    python = interpreter or f"{VENV}/bin/python"
    listing = engine.run_python(info.id, python, LIST_SCRIPT, ["records", "disk"])
    version = engine.run_python(info.id, python, PYTHON_VERSION).strip().splitlines()
    return parse_listing(python, listing), version[-1] if version else ""
