"""The `docker` and `podman` runtimes: each worker runs in a container of the env's image.

The container gets the staged harness, the dataset and the solution read-only, one job folder
and the reference cache read-write, no network, a non-root user, a read-only root file system
with a tmpfs for scratch, no Docker socket, no variable of the host, and resource limits. A GPU
is passed by UUID through the engine's NVIDIA runtime when it has one, else as device nodes plus
the driver's library folder (ENVAUDIT_NVIDIA_DRIVER_DIR); the line records which.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker.errors
import docker.types
import requests.exceptions

from envaudit.errors import EXIT_USAGE, EnvauditError, write_failed
from envaudit.image.base import why_not_buildable
from envaudit.image.build import (
    build_image,
    build_overlay,
    existing_image,
    image_matches,
    plan_build,
    refuse_unmade_base,
)
from envaudit.image.engine import Engine, EngineError
from envaudit.image.overlay import overlay_tag
from envaudit.image.plan import HARNESS_MOUNT, LABEL_PREFIX, SUBSTITUTE_LABEL, USER
from envaudit.lock.fetch import fetch_env
from envaudit.runtime.base import Progress, RunOptions, Runtime
from envaudit.runtime.devices import Gpu, device_nodes, require_gpu
from envaudit.runtime.gpu_access import (
    CAPABILITIES,
    CDI,
    NVIDIA_RUNTIME,
    cdi_device,
    choose_gpu_access,
)
from envaudit.runtime.jit import jit_cache_folder, jit_environment, prepare_jit_cache
from envaudit.runtime.jobs import Job
from envaudit.runtime.staging import staged_harness
from envaudit.runtime.supervision.launchers import Launcher, WorkerHandle
from envaudit.runtime.supervision.reaper import Reaper, reaper_for
from envaudit.schema.progress import seal_reference_folder
from envaudit.schema.result_line import EnvCheck
from envaudit.settings import (
    CONTAINER_MEMORY_BYTES,
    CONTAINER_TMPFS,
    GPU_ACCESS,
    NVIDIA_DRIVER_DIR,
    read,
    value,
)

MOUNT = "/envaudit"
JIT_MOUNT = f"{MOUNT}/jit"
LOG_CAP_BYTES = 1 << 20
JOB_LABEL = "dev.envaudit.job"
PIDS_LIMIT = 8192
POLL_INTERVAL_S = 0.5
REMOVE_TRIES = 5
REMOVE_RETRY_S = 0.2


class ContainerHandle:
    """A worker in a container. A thread of its own waits for the container to stop (one
    request that the engine answers when it does), so the exit is seen within milliseconds: the
    next job's gate opens on it (runtime/supervision/supervisor.py, Handoff). Should that wait fail
    (the engine restarted, say), the state is asked for instead, at most every POLL_INTERVAL_S, so a
    timed kernel does not share the host with a stream of engine requests."""

    def __init__(self, container: Any, reaper: Reaper | None = None) -> None:
        self.container = container
        self.reaper = reaper
        self.oom = False
        self.asked = 0.0
        self.stopped = threading.Event()
        self.waited = False
        threading.Thread(target=self._wait, name="envaudit-container-wait", daemon=True).start()

    def _wait(self) -> None:
        with contextlib.suppress(Exception):
            self.container.wait()
            self.waited = True
        self.stopped.set()

    def poll(self) -> int | None:
        if not self.stopped.is_set():
            return None  # the wait is still under way
        if not self.waited and time.monotonic() - self.asked < POLL_INTERVAL_S:
            return None
        self.asked = time.monotonic()
        try:
            self.container.reload()
        except docker.errors.NotFound:
            return -9  # removed from outside
        except (docker.errors.DockerException, requests.exceptions.RequestException):
            return None  # the engine is busy; ask again
        state = self.container.attrs.get("State") or {}
        if state.get("Status") not in ("exited", "dead"):
            return None
        self.oom = bool(state.get("OOMKilled"))
        code = int(state.get("ExitCode") or 0)
        return -(code - 128) if 128 < code < 160 else code

    def kill(self) -> None:
        with contextlib.suppress(docker.errors.DockerException):
            self.container.kill()
        with contextlib.suppress(
            docker.errors.DockerException, requests.exceptions.RequestException
        ):
            self.container.wait(timeout=60)

    def finish(self, log: Path) -> None:
        """Keep the last MiB of the container's output in the log, then remove the container."""
        try:
            output = self.container.logs(stdout=True, stderr=True)
        except docker.errors.DockerException as exc:
            output = f"(container logs unavailable: {exc})\n".encode()
        if self.oom:
            output += b"\n(the container was killed for exceeding its memory limit)\n"
        try:
            log.write_bytes(output[-LOG_CAP_BYTES:])
        except OSError as exc:
            raise write_failed(log, exc, "keep the worker's log") from None
        finally:
            remove_container(self.container)
            if self.reaper is not None:
                self.reaper.forget(self.container.id)


def labelled_containers(
    engine: Engine, label: str, status: str | None = None
) -> list[tuple[Any, dict[str, str]]]:
    """Containers (any state, or `status`) with `label` (a key, or key=value), each with its
    labels, from the engine's list alone. The SDK's list inspects each container it lists, and
    fails whole where one is removed between the two (as a reaper's or a job's own are)."""
    filters: dict[str, str | list[str] | bool] = {"label": label}
    if status:
        filters["status"] = status
    found = engine.client.containers.list(all=True, sparse=True, filters=filters)
    return [(container, dict(container.attrs.get("Labels") or {})) for container in found]


def remove_container(container: Any) -> None:
    """Remove a worker's container, asking again for a few seconds where the engine refuses for
    a moment (its removal already under way, a mount still busy): a container left behind holds
    its job folder's label and its filesystem until someone removes it. An engine that does not
    answer at all is not asked again (each request waits for the client's timeout); the audit
    goes on."""
    for attempt in range(REMOVE_TRIES):
        try:
            container.remove(force=True)
            return
        except docker.errors.NotFound:
            return
        except docker.errors.DockerException:
            if attempt + 1 < REMOVE_TRIES:
                time.sleep(REMOVE_RETRY_S * 2**attempt)
        except requests.exceptions.RequestException:
            return


class ContainerLauncher:
    def __init__(
        self,
        engine: Engine,
        image_id: str,
        job: Job,
        environment: dict[str, str],
        gpu: GpuPassing,
        jit_folder: Path | None = None,
    ) -> None:
        self.engine = engine
        self.image_id = image_id
        self.environment = environment
        self.gpu = gpu
        self.tmpfs_size = value(CONTAINER_TMPFS)
        self.mem_limit = _memory_limit()
        self.mounts: list[tuple[Path, str, bool]] = [
            (staged_harness(), HARNESS_MOUNT, False),
            (job.data_root, f"{MOUNT}/data", False),
            (job.solution_file.parent, f"{MOUNT}/solution", False),
        ]
        if job.reference_cache is not None and os.getuid() == 0:
            # The worker (USER) does not own the folder: it may open an entry whose name its
            # judge gives it, never list them. A caller's own uid would own it, so for such a
            # caller the container gets no cache and its judge computes every reference.
            seal_reference_folder(job.reference_cache)
            self.mounts.append((job.reference_cache, f"{MOUNT}/reference-cache", True))
        if jit_folder is not None:
            self.mounts.append((jit_folder, JIT_MOUNT, True))
        remove_orphaned_containers(engine)

    def seen_as(self, path: Path) -> str:
        for host, inside, _ in self.mounts:
            if path == host or path.is_relative_to(host):
                return str(Path(inside) / path.relative_to(host))
        raise EnvauditError(f"{path} is outside every folder mounted into the container")

    def check_readable(self) -> None:
        """Every file of the job the worker reads must be readable by its user, or the job fails
        with a permission error that is the machine's fault, not the solution's: refuse it up
        front. (The driver folder a GPU brings is the machine's own: not walked.)"""
        user = container_user()
        uid, gid = (int(part) for part in user.split(":"))
        blocked: list[Path] = []
        for host, _, writable in self.mounts:
            if not writable:
                blocked += unreadable_files(host, uid, gid, limit=5 - len(blocked))
        if blocked:
            raise EnvauditError(
                f"the container's user ({user}) cannot read {', '.join(map(str, blocked))}",
                EXIT_USAGE,
                hint="make the dataset and solution files readable by others (chmod -R a+rX"
                " FOLDER); the worker runs as a non-root user with read-only mounts",
            )

    def _remove_created(self, job_dir: Path) -> None:
        """The engine creates a container before it starts it, and a start that fails leaves
        the created one behind: remove it."""
        with contextlib.suppress(
            docker.errors.DockerException, requests.exceptions.RequestException
        ):
            for container, _ in labelled_containers(self.engine, f"{JOB_LABEL}={job_dir}"):
                remove_container(container)

    def start(self, job_dir: Path, log: Path) -> WorkerHandle:
        mounts = [*self.mounts, *self.gpu.mounts]
        volumes = {str(h): {"bind": c, "mode": "rw" if rw else "ro"} for h, c, rw in mounts}
        volumes[str(job_dir)] = {"bind": f"{MOUNT}/job", "mode": "rw"}
        try:
            container = self.engine.client.containers.run(
                self.image_id,
                ["python", "-m", "envaudit.harness.worker", f"{MOUNT}/job"],
                detach=True,
                network_mode="none",
                read_only=True,
                tmpfs={"/tmp": f"rw,exec,nosuid,nodev,mode=1777,size={self.tmpfs_size}"},
                user=container_user(),
                environment=self.environment,
                volumes=volumes,
                cap_drop=["ALL"],
                security_opt=["no-new-privileges"],
                pids_limit=PIDS_LIMIT,
                mem_limit=self.mem_limit,
                shm_size="2g",
                init=True,
                labels={JOB_LABEL: str(job_dir)},
                working_dir="/tmp",
                **engine_limits(self.engine.kind),
                **self.gpu.options,
            )
        except docker.errors.APIError as exc:
            self._remove_created(job_dir)
            raise _start_error(exc, self.gpu) from None
        reaper = reaper_for(self.engine.kind)
        reaper.watch(str(container.id))  # killed and removed should this process die first
        log.touch()
        return ContainerHandle(container, reaper)


def engine_limits(kind: str) -> dict[str, Any]:
    """Resource limits the engine would otherwise pick badly. Podman (rootful) asks the OCI
    runtime for nofile 1048576 and nproc 4194304, beyond what a container on a machine with
    lower hard limits may set ("error setting rlimit type 7: operation not permitted"): its
    worker gets the caller's own open-file limit and as many processes as the pids limit allows.
    Docker's containers inherit its daemon's limits, as they always have."""
    if kind != "podman":
        return {}
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    files = docker.types.Ulimit(name="nofile", soft=soft, hard=hard)
    processes = docker.types.Ulimit(name="nproc", soft=PIDS_LIMIT, hard=PIDS_LIMIT)
    return {"ulimits": [files, processes]}


def container_user() -> str:
    """Never root: the caller's own uid and gid, or a fixed unprivileged one for root callers."""
    return USER if os.getuid() == 0 else f"{os.getuid()}:{os.getgid()}"


def unreadable_files(root: Path, uid: int, gid: int, limit: int = 5) -> list[Path]:
    """Files (and folders) under root that this uid/gid cannot read (or enter)."""
    found: list[Path] = []
    paths = [root, *root.rglob("*")] if root.is_dir() else [root]
    for path in paths:
        if len(found) >= limit:
            break
        try:
            info = path.stat()
        except OSError:
            continue
        need = 0o5 if path.is_dir() else 0o4
        if info.st_uid == uid:
            mode = info.st_mode >> 6
        elif info.st_gid == gid:
            mode = info.st_mode >> 3
        else:
            mode = info.st_mode
        if mode & need != need:
            found.append(path)
    return found


def _memory_limit() -> int:
    """Most of this machine's memory: a runaway solution is killed before the machine swaps."""
    limit = read(CONTAINER_MEMORY_BYTES)
    if limit is not None:
        return limit
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") * 0.9)


def _start_error(exc: docker.errors.APIError, gpu: GpuPassing) -> EnvauditError:
    text = str(exc.explanation or exc)
    if "could not select device driver" in text:
        hint = (
            "this engine has no NVIDIA runtime: set ENVAUDIT_GPU_ACCESS=device-nodes (and"
            " ENVAUDIT_NVIDIA_DRIVER_DIR to the driver's library folder) or install the NVIDIA"
            " container toolkit"
        )
        if gpu.mode == CDI:
            hint = (
                "this engine does not resolve CDI devices (Docker 25 or later does, with CDI"
                " enabled): set ENVAUDIT_GPU_ACCESS=device-nodes or nvidia-runtime"
            )
        return EnvauditError(f"the engine cannot pass a GPU in: {text}", EXIT_USAGE, hint=hint)
    return EnvauditError(f"the engine refused to start the worker's container: {text}", EXIT_USAGE)


def remove_orphaned_containers(engine: Engine) -> None:
    """Exited worker containers whose job folder is gone (their supervisor was killed)."""
    with contextlib.suppress(docker.errors.DockerException, requests.exceptions.RequestException):
        for container, labels in labelled_containers(engine, JOB_LABEL, "exited"):
            if not Path(labels.get(JOB_LABEL, "")).exists():
                remove_container(container)


@dataclass
class GpuPassing:
    """How one GPU is passed into a container: run options, extra mounts and variables."""

    mode: str
    options: dict[str, Any] = field(default_factory=dict)
    mounts: list[tuple[Path, str, bool]] = field(default_factory=list)
    environment: dict[str, str] = field(default_factory=dict)


def gpu_passing(engine: Engine, gpu: Gpu) -> GpuPassing:
    """The path runtime/gpu_access.py chooses for this engine: NVIDIA's runtime (a device
    request by UUID), a CDI device (`nvidia.com/gpu=<UUID>`), else the GPU's device nodes and
    the driver's library folder, read-only."""
    access = choose_gpu_access(engine.info(), read(GPU_ACCESS), engine.podman)
    if access.mode == NVIDIA_RUNTIME:
        request = docker.types.DeviceRequest(device_ids=[gpu.uuid], capabilities=[CAPABILITIES])
        return GpuPassing(access.mode, options={"device_requests": [request]})
    if access.mode == CDI:
        name = cdi_device(access.spec, gpu.uuid, gpu.index)
        request = docker.types.DeviceRequest(driver="cdi", device_ids=[name])
        return GpuPassing(access.mode, options={"device_requests": [request]})
    driver = value(NVIDIA_DRIVER_DIR)
    lib = next((driver / d for d in ("lib64", "lib") if (driver / d).is_dir()), None)
    if lib is None:
        raise EnvauditError(
            f"no NVIDIA driver library folder at {driver} to mount into the container",
            EXIT_USAGE,
            hint="set ENVAUDIT_NVIDIA_DRIVER_DIR to the folder holding the driver's lib64/",
        )
    return GpuPassing(
        access.mode,
        options={"devices": [f"{n}:{n}:rwm" for n in device_nodes(gpu)]},
        mounts=[(driver, str(driver), False)],
        environment={"LD_LIBRARY_PATH": str(lib)},
    )


class ContainerRuntime(Runtime):
    summary = "the env's image, built from the lock (docker SDK)"
    takes_over = True
    stage_ahead = 2
    """A container's worker took 3.5-4.4 s to start and import torch on the H200 machine, and
    a FlexAttention one 4.6 s more for the compiler: longer than many jobs of the dev suite
    (1.1-1.6 s), so one staged worker alone was still starting when its gate opened."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.kind = name  # one class serves docker and podman

    def unavailable(self) -> str | None:
        try:
            Engine.connect(self.kind)
        except EngineError as exc:
            return str(exc)
        return None

    def ensure(self, env: str, options: RunOptions, progress: Progress) -> str | None:
        engine = Engine.connect(self.kind)
        if options.over is not None:
            done, plan = build_overlay(
                env,
                options.over,
                engine,
                options.config,
                options.locks_dir,
                on_line=progress.on_line,
            )
            if not done.built or plan is None:
                return None
            return f"built {done.tag} in {done.seconds:.0f} s over {options.over}: {plan.verified}"
        build = plan_build(env, options.locks_dir, options.substitute)
        if existing_image(engine, build.image) is not None:
            return None
        refuse_unmade_base(build, engine)  # before fetching gigabytes for nothing
        if build.recipe is not None and engine.image(build.recipe.tag) is None:
            reason = why_not_buildable(build.recipe)
            if reason is not None:  # a substitute asked for that cannot be made either
                raise EnvauditError(
                    f"the image of {env} needs the base {build.recipe.name}, which is not in the"
                    f" engine and cannot be made here: {reason}",
                    hint="build or load that base, or run over an imported stack (--over)",
                )
        fetch_env(env, options.locks_dir, options.config, progress.on_fetch, options.substitute)
        done = build_image(
            build, engine, options.config, on_step=progress.on_step, on_base_line=progress.on_line
        )
        return f"built {done.tag} in {done.seconds:.0f} s ({done.image.size / 1e9:.2f} GB)"

    def prepare(self, job: Job, options: RunOptions) -> tuple[Job, Launcher]:
        engine = Engine.connect(self.kind)
        build = plan_build(job.env_to_run(options.env), options.locks_dir, options.substitute)
        overlay: dict[str, Any] = {}
        if options.over is not None:
            tag = overlay_tag(build.image.env, build.image.closure_hash, options.over)
            image = engine.image(tag)
            if image is not None and not image_matches(image, build.image):
                raise EnvauditError(
                    f"image {tag} does not match the lock of {build.image.env}",
                    hint=f"remove it (`docker rmi {tag}`) and build it again with --over",
                )
            if image is not None:
                overlay = {
                    "overlay_on": options.over,
                    "base_manifest_sha256": image.labels.get(
                        f"{LABEL_PREFIX}.base-manifest-sha256"
                    ),
                    "verified": json.loads(
                        image.labels.get(f"{LABEL_PREFIX}.overlay-verified", "{}")
                    ),
                }
            over = f" --over {options.over}"
        else:
            image, tag = existing_image(engine, build.image), build.image.tag
            asked = build.image.substitute_base
            over = f" --substitute-base {asked}" if asked else ""
            if image is not None and image.labels.get(SUBSTITUTE_LABEL) != asked:
                raise EnvauditError(
                    f"image {tag} does not say it is over the base asked for"
                    f" ({asked or 'the declared base'}): its label {SUBSTITUTE_LABEL} is"
                    f" {image.labels.get(SUBSTITUTE_LABEL)!r}",
                    hint=f"remove it (`docker rmi {tag}`) and run"
                    f" `envaudit build --env {build.image.env}{over}`",
                )
        if image is None:
            raise EnvauditError(
                f"the image of {build.image.env} ({tag}) is not built",
                EXIT_USAGE,
                hint=f"run `envaudit build --env {build.image.env}{over}`",
            )
        declared = dict(build.image.env_vars)
        environment = {
            **declared,
            **job.device_env,
            "PYTHONPATH": HARNESS_MOUNT,
            "HOME": "/tmp/home",
            # The worker's uid has no passwd entry in the image: getpass.getuser() (torch
            # inductor's cache folders) reads these before asking the password database.
            "USER": "envaudit",
            "LOGNAME": "envaudit",
        }
        passing = GpuPassing("none")
        if job.device.startswith("cuda"):
            passing = gpu_passing(engine, require_gpu(job.context.device_id))
        environment.update(passing.environment)
        jit_folder = jit_cache_folder(build.image.env, build.image.closure_hash)
        jit_state = prepare_jit_cache(jit_folder, shared_with_other_users=True)
        environment.update(jit_environment(JIT_MOUNT, declared))
        job = job.with_context(
            jit_cache=jit_state,
            env=build.image.env,
            closure_hash=build.image.closure_hash,
            image_id=image.id,
            image_digest=image.digests[0] if image.digests else None,
            gpu_access=passing.mode if passing.mode != "none" else None,
            env_check=EnvCheck(
                matches=True,
                built_from_lock=not overlay,
                image_labels_match=True,
                substitute_base=build.image.substitute_base,
                substitute=build.image.substitute,
                **overlay,
            ),
        )
        launcher = ContainerLauncher(engine, image.id, job, environment, passing, jit_folder)
        launcher.check_readable()
        return job, launcher
