"""End to end through a real container engine: the offline base, the torch-cpu image built from
its lock and the store, the harness mounted into it on the smoke suite, and the fault solutions'
statuses through containers (the same as on the host runtime).

Needs a Docker engine and debootstrap (CI starts both: .ci/run) and the torch-cpu lock's CPU
torch wheel in a configured find-links folder. Where they are absent the module is skipped,
unless ENVAUDIT_REQUIRE_ENGINE=1 (CI), which turns the skip into a failure.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import tarfile
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from envaudit import settings
from envaudit.cli import app
from envaudit.image.base import load_recipe
from envaudit.image.build import build_overlay, plan_build
from envaudit.image.engine import Engine, EngineError
from envaudit.image.overlay import overlay_tag
from envaudit.image.plan import VENV
from envaudit.lock.config import FetchConfig
from envaudit.lock.files import load_lock
from envaudit.runtime.runtimes.docker import JOB_LABEL, labelled_containers
from envaudit.schema.results import read_lines
from tests.conftest import (
    REPO,
    SHIPPED_ROOT,
    UUID_BLOB,
    UUID_RANDOM,
    engine_missing,
    skip_unless_ready,
    write_toy_root,
)
from tests.harness.test_baselines_cpu import REPRESENTATIVE_BASELINES, SOLUTIONS
from tests.harness.test_faults import EXPECTED, MESSAGES, write_solution

LOCK = load_lock(REPO / "locks" / "torch-cpu")
TORCH = next(p.artifact for p in LOCK.packages if p.name == "torch")
LINKS = (os.environ.get("UV_FIND_LINKS") or os.environ.get("PIP_FIND_LINKS") or "").split()


def _why_skip() -> str | None:
    if engine_missing() is not None:
        return engine_missing()
    if not any((Path(p) / TORCH.filename).is_file() for p in LINKS):
        return "the torch-cpu lock's CPU torch wheel is not in any configured find-links folder"
    return None


REASON = _why_skip()
pytestmark = skip_unless_ready(REASON, settings.REQUIRE_ENGINE)


def invoke(argv: list[str], env: dict[str, str]) -> tuple[int, str]:
    result = CliRunner().invoke(app, argv, env=env)
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.output


@pytest.fixture(scope="module")
def engine_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A store and cache of this module's own; the base and the torch-cpu image built. The
    folder goes with the module (the suite's folders add up to gigabytes on CI's disk)."""
    base = tmp_path_factory.mktemp("docker")
    env = {"ENVAUDIT_STORE": str(base / "store"), "ENVAUDIT_CACHE": str(base / "cache")}
    code, out = invoke(["fetch", "torch-cpu", "--locks-dir", str(REPO / "locks")], env)
    assert code == 0, out
    code, out = invoke(["base", "build", "bookworm-minbase"], env)
    assert code == 0, out
    code, out = invoke(["build", "--env", "torch-cpu"], env)
    assert code == 0, out
    yield env
    shutil.rmtree(base, ignore_errors=True)


def test_second_build_is_a_no_op_and_labels_match_the_lock(engine_env: dict[str, str]) -> None:
    engine = Engine.connect()
    plan = plan_build("torch-cpu").image
    before = engine.image(plan.tag)
    assert before is not None
    code, out = invoke(["build", "--solution", "torch-cpu"], engine_env)
    assert code == 0 and "up to date" in out, out
    after = engine.image(plan.tag)
    assert after is not None and after.id == before.id
    labels = after.labels
    assert labels["dev.envaudit.closure-hash"] == LOCK.closure_hash
    assert labels["dev.envaudit.spec-sha256"] == LOCK.spec_sha256
    assert len(labels["dev.envaudit.base-manifest-sha256"]) == 64
    # nothing of the build context stays in the image: no wheel file anywhere
    history = engine.layer_sizes(plan.tag)
    assert not any("wheels/" in created and size > 0 for created, size in history), history


def test_verify_env_in_the_image_matches_the_lock_and_names_an_edited_file(
    engine_env: dict[str, str],
) -> None:
    """`verify-env --image`: the image's env against the lock, --exact, every file hashed in a
    container of the image against the wheel in the store; an image whose one installed file
    was edited after the build fails, naming the package and the file."""
    tag = plan_build("torch-cpu").image.tag
    code, out = invoke(["verify-env", "torch-cpu", "--image", tag, "--exact"], engine_env)
    assert code == 0, out
    assert f"{len(LOCK.packages)} locked, {len(LOCK.packages)} match" in out, out
    assert f"hashes checked for {len(LOCK.packages)}" in out, out
    engine = Engine.connect()
    edited = f"{tag}-edited"
    target = f"{VENV}/lib/python3.11/site-packages/filelock/__init__.py"
    script = f"FROM {tag}\nUSER root\nRUN echo '# edited' >> {target}\n"
    engine.client.images.build(fileobj=io.BytesIO(script.encode()), tag=edited, rm=True)
    try:
        code, out = invoke(["verify-env", "torch-cpu", "--image", edited], engine_env)
    finally:
        engine.client.images.remove(edited, force=True)
    assert code == 1, out
    assert "changed files: filelock==" in out and "(filelock/__init__.py)" in out, out


def test_baselines_pass_smoke_in_containers(engine_env: dict[str, str], tmp_path: Path) -> None:
    names = REPRESENTATIVE_BASELINES
    argv = ["audit", "--runtime", "docker", "--env", "torch-cpu", "--device", "cpu"]
    argv += ["--data-root", str(SHIPPED_ROOT), "--solutions-root", str(SOLUTIONS)]
    argv += ["--out", str(tmp_path / "audit")]
    for name in names:
        argv += ["--solution", name]
    code, out = invoke(argv, engine_env)
    lines = [line for _, line in read_lines(tmp_path / "audit" / "results.jsonl") if line]
    assert {line["solution"] for line in lines} == set(names), out
    assert all(line["status"] == "PASSED" for line in lines), [x.get("message") for x in lines]
    image = Engine.connect().image(plan_build("torch-cpu").image.tag)
    assert image is not None
    for line in lines:
        context = line["context"]
        assert context["runtime"] == "docker"
        assert context["image_id"] == image.id
        assert context["closure_hash"] == LOCK.closure_hash
        assert context["declared_env"] == "torch-2.11-cu130" and context["env"] == "torch-cpu"
        assert line["environment"]["torch"] == "2.13.0+cpu"
        assert line["environment"]["distributions_count"] == len(LOCK.packages)
    assert code == 0, out


@pytest.fixture(scope="module")
def fault_lines(
    engine_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, dict[str, dict]]:
    base = tmp_path_factory.mktemp("docker-faults")
    root = write_toy_root(base / "data")
    suite = {
        "schema_version": 1,
        "name": "all",
        "workloads": {"toy_scale": [UUID_BLOB, UUID_RANDOM]},
    }
    (root / "suites" / "all.json").write_text(json.dumps(suite))
    solutions = base / "solutions"
    for name in EXPECTED:
        write_solution(solutions, name)
    argv = ["audit", "--runtime", "docker", "--device", "cpu", "--data-root", str(root)]
    argv += ["--solutions-root", str(solutions), "--out", str(base / "out"), "--suite", "all"]
    # `hang`'s workload is waited out for the whole limit; every workload here takes under
    # 1 s in a container (chatty's 60 MB of output the longest, 0.7 s)
    argv += ["--timeout", "8"]
    code, out = invoke(argv, engine_env)
    assert code == 1, out
    found: dict[str, dict[str, dict]] = {}
    for _, line in read_lines(base / "out" / "results.jsonl"):
        assert line is not None
        found.setdefault(line["solution"], {})[line["workload"]["uuid"]] = line
    return found


@pytest.mark.parametrize("name", list(EXPECTED))
def test_fault_statuses_match_the_host_runtime(fault_lines: dict, name: str) -> None:
    got = fault_lines[name]
    assert (got[UUID_BLOB]["status"], got[UUID_RANDOM]["status"]) == EXPECTED[name], (
        got[UUID_BLOB].get("message"),
        got[UUID_RANDOM].get("message"),
    )
    if name in MESSAGES:
        assert MESSAGES[name] in got[UUID_BLOB]["message"]
    assert got[UUID_BLOB]["context"]["runtime"] == "docker"


def test_crash_line_quotes_the_container_log(fault_lines: dict) -> None:
    line = fault_lines["segfault"][UUID_BLOB]
    assert "SIGSEGV" in line["message"]
    assert "Segmentation fault" in line["log"] and "main.py" in line["log"]


def test_a_container_killed_from_outside_is_that_workload_s_runtime_error(
    engine_env: dict[str, str], tmp_path: Path
) -> None:
    root = write_toy_root(tmp_path / "data")
    write_solution(tmp_path / "solutions", "hang")
    engine = Engine.connect()
    killed: list[str] = []

    def kill_when_running() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not killed:
            for container, labels in labelled_containers(engine, JOB_LABEL, "running"):
                job = Path(labels[JOB_LABEL])
                if job.is_relative_to(Path(engine_env["ENVAUDIT_CACHE"])) and _begun(job):
                    container.kill()
                    killed.append(container.id)
            time.sleep(0.2)

    thread = threading.Thread(target=kill_when_running)
    thread.start()
    argv = ["run", "--solution", "hang", "--runtime", "docker", "--device", "cpu"]
    argv += ["--data-root", str(root), "--solutions-root", str(tmp_path / "solutions")]
    argv += ["--workload", UUID_BLOB, "--report", str(tmp_path / "r.jsonl"), "--timeout", "120"]
    code, out = invoke(argv, engine_env)
    thread.join()
    assert killed, out
    (line,) = [line for _, line in read_lines(tmp_path / "r.jsonl") if line]
    assert line["status"] == "RUNTIME_ERROR" and "SIGKILL" in line["message"], line["message"]
    assert code == 1


def _begun(job: Path) -> bool:
    try:
        return '"begin"' in (job / "progress.jsonl").read_text()
    except OSError:
        return False


def test_unreadable_dataset_file_is_refused_before_any_container(
    engine_env: dict[str, str], tmp_path: Path
) -> None:
    root = write_toy_root(tmp_path / "data")
    write_solution(tmp_path / "solutions", "correct")
    for blob in (root / "blob").rglob("*.safetensors"):
        blob.chmod(0o600)
    argv = ["run", "--solution", "correct", "--runtime", "docker", "--device", "cpu"]
    argv += ["--data-root", str(root), "--solutions-root", str(tmp_path / "solutions")]
    argv += ["--report", str(tmp_path / "r.jsonl")]
    if os.getuid() != 0:
        pytest.skip("a non-root caller's container runs as that caller, who can read the file")
    code, out = invoke(argv, engine_env)
    assert code == 2, out
    assert "cannot read" in out and "chmod" in out
    assert not (tmp_path / "r.jsonl").exists()


def test_a_gpu_that_does_not_exist_is_a_usage_error(
    engine_env: dict[str, str], tmp_path: Path
) -> None:
    argv = ["run", "--solution", "gemm_bf16_n4096_k12288-torch", "--runtime", "docker"]
    argv += ["--env", "torch-cpu", "--gpu", "GPU-00000000-0000-0000-0000-000000000000"]
    argv += ["--data-root", str(SHIPPED_ROOT), "--solutions-root", str(SOLUTIONS)]
    argv += ["--report", str(tmp_path / "r.jsonl")]
    code, out = invoke(argv, engine_env)
    assert code == 2, out
    assert "GPU-00000000-0000-0000-0000-000000000000" in out
    assert not (tmp_path / "r.jsonl").exists()


# Reads the reference cache the audit mounts: by listing it, and by the names an entry would
# have if they were the plain cache key (flat, or under a folder per definition as before).
CACHE_READER = """
import json as _json
from pathlib import Path as _Path
from safetensors.torch import load_file as _load
from envaudit.harness.reference import cache_key as _cache_key

def _candidates(folder, definition, workload):
    paths = []
    for draw in (0, 1):
        key = _cache_key(definition, workload, draw, "cpu")
        paths += [folder / f"{key}.safetensors", folder / definition["name"] / f"{key}.safetensors"]
    try:
        paths += sorted(folder.iterdir())
    except OSError:
        pass
    return paths

def run(x, lengths, scale):
    job = _json.loads((job_folder() / "job.json").read_text())
    folder = _Path(job["reference_cache"])
    definition = _json.loads(_Path(job["definition_file"]).read_text())
    lines = _Path(job["workload_file"]).read_text().splitlines()
    for workload in [_json.loads(raw)["workload"] for raw in lines if raw.strip()]:
        for path in _candidates(folder, definition, workload):
            try:
                stored = _load(str(path))
            except Exception:
                continue
            for tensor in stored.values():
                if is_answer(tensor, x, lengths, scale):
                    return tensor.clone()
    return torch.zeros_like(x)
"""


def test_no_cheat_passes_in_a_container(engine_env: dict[str, str], tmp_path: Path) -> None:
    """The cheats of tests/harness/test_reach.py, and one that reads the mounted reference
    cache, run in containers after a correct solution filled that cache: none passes, and the
    worker's user cannot list the cache folder."""
    import textwrap

    from tests.harness.test_faults import SOLUTIONS as FAULTS
    from tests.harness.test_reach import CHEATS, FIND

    root = write_toy_root(tmp_path / "data")
    suite = {
        "schema_version": 1,
        "name": "all",
        "workloads": {"toy_scale": [UUID_BLOB, UUID_RANDOM]},
    }
    (root / "suites" / "all.json").write_text(json.dumps(suite))
    cheats = {**CHEATS, "cache_reader": CACHE_READER}
    bodies = {"correct": FAULTS["correct"]}
    bodies |= {name: (FIND + textwrap.dedent(body), False) for name, body in cheats.items()}
    for name in bodies:
        write_solution(tmp_path / "solutions", name, bodies)
    common = ["audit", "--runtime", "docker", "--device", "cpu", "--data-root", str(root)]
    common += ["--solutions-root", str(tmp_path / "solutions"), "--out", str(tmp_path / "out")]
    common += ["--suite", "all", "--timeout", "30"]
    code, out = invoke([*common, "--solution", "correct"], engine_env)
    assert code == 0, out
    entries = list((tmp_path / "out" / "reference-cache").iterdir())
    assert len(entries) == 4, entries  # two workloads, two draws: what the cheat looks for
    argv = list(common)
    for name in cheats:
        argv += ["--solution", name]
    code, out = invoke([*argv, "--resume"], engine_env)
    assert code == 1, out
    found: dict[str, list[str]] = {}
    for _, line in read_lines(tmp_path / "out" / "results.jsonl"):
        assert line is not None
        found.setdefault(line["solution"], []).append(line["status"])
    assert found.pop("correct") == ["PASSED", "PASSED"]
    assert set(found) == set(cheats)
    for name, statuses in found.items():
        assert len(statuses) == 2 and "PASSED" not in statuses, (name, statuses)
        assert "COMPILE_ERROR" not in statuses, (name, statuses)


def test_a_newcomer_gets_the_same_statuses_without_and_with_an_engine(
    engine_env: dict[str, str], tmp_path: Path
) -> None:
    """`make audit` with no engine (the host runtime), then again once Docker is installed, into
    the same folder: the reference cache the first wrote is read by the container's non-root
    user, and every status is the same both times (they were RUNTIME_ERROR: a 0600 entry)."""
    root = write_toy_root(tmp_path / "data")
    names = ["correct", "correct_dps", "mutates_input"]
    for name in names:
        write_solution(tmp_path / "solutions", name)
    common = ["audit", "--device", "cpu", "--data-root", str(root), "--timeout", "30"]
    common += ["--solutions-root", str(tmp_path / "solutions"), "--out", str(tmp_path / "out")]
    for name in names:
        common += ["--solution", name]
    statuses: dict[str, dict[str, list[str]]] = {}
    for runtime in ("host", "docker"):
        invoke([*common, "--runtime", runtime], engine_env)
        for _, line in read_lines(tmp_path / "out" / "results.jsonl"):
            assert line is not None
            if line["context"]["runtime"] == runtime:
                statuses.setdefault(runtime, {}).setdefault(line["solution"], []).append(
                    line["status"]
                )
    assert statuses["host"] == statuses["docker"], statuses
    assert statuses["docker"]["correct"] == ["PASSED"], statuses


def test_no_worker_container_is_left_behind(fault_lines: dict) -> None:
    engine = Engine.connect()
    left = labelled_containers(engine, JOB_LABEL)
    assert not left, [labels for _, labels in left]


def toy_launcher(tmp_path: Path, passing: Any) -> tuple[Any, Any]:
    """(the torch-cpu image's launcher, the job) for the toy `correct` solution on the CPU,
    with a reference cache, and the GPU passed as `passing` says."""
    from envaudit.runtime.jobs import RunRequest, plan_job
    from envaudit.runtime.runtimes.docker import ContainerLauncher

    root = write_toy_root(tmp_path / "data")
    write_solution(tmp_path / "solutions", "correct")
    request = RunRequest(
        solution="correct",
        data_root=root,
        solutions_root=tmp_path / "solutions",
        device="cpu",
        reference_cache=tmp_path / "refcache",
    )
    job = plan_job(request, "docker")
    image = Engine.connect().image(plan_build("torch-cpu").image.tag)
    assert image is not None
    return ContainerLauncher(Engine.connect(), image.id, job, {}, passing), job


def test_job_paths_map_into_the_container_beside_gpu_mounts(
    engine_env: dict[str, str], tmp_path: Path
) -> None:
    """The reference cache and dataset paths map to their mounts when a GPU adds mounts of its
    own (a driver folder): the H200 run found the cache mapped to nothing."""
    from envaudit.runtime.runtimes.docker import GpuPassing

    driver = tmp_path / "driver"
    (driver / "lib64").mkdir(parents=True)
    passing = GpuPassing("device-nodes", mounts=[(driver, "/usr/local/nvidia", False)])
    launcher, job = toy_launcher(tmp_path, passing)
    assert launcher.seen_as(tmp_path / "refcache") == "/envaudit/reference-cache"
    assert launcher.seen_as(job.definition_file).startswith("/envaudit/data/definitions/")
    assert launcher.seen_as(job.solution_file) == "/envaudit/solution/solution.json"


def test_a_container_the_engine_cannot_start_is_not_left_behind(
    engine_env: dict[str, str], tmp_path: Path
) -> None:
    """The engine creates a container before it starts it; a start it refuses (here: a device
    node that does not exist) is a usage error, and the created container is removed."""
    from envaudit.errors import EnvauditError
    from envaudit.runtime.runtimes.docker import GpuPassing

    passing = GpuPassing("device-nodes", options={"devices": ["/dev/envaudit-absent:/dev/gpu"]})
    launcher, _ = toy_launcher(tmp_path, passing)
    engine = Engine.connect()
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    with pytest.raises(EnvauditError, match="refused to start") as caught:
        launcher.start(job_dir, tmp_path / "worker.log")
    assert caught.value.exit_code == 2
    left = labelled_containers(engine, f"{JOB_LABEL}={job_dir}")
    assert not left, [c.status for c, _ in left]


def test_flashmla_build_says_everything_it_cannot_reach(engine_env: dict[str, str]) -> None:
    """Over its declared substitute base (trixie-devbase, which debootstrap can make here):
    what the image needs is the store's wheels of that closure and FlashMLA's repository (it
    is built in the image), named at once, each with the command or setting that provides it.
    Without the substitute asked for, the base it declares is what stops it
    (tests/image/test_substitute_base.py)."""
    env = {**engine_env, "ENVAUDIT_GIT_BASES": ""}
    asked = ["--substitute-base", "trixie-devbase", "--no-cache"]  # an image made here earlier
    code, out = invoke(["build", "--solution", "flashmla-13.3", *asked], env)
    assert code == 2, out
    assert "not in the store" in out
    assert "envaudit fetch flashmla-13.3 --substitute-base trixie-devbase" in out
    assert "deepseek-ai/FlashMLA" in out and "ENVAUDIT_GIT_BASES" in out


def test_a_failing_build_step_is_quoted_with_the_build_s_last_lines(
    engine_env: dict[str, str], tmp_path: Path
) -> None:
    base = plan_build("torch-cpu").image.base
    (tmp_path / "Dockerfile").write_text(f"FROM {base}\nRUN echo about to fail && false\n")
    with pytest.raises(EngineError) as caught:
        Engine.connect().build(tmp_path, "envaudit-test/failing:1", {})
    text = str(caught.value)
    assert caught.value.exit_code == 1
    assert "Step 2/2 : RUN echo about to fail && false" in text and "about to fail" in text


def test_an_image_under_the_lock_s_tag_from_anything_else_is_refused(
    engine_env: dict[str, str], tmp_path: Path
) -> None:
    import shutil

    locks = tmp_path / "locks"
    shutil.copytree(REPO / "locks" / "torch-cpu", locks / "torch-cpu-impostor")
    spec = locks / "torch-cpu-impostor" / "env.toml"
    spec.write_text(spec.read_text().replace("CPU torch", "another CPU torch"))
    code, out = invoke(["lock", "torch-cpu-impostor", "--locks-dir", str(locks)], engine_env)
    assert code == 0, out
    plan = plan_build("torch-cpu-impostor", locks).image
    engine = Engine.connect()
    base = engine.image(plan.base)
    assert base is not None
    repository, tag = plan.tag.split(":")
    engine.client.images.get(base.id).tag(repository, tag)
    try:
        code, out = invoke(["build", "--env", "torch-cpu-impostor", "--locks-dir", str(locks)], {})
        assert code == 2, out
        assert "does not match the lock" in out and plan.closure_hash in out
    finally:
        engine.client.images.remove(plan.tag)


def test_compile_caches_go_to_the_env_s_folder_cold_then_warm(
    engine_env: dict[str, str], tmp_path: Path
) -> None:
    from tests.runtime.test_jit import audit_twice, check_cold_then_warm

    cache = tmp_path / "cache"
    env = {**engine_env, "ENVAUDIT_CACHE": str(cache)}
    lines = audit_twice(tmp_path, ["--runtime", "docker", "--env", "torch-cpu"], env)
    check_cold_then_warm(lines, cache)
    assert all(x["context"]["runtime"] == "docker" for x in lines)


BYTECODE_PROBE = (
    "import sys\n"
    "sys.dont_write_bytecode = True\n"
    "import importlib.util, os, torch\n"
    "files = [getattr(m, '__file__', None) or '' for m in list(sys.modules.values())]\n"
    "sources = [f for f in files if f.endswith('.py') and os.path.isfile(f)]\n"
    "print(len(sources), sum(not os.path.exists(importlib.util.cache_from_source(f))\n"
    "                        for f in sources))\n"
)
"""How many modules `import torch` loads from source files, and how many of those have no
bytecode beside them (so an interpreter compiles them at every start). torch names two of its
module objects after files that are not there (`_ops.py`, `_classes.py`): only files count."""

STACK_PATHS = ("usr", "etc", "opt", "bin", "sbin", "lib", "lib64")


class _Chunks(io.RawIOBase):
    """A file over the engine's export stream, for tarfile's streaming mode."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks, self._left = chunks, b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._left:
            self._left = next(self._chunks, b"")
            if not self._left:
                return 0
        n = min(len(buffer), len(self._left))
        buffer[:n], self._left = self._left[:n], self._left[n:]
        return n


def _export_without_bytecode(engine: Engine, image: str, root: Path) -> None:
    """The image's folders STACK_PATHS unpacked under `root`, every __pycache__ left out: a
    machine stack installed without bytecode, as the GPU machine's is."""
    container = engine.client.containers.create(image, ["true"])
    try:
        stream = io.BufferedReader(_Chunks(iter(container.export())), 1 << 20)
        with tarfile.open(fileobj=stream, mode="r|") as tar:
            for member in tar:
                parts = Path(member.name).parts
                if parts and parts[0] in STACK_PATHS and "__pycache__" not in parts:
                    tar.extract(member, root, filter="tar")
    finally:
        container.remove(force=True)


SHM = Path("/dev/shm")
SCRATCH_SHM_BYTES = 4 << 30
"""What /dev/shm must have free, and the machine's memory available, for the stripped stack
(1 GB in 32,000 files) to be unpacked there rather than under tmp_path."""


@contextlib.contextmanager
def _scratch(tmp_path: Path) -> Iterator[Path]:
    """A folder for the stripped stack, removed after: in memory (/dev/shm) where there is room,
    else under tmp_path. Only where its files lie differs: on this project's 2-core machine's
    disk, unpacking the stack's 32,000 files took 37 s and importing them 25 s (14 s and 17 s in
    memory)."""
    if _room_in_memory():
        folder = Path(tempfile.mkdtemp(prefix="envaudit-stack-", dir=SHM))
        try:
            yield folder
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    else:
        yield tmp_path


def _room_in_memory() -> bool:
    if not SHM.is_dir() or shutil.disk_usage(SHM).free < SCRATCH_SHM_BYTES:
        return False
    try:
        fields = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
        available = int(fields["MemAvailable"].split()[0]) << 10
    except (OSError, KeyError, ValueError):
        return False
    return available >= 2 * SCRATCH_SHM_BYTES


def test_an_image_over_a_stack_without_bytecode_imports_torch_from_bytecode(
    engine_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The torch-cpu image's own root, stripped of its bytecode and imported as a machine stack;
    the env's image over it compiles what the stack lacks, so no start compiles torch again.
    The lock's own image has its bytecode from pip and the base's packages."""
    engine = Engine.connect()
    own = plan_build("torch-cpu").image
    counts = engine.run_python(own.tag, f"{VENV}/bin/python", BYTECODE_PROBE).split()
    loaded, missing = int(counts[0]), int(counts[1])
    assert loaded > 300 and missing == 0, counts
    with _scratch(tmp_path) as scratch:
        root = scratch / "stack"
        _export_without_bytecode(engine, own.tag, root)
        bases = tmp_path / "containers" / "bases"
        shutil.copytree(REPO / "containers" / "bases", bases)
        recipe = {"kind": "import", "python": LOCK.python, "interpreter": f"{VENV}/bin/python"}
        recipe |= {"paths": list(STACK_PATHS), "root": str(root)}
        lines = [f"{key} = {json.dumps(value)}" for key, value in recipe.items()]
        (bases / "stripped-stack.toml").write_text("\n".join(lines) + "\n")
        monkeypatch.chdir(tmp_path)
        for key, value in engine_env.items():
            monkeypatch.setenv(key, value)
        recipe_tag = load_recipe("stripped-stack").tag
        config = FetchConfig.from_environment()
        try:
            result, overlay = build_overlay(
                "torch-cpu", "stripped-stack", engine, config, REPO / "locks"
            )
            assert overlay is not None and overlay.added is None, overlay
            stripped = engine.run_python(recipe_tag, f"{VENV}/bin/python", BYTECODE_PROBE).split()
            assert int(stripped[0]) == loaded and int(stripped[1]) > loaded // 2, stripped
            over = engine.run_python(result.tag, f"{VENV}/bin/python", BYTECODE_PROBE).split()
            assert over == [str(loaded), "0"], over
        finally:
            for image in (
                overlay_tag("torch-cpu", LOCK.closure_hash, "stripped-stack"),
                recipe_tag,
            ):
                if engine.image(image) is not None:
                    engine.remove_image(image)
