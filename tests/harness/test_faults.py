"""Solutions that cheat or break must fail with the right status; the run goes on.

Each solution below implements the toy definition of conftest.py (scale the valid rows of x)
and is run through `envaudit run --runtime host --device cpu` on both toy workloads.
"""

from __future__ import annotations

import json
import textwrap
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envaudit.cli import app
from tests.conftest import UUID_BLOB, UUID_RANDOM

CORRECT = """
import torch

def scaled(x, lengths, scale):
    mask = torch.arange(x.shape[1], device=x.device)[None, :] < lengths.long()[:, None]
    zero = torch.zeros((), dtype=x.dtype, device=x.device)
    return torch.where(mask[..., None], x * scale, zero)
"""

SOLUTIONS = {
    "correct": ("def run(x, lengths, scale):\n    return scaled(x, lengths, scale)", False),
    "correct_dps": (
        "def run(x, lengths, scale, out):\n    out.copy_(scaled(x, lengths, scale))",
        True,
    ),
    # (a) returns a cached output keyed by a weak input fingerprint (the shape)
    "cached_output": (
        """
        CACHE = {}
        def run(x, lengths, scale):
            key = tuple(x.shape)
            if key not in CACHE:
                CACHE[key] = scaled(x, lengths, scale)
            return CACHE[key].clone()
        """,
        False,
    ),
    # (b) writes to an input
    "mutates_input": (
        "def run(x, lengths, scale):\n    out = scaled(x, lengths, scale)\n    x.zero_()\n"
        "    return out",
        False,
    ),
    # (c) leaves part of the preallocated output unwritten
    "partial_write": (
        "def run(x, lengths, scale, out):\n    out[:, :1] = scaled(x, lengths, scale)[:, :1]",
        True,
    ),
    # (e) segfaults, but only on the 3-row workload
    "segfault": (
        """
        import ctypes
        def run(x, lengths, scale):
            if x.shape[0] == 3:
                ctypes.string_at(0)
            return scaled(x, lengths, scale)
        """,
        False,
    ),
    # (f) hangs, but only on the 3-row workload
    "hang": (
        """
        import time
        def run(x, lengths, scale):
            if x.shape[0] == 3:
                time.sleep(3600)
            return scaled(x, lengths, scale)
        """,
        False,
    ),
    # (g) raises
    "raises": ("def run(x, lengths, scale):\n    raise ValueError('no kernel for this')", False),
    # (h) returns NaN
    "returns_nan": (
        "def run(x, lengths, scale):\n    return scaled(x, lengths, scale) * float('nan')",
        False,
    ),
    # (i) wrong dtype, wrong shape
    "wrong_dtype": (
        "def run(x, lengths, scale):\n    return scaled(x, lengths, scale).double()",
        False,
    ),
    "wrong_shape": (
        "def run(x, lengths, scale):\n    return scaled(x, lengths, scale)[:, :-1]",
        False,
    ),
    "import_error": ("import not_a_module_anywhere\ndef run(x, lengths, scale):\n    pass", False),
    # (l) ends the import, or the call, with an exit; (m) returns a meta tensor
    "exits_at_import": ("import sys\nsys.exit(3)\ndef run(x, lengths, scale):\n    pass", False),
    "interrupts_the_call": (
        "def run(x, lengths, scale):\n    raise KeyboardInterrupt('stop')",
        False,
    ),
    "meta_output": (
        "def run(x, lengths, scale):\n    return torch.empty_like(x, device='meta')",
        False,
    ),
    # (k) right, but prints 20 MB on each of its first three calls: its log is capped
    "chatty": (
        """
        import sys
        CALLS = [0]
        def run(x, lengths, scale):
            CALLS[0] += 1
            if CALLS[0] <= 3:
                sys.stdout.write("x" * (20 << 20) + "\\n")
                sys.stdout.flush()
            return scaled(x, lengths, scale)
        """,
        False,
    ),
    # (j) answers right, then a thread of its own turns the answer to NaN 3 ms later
    "late_writer": (
        """
        import threading, time
        def _spoil(out):
            time.sleep(0.003)
            out.fill_(float('nan'))
        def run(x, lengths, scale):
            out = scaled(x, lengths, scale)
            threading.Thread(target=_spoil, args=(out,), daemon=True).start()
            return out
        """,
        False,
    ),
    "gpu_only": ("def run(x, lengths, scale):\n    return scaled(x, lengths, scale)", False),
}

# Stands for a JIT-compiling library: caches a "kernel" where Triton would (not a fault).
JIT_SOLUTION = {
    "jit_cache": (
        """
        import os, pathlib
        def run(x, lengths, scale):
            kernel = pathlib.Path(os.environ["TRITON_CACHE_DIR"]) / "kernel.bin"
            if not kernel.exists():
                switch = os.environ.get("FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED")
                kernel.write_text(f"{os.getpid()} {switch}")
            return scaled(x, lengths, scale)
        """,
        False,
    )
}

# solution -> expected status for (3-row blob workload, 2-row random workload)
EXPECTED = {
    "correct": ("PASSED", "PASSED"),
    "correct_dps": ("PASSED", "PASSED"),
    "cached_output": ("INCORRECT_NUMERICAL", "INCORRECT_NUMERICAL"),
    "mutates_input": ("INPUT_MUTATED", "INPUT_MUTATED"),
    "partial_write": ("INCORRECT_NUMERICAL", "INCORRECT_NUMERICAL"),
    "segfault": ("RUNTIME_ERROR", "PASSED"),
    "hang": ("TIMEOUT", "PASSED"),
    "raises": ("RUNTIME_ERROR", "RUNTIME_ERROR"),
    "returns_nan": ("INCORRECT_NUMERICAL", "INCORRECT_NUMERICAL"),
    "wrong_dtype": ("INCORRECT_DTYPE", "INCORRECT_DTYPE"),
    "wrong_shape": ("INCORRECT_SHAPE", "INCORRECT_SHAPE"),
    "import_error": ("COMPILE_ERROR", "COMPILE_ERROR"),
    "late_writer": ("INCORRECT_NUMERICAL", "INCORRECT_NUMERICAL"),
    "chatty": ("PASSED", "PASSED"),
    "exits_at_import": ("COMPILE_ERROR", "COMPILE_ERROR"),
    "interrupts_the_call": ("RUNTIME_ERROR", "RUNTIME_ERROR"),
    "meta_output": ("RUNTIME_ERROR", "RUNTIME_ERROR"),
    "gpu_only": ("UNSUPPORTED_DEVICE", "UNSUPPORTED_DEVICE"),
}

HANG_TIMEOUT_S = 5
"""--timeout for runs of `hang`: it sleeps an hour, so any limit ends it, while its other
workload (0.07 s on the CPU) passes well within it; every other solution keeps 20 s. Each
second of it is waited out once per run that holds `hang`."""

MESSAGES = {
    "cached_output": "a timed call (eager)",
    "segfault": "SIGSEGV",
    "raises": "no kernel for this",
    "partial_write": "elements within tolerance",
    "mutates_input": "input(s) x",
    "late_writer": "still being written after the call returned",
    "exits_at_import": "SystemExit: 3",
    "interrupts_the_call": "KeyboardInterrupt: stop",
    "meta_output": "output 0 is a tensor on meta",
}


def write_solution(
    root: Path, name: str, solutions: dict[str, tuple[str, bool]] = SOLUTIONS
) -> None:
    body, dps = solutions[name]
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "main.py").write_text(CORRECT + "\n" + textwrap.dedent(body).strip() + "\n")
    spec = {
        "language": "python",
        "target_hardware": ["cuda"] if name == "gpu_only" else ["cpu", "cuda"],
        "entry_point": "main.py::run",
        "destination_passing_style": dps,
    }
    solution = {
        "name": name,
        "definition": "toy_scale",
        "author": "tests",
        "spec": spec,
        "sources": [{"path": "main.py"}],
        "env": "torch-cpu",
    }
    (folder / "solution.json").write_text(json.dumps(solution))


@pytest.fixture(scope="module")
def fault_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, dict]]:
    """Run every solution once; return solution -> workload uuid -> result line."""
    from tests.conftest import write_toy_root

    base = tmp_path_factory.mktemp("faults")
    root = write_toy_root(base / "data")
    solutions = base / "solutions"
    for name in SOLUTIONS:
        write_solution(solutions, name)
    report = base / "results.jsonl"
    began = time.time()
    exits = {}
    for name in SOLUTIONS:
        argv = ["run", "--solution", name, "--device", "cpu", "--data-root", str(root)]
        argv += ["--solutions-root", str(solutions), "--report", str(report)]
        argv += ["--timeout", str(HANG_TIMEOUT_S if name == "hang" else 20)]
        argv += ["--reference-cache", str(base / "refcache")]
        exits[name] = CliRunner().invoke(app, argv).exit_code
    lines: dict[str, dict[str, dict]] = {}
    for raw in report.read_text().splitlines():
        line = json.loads(raw)
        lines.setdefault(line["solution"], {})[line["workload"]["uuid"]] = line
        line["_exit"] = exits[line["solution"]]
        line["_began"] = began
        line["_report"] = str(report)
    return lines


@pytest.mark.parametrize("name", list(EXPECTED))
def test_each_solution_gets_the_right_status(fault_run: dict, name: str) -> None:
    got = fault_run[name]
    assert (got[UUID_BLOB]["status"], got[UUID_RANDOM]["status"]) == EXPECTED[name], (
        got[UUID_BLOB].get("message"),
        got[UUID_RANDOM].get("message"),
    )
    want_exit = 0 if EXPECTED[name] == ("PASSED", "PASSED") else 1
    assert got[UUID_BLOB]["_exit"] == want_exit
    if name in MESSAGES:
        assert MESSAGES[name] in got[UUID_BLOB]["message"]


def test_passing_lines_carry_timing_and_record(fault_run: dict) -> None:
    line = fault_run["correct"][UUID_BLOB]
    eager = line["timing"]["eager"]
    assert eager["mode"] == "wall_clock" and eager["iterations"] >= 3
    assert eager["min_ms"] <= eager["median_ms"] <= eager["max_ms"]
    assert line["achieved"]["eager_tflops"] > 0 and line["achieved"]["eager_gbps"] > 0
    env = line["environment"]
    assert env["device_type"] == "cpu" and len(env["distributions_fingerprint"]) == 64
    assert len(env["harness_hash"]) == 64 and len(line["solution_hash"]) == 64
    assert line["context"]["runtime"] == "host" and line["context"]["env"] == "torch-cpu"
    assert line["recheck"]["outputs"][0]["status"] == "PASSED"
    assert line["seed"] == 7


def test_lines_carry_the_phase_profile(fault_run: dict) -> None:
    """Each line says where its wall time went (benchmarks/audit_profile.py adds these up): the
    worker's first line also its start and the solution's load, measured by the supervisor."""
    lines = list(fault_run["correct"].values())
    first = [line for line in lines if "worker_start" in line["phases_s"]]
    assert len(first) == 1 and first[0]["phases_s"]["worker_start"] > 0.1
    startup = first[0]["phases_s"]
    # forked from a fork server, the worker paid no imports of its own
    assert startup["solution_load"] >= 0 and startup["worker_imports"] >= 0
    parts = ("worker_imports", "worker_cuda_init", "worker_env_record")
    assert sum(startup[p] for p in parts) < startup["worker_start"]
    for line in lines:
        phases = line["phases_s"]
        assert {"inputs", "reference", "validation", "eager", "recheck"} <= set(phases)
        inside = sum(
            v for k, v in phases.items() if not k.startswith("worker_") and k != "solution_load"
        )
        assert inside <= line["wall_s"] + 0.01
        eager = line["timing"]["eager"]
        # judged timing's own costs are phases apart; the measurement holds those of its batches
        inside = sum(
            phases[f"eager_{part}"] for part in ("fresh_draws", "slot_copies", "handshakes")
        )
        assert phases["eager_judge_setup"] > 0 and phases["timed_check"] > 0
        assert 0 < eager["measure_wall_ms"] <= (phases["eager"] + inside) * 1e3
        assert eager["warmup_wall_ms"] > 0
    assert not fault_run["correct"][UUID_BLOB]["reference_cached"]
    assert fault_run["correct_dps"][UUID_BLOB]["reference_cached"]


def test_host_lines_record_the_check_against_the_declared_lock(fault_run: dict) -> None:
    """Every host line, crash lines included, says whether this interpreter is the declared
    environment; the verdict is the one `verify-env` gives for the same lock."""
    from tests.conftest import REPO

    lock = json.loads((REPO / "locks" / "torch-cpu" / "lock.json").read_text())
    verdict = CliRunner().invoke(app, ["verify-env", "torch-cpu"]).exit_code == 0
    for name in ("correct", "segfault", "hang"):
        context = fault_run[name][UUID_BLOB]["context"]
        check = context["env_check"]
        assert context["closure_hash"] == lock["closure_hash"]
        assert "lock_closure_hash" not in check  # one closure hash per line (schema version 2)
        assert check["matches"] is verdict
        assert check["counts"]["locked"] == len(lock["packages"])


def test_crash_line_carries_log_tail(fault_run: dict) -> None:
    line = fault_run["segfault"][UUID_BLOB]
    assert "during this workload" in line["message"]
    assert "Segmentation fault" in line["log"] and "main.py" in line["log"]


def test_a_worker_log_is_capped_with_a_note(fault_run: dict) -> None:
    from envaudit.runtime.supervision.supervisor import LOG_CAP_BYTES

    report = Path(fault_run["chatty"][UUID_BLOB]["_report"])
    [log, *more] = sorted((report.parent / "results.logs" / "chatty").glob("*.log"))
    for path in [log, *more]:
        assert path.stat().st_size <= LOG_CAP_BYTES + 4096
    text = b"".join(p.read_bytes() for p in [log, *more])
    assert b"bytes of the worker's output were cut here" in text


def test_no_copy_of_a_solution_s_sources_is_left_behind(fault_run: dict) -> None:
    """Each worker imports its solution from a copy in its job folder, removed with the folder
    however the worker ended (a segfault and a timeout run no atexit hook)."""
    import tempfile

    began = min(line["_began"] for lines in fault_run.values() for line in lines.values())
    left = [
        path
        for name in ("segfault", "hang", "correct")
        for path in Path(tempfile.gettempdir()).glob(f"envaudit-{name}-*")
        if path.stat().st_mtime >= began
    ]
    assert left == []


def test_an_output_that_is_a_view_of_an_input_is_not_checked_after_the_measurement() -> None:
    """The harness writes inputs later (timed calls, the re-check's draw): an output that
    shares an input's memory changes with them, which says nothing of the call; the others
    keep their index."""
    import torch

    from envaudit.harness.evaluate import _own_outputs

    x, other = torch.zeros(4), torch.ones(3)
    produced = [x.view(2, 2), other]
    live, early = _own_outputs(produced, [t.clone() for t in produced], {"x": x})
    assert live[0] is None and early[0] is None
    assert live[1] is other and torch.equal(early[1], other)
