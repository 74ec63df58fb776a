"""Workers forked from a fork server (envaudit.harness.forkserver) are as isolated as workers
started as fresh interpreters: one solution's changes to the process never reach the next job.

Two solutions of the toy definition in one `envaudit audit` on the CPU: the first marks the
torch module it was given and leaves a thread running; the second fails if it sees either. With
the fork server (the default) and without it (ENVAUDIT_FORKSERVER=0), both pass."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import torch

from envaudit.harness.forkserver import PRELOAD_MODE_ENV, wants_preload
from envaudit.runtime.timeline import TIMELINE_ENV
from envaudit.schema.progress import JOB_FILE, fork_exit_file
from tests.conftest import REPO, write_toy_root
from tests.harness.test_faults import write_solution

GPU = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA build and GPU")

SOLUTIONS = {
    "a_marks": (
        """
        import threading
        import time
        def run(x, lengths, scale):
            torch._envaudit_marked_by = "a_marks"
            threading.Thread(target=time.sleep, args=(60,), name="left-by-a", daemon=True).start()
            return scaled(x, lengths, scale)
        """,
        False,
    ),
    "b_checks": (
        """
        import threading
        def run(x, lengths, scale):
            if hasattr(torch, "_envaudit_marked_by"):
                raise RuntimeError("torch was marked by " + torch._envaudit_marked_by)
            if any(t.name == "left-by-a" for t in threading.enumerate()):
                raise RuntimeError("a thread of another solution is running here")
            return scaled(x, lengths, scale)
        """,
        False,
    ),
}


def audit_two_solutions(
    tmp_path: Path,
    sources: dict[str, tuple[str, bool]],
    env: dict[str, str] | None = None,
    device: tuple[str, ...] = ("--device", "cpu"),
) -> tuple[subprocess.CompletedProcess[str], list[dict]]:
    """Write `sources` as solutions of the toy definition, audit all of them on `device` (by
    default the CPU; host runtime) and return the finished command and its result lines."""
    root = write_toy_root(tmp_path / "data")
    solutions = tmp_path / "solutions"
    for name in sources:
        write_solution(solutions, name, sources)
    out = tmp_path / "audit"
    argv = [sys.executable, "-m", "envaudit", "audit", *device, "--runtime", "host"]
    argv += ["--data-root", str(root), "--solutions-root", str(solutions), "--out", str(out)]
    argv += ["--suite", "all", "--timeout", "60"]
    env = {**os.environ, **(env or {})}
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    report = out / "results.jsonl"
    lines = [json.loads(raw) for raw in report.read_text().splitlines()] if report.is_file() else []
    return done, lines


def assert_every_solution_passed(
    tmp_path: Path,
    sources: dict[str, tuple[str, bool]],
    env: dict[str, str] | None = None,
    device: tuple[str, ...] = ("--device", "cpu"),
) -> None:
    done, lines = audit_two_solutions(tmp_path, sources, env, device)
    by_solution = {line["solution"]: (line["status"], line.get("message")) for line in lines}
    assert {k: v[0] for k, v in by_solution.items()} == dict.fromkeys(sources, "PASSED"), (
        by_solution,
        done.stdout + done.stderr,
    )


@pytest.mark.parametrize("forkserver", ["1", "0"])
def test_each_job_gets_a_clean_process(tmp_path: Path, forkserver: str) -> None:
    done, lines = audit_two_solutions(tmp_path, SOLUTIONS, {"ENVAUDIT_FORKSERVER": forkserver})
    assert done.returncode == 0, done.stdout + done.stderr
    statuses = {(line["solution"], line["status"]) for line in lines}
    assert statuses == {("a_marks", "PASSED"), ("b_checks", "PASSED")}, [
        line.get("message") for line in lines
    ]
    forked = [line for line in lines if "worker_start" in line["phases_s"]]
    assert len(forked) == 2  # one worker per job
    imports = [line["phases_s"]["worker_imports"] for line in forked]
    if forkserver == "1":
        assert imports == [0.0, 0.0]  # imported once, by the server
    else:
        assert min(imports) > 0.1


SERVER_FOLDER = """
import os
from pathlib import Path
def server_pid():
    # the worker's judge forked this process (harness/judge.py); the server forked the judge
    stat = Path(f"/proc/{os.getppid()}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])
def server_folder():
    # the socket is the last argument of the fork server that forked this worker
    args = Path(f"/proc/{os.getppid()}/cmdline").read_bytes().split(b"\\0")
    return Path(os.fsdecode([a for a in args if a][-1])).parent
"""

PRELOAD_SOLUTIONS = {
    "a_first": (
        SERVER_FOLDER
        + """
import sys
import time
def run(x, lengths, scale):
    # spelt so that these sources do not name the compiler: its worker would import it
    if "torch." + "_dynamo" in sys.modules:
        raise RuntimeError("the first job's worker waited for the preload")
    folder = server_folder()
    (folder / "first-parent").write_text(str(server_pid()))
    deadline = time.monotonic() + 120
    while not (folder / "preloaded").exists():
        if time.monotonic() > deadline:
            raise RuntimeError("the preload did not finish within 120 s")
        time.sleep(0.05)
    return scaled(x, lengths, scale)
""",
        False,
    ),
    "b_second": (
        SERVER_FOLDER
        + """
import sys
def run(x, lengths, scale):
    if "torch._dynamo" not in sys.modules:
        raise RuntimeError("torch._dynamo was not imported before this solution")
    first = (server_folder() / "first-parent").read_text()
    if str(server_pid()) == first:
        raise RuntimeError("forked by the first server, not by the preloaded one")
    return scaled(x, lengths, scale)
""",
        False,
    ),
}


def _marks(timeline: Path) -> list[tuple[str, str, float]]:
    lines = [json.loads(text) for text in timeline.read_text().splitlines()]
    return [(m["event"], m["job"], m["t"]) for m in lines]


def _first(marks: list[tuple[str, str, float]], event: str) -> float:
    return next(t for name, _, t in marks if name == event)


def test_the_fork_server_starts_while_the_audit_plans(tmp_path: Path) -> None:
    """An audit has its fork server started (on a thread) before it takes its first job
    (warm_workers), and `envaudit run` before it launches its worker (the host runtime's
    environment check runs beside the server's start); one server serves every job."""
    timeline = tmp_path / "timeline.jsonl"
    env = {TIMELINE_ENV: str(timeline)}
    assert_every_solution_passed(tmp_path / "audit", SOLUTIONS, env)
    marks = _marks(timeline)
    assert [name for name, _, _ in marks].count("fork_server_start") == 1, marks
    assert _first(marks, "fork_server_warm") < _first(marks, "job_begin"), marks
    assert _first(marks, "fork_server_ready") < _first(marks, "result"), marks

    timeline.unlink()
    root = write_toy_root(tmp_path / "run-data")
    write_solution(tmp_path / "run-solutions", "a_marks", SOLUTIONS)
    argv = [sys.executable, "-m", "envaudit", "run", "--solution", "a_marks", "--device", "cpu"]
    argv += ["--runtime", "host", "--data-root", str(root)]
    argv += ["--solutions-root", str(tmp_path / "run-solutions")]
    argv += ["--report", str(tmp_path / "run.jsonl")]
    done = subprocess.run(
        argv, cwd=REPO, env={**os.environ, **env}, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr
    marks = _marks(timeline)
    assert _first(marks, "fork_server_warm") < _first(marks, "worker_launch"), marks
    assert [name for name, _, _ in marks].count("fork_server_start") == 1, marks

    timeline.unlink()
    assert_every_solution_passed(tmp_path / "fresh", SOLUTIONS, {**env, "ENVAUDIT_FORKSERVER": "0"})
    assert not {"fork_server_warm", "fork_server_start"} & {m[0] for m in _marks(timeline)}


def test_workers_after_the_preload_are_forked_with_dynamo_imported(tmp_path: Path) -> None:
    """The server forks a second server after its first job, which imports torch._dynamo
    (envaudit.harness.preload) and then serves the later jobs: the first job's worker does not wait
    for it (no torch._dynamo there), and a job that arrives once it is ready is forked by it,
    with torch._dynamo imported, as FlexAttention and torch.compile need. The first solution
    holds its job until the preloaded server is ready, so the order is certain."""
    assert_every_solution_passed(tmp_path, PRELOAD_SOLUTIONS, {PRELOAD_MODE_ENV: "beside"})


@pytest.mark.parametrize(
    "preload",
    [
        pytest.param(("os", "abort"), id="crashes"),
        pytest.param(("torch._C", "_cuda_getDeviceCount"), id="poisons-forks", marks=GPU),
    ],
)
def test_a_preload_that_fails_leaves_the_first_server_serving(
    tmp_path: Path, preload: tuple[str, str]
) -> None:
    """If the preloaded server dies while importing (PRELOAD aborts it), or its preload asked
    CUDA's runtime something (a device count), after which torch refuses CUDA in every forked
    child, the first server, which never imported PRELOAD, goes on forking every job itself."""
    socket_path = tmp_path / "socket"
    start = (
        "import sys; from pathlib import Path; import envaudit.harness.forkserver as server;"
        f" server.preload.PRELOAD = ({(*preload, 'compiler')!r},);"
        " sys.exit(server.main(Path(sys.argv[1])))"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", start, str(socket_path)],
        cwd=REPO,
        env={**os.environ, PRELOAD_MODE_ENV: "beside"},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert process.stdout is not None and process.stdout.readline().strip() == b"ready"
        for n in range(3):
            log = tmp_path / f"worker-{n}.log"
            request = {"job_dir": str(tmp_path / "no-such-job"), "log": str(log), "env": {}}
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
                conn.settimeout(60)
                conn.connect(str(socket_path))
                conn.sendall((json.dumps(request) + "\n").encode())
                reply = json.loads(conn.makefile("rb").readline())
                exit_file = fork_exit_file(socket_path, reply["pid"])
                deadline = time.monotonic() + 60
                while not exit_file.exists() and time.monotonic() < deadline:
                    time.sleep(0.05)  # the connection stays open: closing it kills the worker
            assert exit_file.read_text() == "1", log.read_text()  # the job folder is missing
            time.sleep(0.5 if n == 0 else 0)  # time for the preloaded server to die
        assert not (socket_path.parent / "preloaded").exists()
    finally:
        assert process.stdin is not None
        process.stdin.close()
        process.wait(timeout=30)


WAITING_SOLUTIONS = {
    "a_quick": ("def run(x, lengths, scale):\n    return scaled(x, lengths, scale)\n", False),
    "b_compiles": (
        """
        import sys
        def run(x, lengths, scale):  # a torch.compile solution, as far as the server can tell
            if "torch._dynamo" not in sys.modules:
                raise RuntimeError("forked before the preload was done")
            return scaled(x, lengths, scale)
        """,
        False,
    ),
}


@pytest.mark.parametrize("mode", ["beside", "on-demand"])
def test_a_job_that_wants_the_preload_waits_for_it(tmp_path: Path, mode: str) -> None:
    """The second job arrives right after a quick first one, while the preloaded server is still
    importing torch._dynamo (seconds on this machine), or, on demand, before it has started:
    its source mentions torch.compile, so it is handed to that server and forked once the
    preload is done."""
    assert_every_solution_passed(tmp_path, WAITING_SOLUTIONS, {PRELOAD_MODE_ENV: mode})


INDUCTOR_SOLUTIONS = {
    "a_quick": WAITING_SOLUTIONS["a_quick"],
    "b_inductor": (
        """
        import os
        import sys
        PRELOADED = "torch._inductor.compile_fx" in sys.modules  # before this file imports it
        import torch._inductor.config as config
        from torch._inductor.codecache import FxGraphCache
        from torch._inductor.runtime import benchmarking
        from torch._inductor.runtime.cache_dir_utils import cache_dir
        def run(x, lengths, scale):  # mentions torch.compile: forked by the preloaded server
            if not PRELOADED:
                raise RuntimeError("Inductor's compiler was not preloaded")
            mine = os.environ["TORCHINDUCTOR_CACHE_DIR"]
            if "/jit/" not in mine or cache_dir() != mine:
                raise RuntimeError(f"Inductor caches in {cache_dir()}, the job's folder is {mine}")
            if not FxGraphCache._get_tmp_dir().startswith(mine):
                raise RuntimeError(f"FX graphs would go to {FxGraphCache._get_tmp_dir()}")
            seen = getattr(benchmarking, "use_experimental_benchmarker", None)
            fresh = config.use_experimental_benchmarker and torch.cuda.is_available()
            if seen is not None and seen != fresh:  # set from is_available() at import
                raise RuntimeError(f"Inductor's import saw CUDA as {seen}, this worker: {fresh}")
            if x.is_cuda:
                torch.ones(1, device=x.device).add_(1).item()  # CUDA works after the preload
            return scaled(x, lengths, scale)
        """,
        False,
    ),
}


def gpu_device() -> tuple[str, ...]:
    raw = str(torch.cuda.get_device_properties(0).uuid)
    return ("--gpu", raw if raw.startswith("GPU-") else f"GPU-{raw}")


@pytest.mark.parametrize("on", ["cpu", pytest.param("gpu", marks=GPU)])
def test_a_preloaded_inductor_is_what_a_fresh_worker_imports(tmp_path: Path, on: str) -> None:
    """Inductor's compiler, imported by the preloaded server before any job: a worker forked
    with it sends what it compiles to its own job's JIT folder (TORCHINDUCTOR_CACHE_DIR, set per
    job), can use CUDA on a GPU, and has the constant Inductor sets from
    torch.cuda.is_available() as the worker itself would compute it (a CPU job's GPUs are
    hidden from its server too)."""
    env = {PRELOAD_MODE_ENV: "on-demand", "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "server")}
    device = gpu_device() if on == "gpu" else ("--device", "cpu")
    assert_every_solution_passed(tmp_path, INDUCTOR_SOLUTIONS, env, device)


ALONE_SOLUTIONS = {
    "a_alone": (
        """
        import os
        import time
        from pathlib import Path
        def run(x, lengths, scale):
            time.sleep(1.0)  # the preloaded server, beside jobs, is forked right after this one
            # this process's parent is its worker's judge, which the server forked
            judge = os.getppid()
            stat = Path(f"/proc/{judge}/stat").read_text()
            server, me = int(stat.rsplit(")", 1)[1].split()[1]), judge
            for status in Path("/proc").glob("[0-9]*/status"):
                try:
                    fields = dict(
                        line.split(":\t", 1) for line in status.read_text().splitlines()
                    )
                except (OSError, ValueError):
                    continue
                if int(fields.get("PPid", "0")) == server and int(fields["Pid"]) != me:
                    raise RuntimeError("the server forked something beside this job")
            return scaled(x, lengths, scale)
        """,
        False,
    ),
    "b_compiles": WAITING_SOLUTIONS["b_compiles"],
}


def test_on_demand_nothing_is_preloaded_beside_a_job_that_does_not_want_it(
    tmp_path: Path,
) -> None:
    """ENVAUDIT_PRELOAD=on-demand (the default below PRELOAD_BESIDE_MIN_CPUS): the first job has
    the machine to itself; the preload starts when the job that wants it arrives."""
    assert_every_solution_passed(tmp_path, ALONE_SOLUTIONS, {PRELOAD_MODE_ENV: "on-demand"})


@pytest.mark.parametrize(
    ("source", "wanted"),
    [
        ("from torch.nn.attention.flex_attention import flex_attention\n", True),
        ("kernel = torch.compile(body)\n", True),
        ("import triton\n", False),
        (None, False),  # no job file: not a reason to wait
    ],
)
def test_which_jobs_want_the_preload(tmp_path: Path, source: str | None, wanted: bool) -> None:
    solution = tmp_path / "solution"
    solution.mkdir()
    (solution / "main.py").write_text(source or "")
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    if source is not None:
        job = {"solution_file": str(solution / "solution.json")}
        (job_dir / JOB_FILE).write_text(json.dumps(job))
    line = json.dumps({"job_dir": str(job_dir), "log": "", "env": {}}).encode()
    assert wants_preload(line) is wanted


def _bytecode_of(folder: Path, under: Path) -> list[Path]:
    """The bytecode files a pycache_prefix `folder` holds for sources under `under`."""
    mirrored = folder / under.resolve().relative_to("/")
    return sorted(mirrored.rglob("*.pyc")) if mirrored.is_dir() else []


def _solutions_bytecode(folder: Path) -> list[Path]:
    """Bytecode of the solutions' own modules in a pycache_prefix `folder`: a worker imports
    them from a private copy, `envaudit-<solution>-*` in the temporary folder
    (harness/solution.py), which is gone once it exits; the folder would mirror it."""
    mirrored = folder / Path(tempfile.gettempdir()).resolve().relative_to("/")
    return [path for copy in sorted(mirrored.glob("envaudit-*")) for path in copy.rglob("*.pyc")]


@pytest.mark.parametrize("forkserver", ["1", "0"])
def test_workers_over_a_stack_without_bytecode_keep_their_own(
    tmp_path: Path, forkserver: str
) -> None:
    """An interpreter that finds no bytecode for torch (here: PYTHONPYCACHEPREFIX names an empty
    folder, with PYTHONDONTWRITEBYTECODE, as on a machine whose stack has none) gets a fork
    server, or with ENVAUDIT_FORKSERVER=0 workers started as fresh interpreters, that write their
    imports' bytecode into envaudit's cache and read it from there in the next audit; no worker
    writes any there for a solution's own module."""
    nowhere = tmp_path / "nowhere"
    nowhere.mkdir()
    cache = tmp_path / "cache"
    env = {
        "PYTHONPYCACHEPREFIX": str(nowhere),
        "PYTHONDONTWRITEBYTECODE": "1",
        "ENVAUDIT_CACHE": str(cache),
        "ENVAUDIT_FORKSERVER": forkserver,
    }
    assert_every_solution_passed(tmp_path / "first", SOLUTIONS, env)
    folder = cache / "bytecode"
    torch_bytecode = _bytecode_of(folder, Path(torch.__file__).parent)
    assert len(torch_bytecode) > 300, len(torch_bytecode)
    assert not list(nowhere.rglob("*.pyc"))
    assert not _solutions_bytecode(folder), "a worker wrote a solution's bytecode"
    written = {path: path.stat().st_mtime_ns for path in folder.rglob("*.pyc")}
    assert_every_solution_passed(tmp_path / "second", SOLUTIONS, env)
    again = {path: path.stat().st_mtime_ns for path in written}
    assert again == written  # read, not compiled again
    assert not _solutions_bytecode(folder)


def test_a_server_over_a_stack_with_bytecode_leaves_it_alone(tmp_path: Path) -> None:
    if not os.path.exists(importlib.util.cache_from_source(torch.__file__)):
        pytest.skip("this interpreter's torch has no bytecode (the GPU machine's has none)")
    cache = tmp_path / "cache"
    assert_every_solution_passed(tmp_path, SOLUTIONS, {"ENVAUDIT_CACHE": str(cache)})
    assert not (cache / "bytecode").exists()
