"""Bases pinned by registry digest, against a real registry on loopback (Debian's
`docker-registry`, started here): a tag locked to its digest; the store's archive of it
(`fetch --bases`) carrying a build with the registry stopped and the image gone (a damaged
archive quarantined, a record naming another image refused); the build again, pulling by the
locked digest; the tag moved under the lock (lock --check names both digests, builds keep the
locked one); a digest the registry lacks refused.

The archive round trip comes first (the `offline` fixture): the base must be absent from the
engine for `docker load` to be exercised, and an image cannot leave the engine once something is
built over it. So the one uncached build of the module is the offline one; the later builds
reuse its layers and only pull.

Needs a Docker engine, /usr/bin/docker-registry, and the offline base bookworm-minbase (made with
debootstrap when the engine lacks it, as tests/runtime/test_docker.py does): the image pushed
here is a labelled copy of it, unique to the run, so it shares its one layer. Everything the
module adds to the engine is removed at its end. Skipped where absent, unless
ENVAUDIT_REQUIRE_ENGINE=1 (CI), which turns the skip into a failure.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import docker.errors
import pytest
from typer.testing import CliRunner

from envaudit import settings
from envaudit.cli import app
from envaudit.image.base import build_base, load_recipe, why_not_buildable
from envaudit.image.dockerfile import render_dockerfile
from envaudit.image.engine import Engine, EngineError, ImageInfo
from envaudit.image.plan import pinned_base_tag, plan_image
from envaudit.image.registry_base import PinnedBase, check_repo_digests
from envaudit.lock.files import load_lock, write_lock
from envaudit.lock.registry import RegistryUnreachable, repository_of, tag_digest
from envaudit.lock.store import BaseArchive, Store
from envaudit.schema.locks import BaseSpec, LockedBase, seal
from tests.conftest import REPO, skip_unless_ready
from tests.image.test_dockerfile import sample_lock

REGISTRY = Path("/usr/bin/docker-registry")
RECIPE = load_recipe("bookworm-minbase", REPO / "containers" / "bases")
ABSENT = "sha256:" + "5" * 64


def _why_skip() -> str | None:
    if not REGISTRY.is_file():
        return f"{REGISTRY} is not installed (apt-get install docker-registry)"
    try:
        engine = Engine.connect()
    except EngineError as exc:
        return f"no container engine: {exc}"
    if engine.image(RECIPE.tag) is None:
        reason = why_not_buildable(RECIPE)
        if reason is not None:
            return f"the base {RECIPE.name} is not built and cannot be made here: {reason}"
    return None


REASON = _why_skip()
needs_registry = skip_unless_ready(REASON, settings.REQUIRE_ENGINE)
"""The end-to-end tests; those at the end of the module need neither engine nor registry."""


class Registry:
    """A `docker-registry serve` on a free loopback port, storage in a tmp folder; stopped and
    started again on the same port and storage by the `offline` fixture."""

    def __init__(self, folder: Path) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.host = f"127.0.0.1:{probe.getsockname()[1]}"
        self.config = folder / "config.yml"
        self.config.write_text(
            "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n"
            f"    rootdirectory: {folder / 'data'}\n  delete:\n    enabled: true\n"
            f"http:\n  addr: {self.host}\n"
        )
        self.log = folder / "registry.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [str(REGISTRY), "serve", str(self.config)],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and self.process.poll() is None:
            try:
                with direct.open(f"http://{self.host}/v2/", timeout=1) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"the registry did not answer at {self.host}: {self.log.read_text()}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None


@dataclass(frozen=True)
class Pushed:
    tag: str
    image_id: str
    digest: str

    @property
    def name(self) -> str:
        return self.tag.rpartition(":")[0]

    @property
    def reference(self) -> str:
        return f"{self.name}@{self.digest}"


@dataclass(frozen=True)
class Step:
    code: int
    out: str


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    server = Registry(tmp_path_factory.mktemp("registry"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def engine() -> Iterator[Engine]:
    """The engine; at the end, every image the module pushed and all built over them."""
    engine = Engine.connect()
    yield engine
    _remove_with_descendants(engine, set(PUSHED))


PUSHED: list[str] = []
"""Ids of the images this module made (labelled copies of the base)."""


def _remove_with_descendants(engine: Engine, roots: set[str]) -> None:
    """Remove `roots` and every image whose parent chain leads to one (the classic builder's
    steps), children first; local pinned-base tags go with their images."""
    children: dict[str, list[str]] = {}
    for image in engine.client.images.list(all=True):
        children.setdefault(str(image.attrs.get("Parent") or ""), []).append(str(image.id))
    order: list[str] = []

    def visit(image_id: str) -> None:
        for child in children.get(image_id, []):
            visit(child)
        if image_id not in order:
            order.append(image_id)

    for root in roots:
        visit(root)
    for image_id in order:
        with contextlib.suppress(docker.errors.APIError):
            engine.client.images.remove(image_id, force=True)


@pytest.fixture(scope="module")
def minbase(engine: Engine) -> ImageInfo:
    return build_base(engine, RECIPE)[0]


def push(engine: Engine, source: str, tag: str, what: str) -> Pushed:
    """A labelled copy of `source` (its layers, a config of its own) pushed as `tag`."""
    image = engine.label(source, tag, {"dev.envaudit.test": f"{what} {time.time_ns()}"})
    PUSHED.append(image.id)
    repository, _, name = tag.rpartition(":")
    for chunk in engine.client.api.push(repository, tag=name, stream=True, decode=True):
        assert "error" not in chunk, chunk
    pushed = engine.image(tag)
    assert pushed is not None
    digest = next(d for d in pushed.digests if d.startswith(repository + "@")).partition("@")[2]
    return Pushed(tag, image.id, digest)


@pytest.fixture(scope="module")
def first(engine: Engine, registry: Registry, minbase: ImageInfo) -> Pushed:
    return push(engine, minbase.id, f"{registry.host}/envaudit-test/debian:bookworm", "first")


@pytest.fixture(scope="module")
def places(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("places")


@pytest.fixture(scope="module")
def env(places: Path) -> dict[str, str]:
    """A store and cache of this module's own."""
    return {
        "ENVAUDIT_STORE": str(places / "store"),
        "ENVAUDIT_CACHE": str(places / "cache"),
        "ENVAUDIT_OFFLINE": "",
    }


def invoke(env: dict[str, str], *argv: str) -> Step:
    result = CliRunner().invoke(app, list(argv), env=env)
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return Step(result.exit_code, result.output)


def locks(places: Path) -> list[str]:
    return ["--locks-dir", str(places / "locks")]


@pytest.fixture(scope="module")
def locked(places: Path, env: dict[str, str], first: Pushed) -> Path:
    folder = places / "locks" / "regbase"
    folder.mkdir(parents=True)
    (folder / "env.toml").write_text(
        f'python = "{RECIPE.python}"\nplatform = "x86_64-manylinux_2_28"\n'
        f'base = {{ registry = "{first.tag}" }}\nrequirements = ["six==1.17.0"]\n'
    )
    step = invoke(env, "lock", "regbase", *locks(places))
    assert step.code == 0, step.out
    return folder


@dataclass(frozen=True)
class Offline:
    """What the archive round trip saw, step by step."""

    saved: Step
    kept: Step
    record: BaseArchive
    damaged: Step
    quarantined: list[Path]
    other_image: Step
    other_id: str
    built: Step


@pytest.fixture(scope="module")
def offline(
    engine: Engine,
    registry: Registry,
    places: Path,
    env: dict[str, str],
    first: Pushed,
    locked: Path,
) -> Offline:
    """fetch --bases; the image removed from the engine and the registry stopped; a damaged
    archive, then a record naming another image, then the good archive: build each time."""
    saved = invoke(env, "fetch", "regbase", "--bases", *locks(places))
    kept = invoke(env, "fetch", "regbase", "--bases", "--verify", *locks(places))
    store = Store(Path(env["ENVAUDIT_STORE"]))
    record = store.base_record(first.digest)
    assert record is not None, saved.out
    engine.client.images.remove(first.tag)  # its last tag: the image goes, digest and all
    assert engine.image(first.image_id) is None
    registry.stop()
    try:
        damaged, quarantined = _damaged_archive(env, places, store, record)
        other_image, other_id = _record_of_another_image(engine, env, places, store, record)
        built = invoke(env, "build", "--env", "regbase", "--offline", *locks(places))
    finally:
        registry.start()
    return Offline(saved, kept, record, damaged, quarantined, other_image, other_id, built)


def _damaged_archive(
    env: dict[str, str], places: Path, store: Store, record: BaseArchive
) -> tuple[Step, list[Path]]:
    """Same size, one byte changed, and no --offline: the registry cannot be reached, the
    archive is the way left, and its sha256 refuses it. The good one is carried in again."""
    archive = store.path_of(record.archive)
    good = places / "good-archive.tar"
    shutil.copyfile(archive, good)
    middle = record.archive.size // 2
    with archive.open("r+b") as handle:
        handle.seek(middle)
        byte = handle.read(1)[0]
        handle.seek(middle)
        handle.write(bytes([byte ^ 0xFF]))
    step = invoke(env, "build", "--env", "regbase", *locks(places))
    quarantined = sorted((store.root / "quarantine").glob(f"{record.archive.sha256}.*"))
    assert not archive.exists(), step.out
    os.replace(good, archive)
    return step, quarantined


def _record_of_another_image(
    engine: Engine, env: dict[str, str], places: Path, store: Store, record: BaseArchive
) -> tuple[Step, str]:
    """A record whose image id is not what its archive holds: loaded, then refused. The
    loaded image is removed again and the record put back."""
    path = store.base_record_path(record.digest)
    kept = path.read_text()
    other = "sha256:" + "6" * 64
    store.keep_base_record(record.model_copy(update={"image_id": other}))
    step = invoke(env, "build", "--env", "regbase", "--offline", *locks(places))
    assert engine.image(record.image_id) is not None, step.out  # loaded, untagged: gone again
    engine.remove_image(record.image_id)
    path.write_text(kept)
    return step, other


@pytest.fixture(scope="module")
def pulled(
    engine: Engine, places: Path, env: dict[str, str], locked: Path, offline: Offline
) -> tuple[Step, Step]:
    """The env's image removed, then built again with the registry up: the base (loaded, so
    without its digest reference) is pulled by digest, its RepoDigests checked; the rest comes
    from the offline build's layers. Then built once more: a no-op."""
    engine.remove_image(plan_image(load_lock(locked)).tag)
    return (
        invoke(env, "build", "--env", "regbase", *locks(places)),
        invoke(env, "build", "--env", "regbase", *locks(places)),
    )


@needs_registry
def test_lock_records_the_digest_the_tag_points_to(
    places: Path, env: dict[str, str], first: Pushed, locked: Path
) -> None:
    lock = load_lock(locked)
    assert lock.base.image == first.reference and lock.base.registry == first.tag
    assert json.loads((locked / "lock.json").read_text())["base"] == {
        "image": first.reference,
        "recipe": None,
        "recipe_sha256": None,
        "registry": first.tag,
    }
    step = invoke(env, "lock", "regbase", "--check", *locks(places))
    assert step.code == 0 and "regbase: current" in step.out, step.out


@needs_registry
def test_fetch_bases_keeps_the_archive_by_its_hash(first: Pushed, offline: Offline) -> None:
    assert offline.saved.code == 0, offline.saved.out
    assert f"base {first.reference}: saved" in offline.saved.out
    assert offline.record.archive.sha256 in offline.saved.out
    assert offline.kept.code == 0 and "archive already in the store" in offline.kept.out
    assert offline.record.image_id == first.image_id
    assert offline.record.reference == first.reference


@needs_registry
def test_a_damaged_archive_is_quarantined_and_refused(offline: Offline) -> None:
    step = offline.damaged
    text = " ".join(step.out.split())
    assert step.code == 2, step.out
    assert f"the archive of {offline.record.reference}" in text
    assert f"sha256 {offline.record.archive.sha256}) has sha256 " in text
    assert len(offline.quarantined) == 1 and str(offline.quarantined[0]) in text
    assert "Traceback" not in step.out


@needs_registry
def test_an_archive_holding_another_image_than_its_record_is_refused(offline: Offline) -> None:
    step = offline.other_image
    text = " ".join(step.out.split())
    assert step.code == 2, step.out
    assert f"gave the image(s) {offline.record.image_id}" in text
    assert f"records {offline.other_id}" in text and "refused" in text


@needs_registry
def test_build_offline_loads_the_archive(
    engine: Engine, first: Pushed, locked: Path, offline: Offline
) -> None:
    assert offline.built.code == 0, offline.built.out
    alias = engine.image(pinned_base_tag(first.reference))
    assert alias is not None and alias.id == first.image_id
    image = engine.image(plan_image(load_lock(locked)).tag)
    assert image is not None
    assert image.labels["dev.envaudit.base"] == first.reference
    assert image.labels["dev.envaudit.base-registry-tag"] == first.tag


@needs_registry
def test_build_pulls_by_the_locked_digest(
    engine: Engine, first: Pushed, pulled: tuple[Step, Step]
) -> None:
    again, no_op = pulled
    assert again.code == 0 and "built" in again.out, again.out
    assert no_op.code == 0 and "up to date" in no_op.out, no_op.out
    image = engine.image(first.reference)
    assert image is not None and image.id == first.image_id
    assert first.reference in image.digests


@needs_registry
def test_a_moved_tag_is_reported_and_changes_nothing(
    engine: Engine,
    places: Path,
    env: dict[str, str],
    first: Pushed,
    locked: Path,
    pulled: tuple[Step, Step],
) -> None:
    second = push(engine, first.image_id, first.tag, "second")
    assert second.digest != first.digest
    step = invoke(env, "lock", "regbase", "--check", *locks(places))
    text = " ".join(step.out.split())
    assert step.code == 1, step.out
    assert f"now points to {second.digest}" in text and f"lock.json has {first.digest}" in text
    step = invoke({**env, "ENVAUDIT_OFFLINE": "1"}, "lock", "regbase", "--check", *locks(places))
    assert step.code == 0 and "current" in step.out, step.out
    # Built again from nothing of the base but its digest: the tag names another image now.
    engine.remove_image(plan_image(load_lock(locked)).tag)
    engine.client.images.remove(first.reference)
    step = invoke(env, "build", "--env", "regbase", *locks(places))
    assert step.code == 0, step.out
    alias = engine.image(pinned_base_tag(first.reference))
    assert alias is not None and alias.id == first.image_id != second.image_id
    rebuilt = engine.image(plan_image(load_lock(locked)).tag)
    assert rebuilt is not None and rebuilt.labels["dev.envaudit.base"] == first.reference


@needs_registry
def test_a_digest_the_registry_lacks_is_refused(
    engine: Engine, places: Path, env: dict[str, str], first: Pushed, locked: Path
) -> None:
    folder = places / "locks" / "regbase-gone"
    folder.mkdir()
    shutil.copy(locked / "env.toml", folder / "env.toml")
    body = load_lock(locked).model_dump(mode="json", exclude={"closure_hash"})
    body["env"] = "regbase-gone"
    body["base"]["image"] = f"{first.name}@{ABSENT}"
    write_lock(folder, seal(body))
    step = invoke(env, "build", "--env", "regbase-gone", *locks(places))
    text = " ".join(step.out.split())
    assert step.code == 2, step.out
    assert f"the registry has no {ABSENT} of {first.name}" in text
    tagged = engine.image(first.tag)
    assert tagged is not None
    now = next(d for d in tagged.digests if d.startswith(first.name + "@")).partition("@")[2]
    assert f"the tag {first.tag} now points to {now}" in text and "Traceback" not in step.out


@needs_registry
def test_repo_digests_without_the_locked_digest_are_refused(engine: Engine, first: Pushed) -> None:
    image = engine.image(first.reference)
    assert image is not None
    with pytest.raises(EngineError) as caught:
        check_repo_digests(PinnedBase("regbase", f"{first.name}@{ABSENT}"), image)
    assert caught.value.exit_code == 2
    assert ABSENT in str(caught.value) and first.digest in str(caught.value)


# --- without engine or registry ------------------------------------------------------------


@pytest.mark.parametrize(
    ("base", "words"),
    [
        ({"registry": "ubuntu"}, "an implicit :latest is refused"),
        ({"registry": f"ubuntu@{ABSENT}"}, "names a digest: write it as base.image"),
        ({"registry": "ubuntu:24.04", "recipe": "noble-minbase"}, "set exactly one of"),
        ({"image": "ubuntu:24.04"}, "write base.registry"),
    ],
)
def test_a_base_that_is_not_one_reference_is_refused(base: dict[str, str], words: str) -> None:
    with pytest.raises(ValueError, match=words):
        BaseSpec.model_validate(base)


def test_recipe_and_image_bases_dump_as_before() -> None:
    """`registry` is left out while unset: every lock made before it keeps its hashes."""
    assert BaseSpec(recipe="noble-minbase").model_dump() == {
        "image": None,
        "recipe": "noble-minbase",
    }
    locked = LockedBase(recipe="noble-minbase", recipe_sha256="b" * 64).model_dump()
    assert "registry" not in locked


@pytest.mark.parametrize(
    ("name", "host", "path"),
    [
        ("ubuntu", "registry-1.docker.io", "library/ubuntu"),
        ("nvidia/cuda", "registry-1.docker.io", "nvidia/cuda"),
        ("127.0.0.1:5000/envaudit-test/debian", "127.0.0.1:5000", "envaudit-test/debian"),
        ("localhost/team/x", "localhost", "team/x"),
    ],
)
def test_a_name_s_registry(name: str, host: str, path: str) -> None:
    found = repository_of(name)
    assert (found.host, found.path) == (host, path)
    assert found.base_url.startswith("http://" if "registry-1" not in host else "https://")


def test_a_pinned_base_is_built_from_its_local_tag_and_labelled_by_digest() -> None:
    body = sample_lock(sources=[]).model_dump(mode="json", exclude={"closure_hash"})
    reference = f"127.0.0.1:5000/envaudit-test/debian@{ABSENT}"
    body["base"] = {"image": reference, "registry": "127.0.0.1:5000/envaudit-test/debian:x"}
    plan = plan_image(seal(body))
    assert plan.base == pinned_base_tag(reference) == "envaudit-base/pinned:5555555555555555"
    assert plan.labels["dev.envaudit.base"] == reference
    assert f"FROM {plan.base} AS installer" in render_dockerfile(plan)


def test_repo_digests_are_compared_by_repository_and_digest() -> None:
    digest = "sha256:" + "a" * 64
    image = ImageInfo("sha256:" + "c" * 64, [], 0, {}, [f"ubuntu@{digest}"], [])
    check_repo_digests(PinnedBase("e", f"docker.io/library/ubuntu@{digest}"), image)
    with pytest.raises(EngineError, match=r"has the digest\(s\) none for nvidia/cuda, the lock"):
        check_repo_digests(PinnedBase("e", f"nvidia/cuda@{digest}"), image)


def test_a_registry_that_does_not_answer_is_an_environment_error(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{probe.getsockname()[1]}"  # nothing listens once it is closed
    with pytest.raises(RegistryUnreachable) as caught:
        tag_digest(f"{dead}/envaudit-test/debian:bookworm", timeout=5)
    assert caught.value.exit_code == 2 and f"the registry {dead}" in str(caught.value)
    folder = tmp_path / "locks" / "dead"
    folder.mkdir(parents=True)
    (folder / "env.toml").write_text(
        f'python = "{RECIPE.python}"\nplatform = "x86_64-manylinux_2_28"\n'
        f'base = {{ registry = "{dead}/envaudit-test/debian:bookworm" }}\n'
        'requirements = ["six==1.17.0"]\n'
    )
    step = invoke({"ENVAUDIT_OFFLINE": ""}, "lock", "dead", "--locks-dir", str(tmp_path / "locks"))
    assert step.code == 2 and "cannot be reached" in step.out, step.out
