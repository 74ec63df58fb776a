"""`envaudit base build NAME`: an offline base image built from its recipe under
containers/bases (image/base.py: a debootstrap rootfs or an imported machine stack, then
`docker import`), or found already built."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

MANIFEST_LABEL = "dev.envaudit.base-manifest-sha256"
"""The image label holding the sha256 of the base's package manifest."""


@dataclass(frozen=True)
class BaseBuildRequest:
    name: str
    """The recipe: containers/bases/<name>.toml."""
    rebuild: bool = False
    """Build it even if it exists."""


@dataclass(frozen=True)
class BaseBuildResult:
    tag: str
    built: bool
    """False when the image was there already."""
    seconds: float
    image_id: str
    size_bytes: int
    manifest: str
    """The package manifest's sha256 the image is labelled with ("?" when it is not)."""


def build_base_image(
    request: BaseBuildRequest, on_line: Callable[[str], None] | None = None
) -> BaseBuildResult:
    """The recipe read (refused, exit 2, when the name is no recipe), then the base built or
    found; `on_line` gets each line of the build as it comes. Without an engine, a base this
    machine could not make anyway says why (another machine's OS) before the engine's absence."""
    from envaudit.errors import EXIT_USAGE, EnvauditError
    from envaudit.image.base import build_base, load_recipe, why_not_buildable
    from envaudit.image.engine import Engine, EngineError  # the Docker SDK, only here

    started = time.monotonic()
    recipe = load_recipe(request.name)
    try:
        engine = Engine.connect()
    except EngineError as exc:
        reason = why_not_buildable(recipe)
        if reason is None:
            raise
        raise EnvauditError(
            f"base {recipe.name} cannot be made here: {reason}", EXIT_USAGE, hint=exc.one_line()
        ) from None
    image, built = build_base(engine, recipe, on_line, rebuild=request.rebuild)
    return BaseBuildResult(
        tag=recipe.tag,
        built=built,
        seconds=time.monotonic() - started,
        image_id=image.id,
        size_bytes=image.size,
        manifest=image.labels.get(MANIFEST_LABEL, "?"),
    )
