"""Substitute bases (schema/locks.py SubstituteSpec): an env's closure over a base it declares as
an equivalent, taken only when asked for by name, and named wherever it was taken.

The plan tests need no engine. The engine tests run against a real Docker engine (skipped where
none answers, unless ENVAUDIT_REQUIRE_ENGINE=1) on a machine that cannot make flashmla-13.3's
declared base (noble-devbase: this debootstrap knows no Ubuntu suite), with an image planted
under the substitute's tag: the declared build and run must still refuse, and never take it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envaudit import settings
from envaudit.cli import app
from envaudit.errors import EnvauditError
from envaudit.image.base import load_recipe, why_not_buildable
from envaudit.image.build import existing_image, plan_build
from envaudit.image.plan import LABEL_PREFIX, SUBSTITUTE_LABEL
from envaudit.lock.files import LockError, load_lock, load_spec
from envaudit.schema.locks import EnvSpec
from tests.conftest import REPO, engine_missing, skip_unless_ready, write_toy_root

LOCKS = REPO / "locks"
ASKED = ["--substitute-base", "trixie-devbase"]


def invoke(argv: list[str], env: dict[str, str] | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(app, argv, env=env)
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.output


def test_substitutes_leave_the_declared_lock_as_it_was() -> None:
    """Declaring where else an env may be built does not change the env: the spec hash leaves
    the substitutes out, and each substitute's closure is the spec over its base and Python."""
    spec = load_spec(LOCKS / "flashmla-13.3")
    bare = EnvSpec.model_validate({**spec.model_dump(mode="json"), "substitutes": []})
    assert spec.canonical_sha256() == bare.canonical_sha256()
    over = spec.for_substitute("trixie-devbase")
    assert (over.python, over.base.recipe, over.substitutes) == ("3.13", "trixie-devbase", [])
    assert over.canonical_sha256() != spec.canonical_sha256()
    declared = load_lock(LOCKS / "flashmla-13.3")
    substitute = load_lock(LOCKS / "flashmla-13.3", "trixie-devbase")
    assert declared.substitute is None and declared.python == "3.12"
    assert substitute.substitute is not None and substitute.python == "3.13"
    assert substitute.substitute.declared_base == "recipe noble-devbase"
    assert substitute.closure_hash != declared.closure_hash


def test_flashmla_builds_its_source_in_the_image_whatever_the_base() -> None:
    """No lock of flashmla-13.3 holds a wheel built on some host: FlashMLA is a build stage of
    its image, over the declared base and over the substitute alike."""
    for substitute in (None, "trixie-devbase"):
        lock = load_lock(LOCKS / "flashmla-13.3", substitute)
        [source] = lock.sources
        assert (source.built_in, source.status, source.wheel) == ("image", "surveyed", None)
        [stage] = plan_build("flashmla-13.3", LOCKS, substitute).image.sources
        assert stage.name == "flash-mla" and stage.built_in_image


def test_an_undeclared_substitute_is_refused_naming_the_declared_ones() -> None:
    with pytest.raises(LockError) as caught:
        plan_build("flashmla-13.3", LOCKS, "bookworm-minbase")
    assert caught.value.exit_code == 2
    assert "declares no substitute base 'bookworm-minbase'" in caught.value.message
    assert "trixie-devbase" in caught.value.message


@pytest.mark.parametrize("env", ["flashmla-13.3", "sglang-0.5.22"])
def test_the_dry_run_plan_over_the_substitute_names_it(env: str) -> None:
    """`build --dry-run` with the substitute asked for: the tag, the Dockerfile's header and
    FROM, and the labels the image will carry all name it and what it stands in for."""
    code, out = invoke(["build", "--solution", env, *ASKED, "--dry-run", "--locks-dir", str(LOCKS)])
    assert code == 0, out
    plan = plan_build(env, LOCKS, "trixie-devbase").image
    assert plan.tag.endswith("-over-trixie-devbase") and f"# ---- {env}: {plan.tag}" in out
    assert "# Over a substitute base trixie-devbase for the declared recipe" in out
    assert "Python 3.13 for 3.12" in out and "--substitute-base trixie-devbase" in out
    assert "FROM envaudit-base/trixie-devbase:" in out
    assert "sys.version_info[:2] == (3, 13)" in out
    assert plan.labels[SUBSTITUTE_LABEL] == "trixie-devbase"
    assert plan.labels[f"{LABEL_PREFIX}.declared-python"] == "3.12"
    assert plan.labels[f"{LABEL_PREFIX}.python"] == "3.13"
    declared = plan_build(env, LOCKS).image
    assert SUBSTITUTE_LABEL not in declared.labels and declared.substitute is None
    assert "-over-" not in declared.tag


def test_lock_check_covers_every_declared_substitute() -> None:
    code, out = invoke(["lock", "flashmla-13.3", "--check", "--locks-dir", str(LOCKS)])
    assert code == 0, out
    assert "flashmla-13.3: current" in out and "flashmla-13.3 over trixie-devbase: current" in out


def test_a_substitute_closure_under_the_declared_name_is_refused(tmp_path: Path) -> None:
    """A substitute's closure copied over lock.json is not taken for the declared one."""
    import shutil

    folder = tmp_path / "flashmla-13.3"
    shutil.copytree(LOCKS / "flashmla-13.3", folder)
    (folder / "lock.json").write_bytes(
        (folder / "substitutes" / "trixie-devbase.json").read_bytes()
    )
    with pytest.raises(LockError, match="holds substitute base trixie-devbase's closure"):
        load_lock(folder)


# --- with a real engine -----------------------------------------------------------------------


def _why_skip() -> str | None:
    missing = engine_missing()
    if missing is not None:
        return missing
    reason = why_not_buildable(load_recipe("noble-devbase"))
    if reason is None:
        return "noble-devbase can be made here: no declared base to refuse"
    from envaudit.image.engine import Engine

    if Engine.connect().image(load_recipe("noble-devbase").tag) is not None:
        return "noble-devbase is in this engine: the declared base needs no substitute"
    return None


engine_only = skip_unless_ready(_why_skip(), settings.REQUIRE_ENGINE)


@pytest.fixture(scope="module")
def planted() -> Iterator[str]:
    """An image under the substitute closure's tag with its labels (an empty one: nothing here
    runs it), as if `build --substitute-base trixie-devbase` had made it on this machine."""
    from envaudit.image.engine import Engine

    plan = plan_build("flashmla-13.3", LOCKS, "trixie-devbase").image
    engine = Engine.connect()
    if engine.image(plan.tag) is not None:  # the real one (docs/audit): leave it be
        yield plan.tag
        return
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "Dockerfile").write_text("FROM scratch\nLABEL dev.envaudit.test=planted\n")
        engine.build(Path(tmp), plan.tag, plan.labels)
    try:
        yield plan.tag
    finally:
        engine.client.images.remove(plan.tag)


@engine_only
def test_the_declared_build_refuses_and_never_takes_the_substitute(planted: str) -> None:
    """The substitute's image is there to be taken; `build` without it asked for still stops
    with exit 2, naming the env, the declared base, why it cannot be made, and the option."""
    from envaudit.image.engine import Engine

    engine = Engine.connect()
    declared = plan_build("flashmla-13.3", LOCKS)
    assert existing_image(engine, plan_build("flashmla-13.3", LOCKS, "trixie-devbase").image)
    assert existing_image(engine, declared.image) is None
    code, out = invoke(["build", "--solution", "flashmla-13.3", "--locks-dir", str(LOCKS)])
    assert code == 2, out
    assert "flashmla-13.3: the base its lock declares, noble-devbase" in out
    assert "cannot be made here: this debootstrap does not know ubuntu noble" in out
    assert "a substitute base is used only when asked for" in out
    assert "`envaudit build --env flashmla-13.3 --substitute-base trixie-devbase`" in out
    assert engine.image(declared.image.tag) is None
    code, out = invoke(["build", "--solution", "flashmla-13.3", *ASKED, "--locks-dir", str(LOCKS)])
    assert code == 0 and planted in out, out  # asked for: the image found, a no-op


@engine_only
def test_a_run_takes_the_substitute_only_when_asked_and_its_lines_name_it(
    planted: str, tmp_path: Path
) -> None:
    """The docker runtime's job for a solution in flashmla-13.3: without the option, the
    declared image is not built and the run stops (exit 2, naming the option); with it, the
    job runs in the substitute's image and its env_check names the substitute."""
    from envaudit.runtime.base import RunOptions
    from envaudit.runtime.jobs import RunRequest, plan_job
    from envaudit.runtime.registry import get_runtime
    from tests.harness.test_faults import write_solution

    write_solution(tmp_path / "solutions", "correct")
    request = RunRequest(
        solution="correct",
        data_root=write_toy_root(tmp_path / "data"),
        solutions_root=tmp_path / "solutions",
        device="cpu",
        reference_cache=tmp_path / "refcache",
    )
    job = plan_job(request, "docker")
    runtime = get_runtime("docker", "flashmla-13.3")
    with pytest.raises(EnvauditError) as caught:
        runtime.prepare(job, RunOptions(env="flashmla-13.3", locks_dir=LOCKS))
    assert caught.value.exit_code == 2 and "is not built" in caught.value.message
    options = RunOptions(env="flashmla-13.3", locks_dir=LOCKS, substitute="trixie-devbase")
    prepared, _ = get_runtime("docker", "flashmla-13.3", None, "trixie-devbase").prepare(
        job, options
    )
    check = prepared.context.env_check
    assert check is not None and check.substitute_base == "trixie-devbase"
    assert (
        check.substitute is not None and "for the declared recipe noble-devbase" in check.substitute
    )
    assert "Python 3.13 for 3.12" in check.substitute
    substitute = load_lock(LOCKS / "flashmla-13.3", "trixie-devbase")
    assert prepared.context.closure_hash == substitute.closure_hash
    record = prepared.context.record()
    assert record["env_check"]["substitute_base"] == "trixie-devbase"


@skip_unless_ready(engine_missing(), settings.REQUIRE_ENGINE)
def test_an_overlay_of_flashmla_is_refused_before_the_stack_is_imported() -> None:
    """flashmla-13.3's lock holds no FlashMLA wheel (built in its image's build stage): an image
    over the GPU machine's stack, which installs only the lock's wheels, would lack flash_mla.
    The build is refused (exit 2) naming the env and the source, and nothing reaches the engine:
    neither the stack's base nor an overlay image."""
    from envaudit.image.engine import Engine
    from envaudit.image.overlay import overlay_tag

    engine = Engine.connect()
    base = load_recipe("gpu-host-stack").tag
    had_base = engine.image(base) is not None
    lock = load_lock(LOCKS / "flashmla-13.3")
    argv = ["build", "--solution", "flashmla-13.3", "--over", "gpu-host-stack"]
    code, out = invoke([*argv, "--locks-dir", str(LOCKS)])
    assert code == 2, out
    assert "flashmla-13.3: no image over the imported stack gpu-host-stack" in out
    assert 'flash-mla (built_in = "image"' in out and "without --over" in out
    assert engine.image(overlay_tag(lock.env, lock.closure_hash, "gpu-host-stack")) is None
    assert (engine.image(base) is not None) == had_base


def test_the_local_runtime_sends_a_source_built_in_the_image_to_a_container() -> None:
    """The local runtime installs the lock's wheels; for FlashMLA, built in images only, it
    says so (exit 2) and names the container runtime, not a `lock` that would not build it."""
    from envaudit.runtime.runtimes.local import installable

    with pytest.raises(LockError) as caught:
        installable(load_lock(LOCKS / "flashmla-13.3"))
    assert caught.value.exit_code == 2 and "flash-mla of flashmla-13.3" in caught.value.message
    assert "--runtime docker" in (caught.value.hint or "")
