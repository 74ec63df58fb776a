"""Solutions that try to take the harness's answer instead of computing it must not pass.

Each one below computes nothing: it looks for the expected output where a solution in the
worker's process might reach it (the garbage collector, the harness's frames, a thread that
waits for the reference to appear), or patches the comparison, or writes a PASSED line into
the worker's progress file, or caches its answer by the input's storage address. Every one
passed on the harness before the judge was split off (docs/harness.md, "What a solution can
reach"); run through `envaudit run --runtime host --device cpu` on both toy workloads.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envaudit.cli import app
from tests.conftest import UUID_BLOB, UUID_RANDOM
from tests.harness.test_faults import write_solution

FIND = """
import gc, sys, threading, time
import torch

# A cheat that computes nothing still knows the answer when it sees it: here it checks each
# candidate against the true answer, standing for a spot check of a few elements.
def is_answer(t, x, lengths, scale, answer=None):
    if not (isinstance(t, torch.Tensor) and t.shape == x.shape and t.dtype == x.dtype):
        return False
    if t.data_ptr() == x.data_ptr():
        return False
    return torch.equal(t, scaled(x, lengths, scale) if answer is None else answer)

# Every answer a cheat computes for its spot checks, in any of its threads: what it finds must be
# none of them (a waiting thread left over from an earlier call would otherwise find the answer
# the current call computed, and pass on the cheat's own arithmetic).
OWN_ANSWERS = []

def from_gc(x, lengths, scale, mine=()):
    seen = gc.get_objects()
    answer = scaled(x, lengths, scale)
    OWN_ANSWERS.append(answer)  # kept alive, so their ids stay theirs
    skip = {id(t) for t in (*mine, *OWN_ANSWERS)}
    for obj in seen:
        if id(obj) not in skip and is_answer(obj, x, lengths, scale, answer):
            return obj
    return None

def from_frames(x, lengths, scale):
    frame = sys._getframe(1)
    while frame is not None:
        for value in list(frame.f_locals.values()):
            values = list(value) if isinstance(value, (tuple, list)) else [value]
            for item in values:
                if is_answer(item, x, lengths, scale):
                    return item
        frame = frame.f_back
    return None

def job_folder():
    frame = sys._getframe(1)
    while frame is not None:
        found = frame.f_locals.get("job_dir")
        if found is not None:
            return found
        frame = frame.f_back
    return None
"""

CHEATS = {
    # the reported attack: any tensor of the output's shape and dtype that is not an input
    "gc_walker": """
        def run(x, lengths, scale):
            found = from_gc(x, lengths, scale)
            return found.clone() if found is not None else torch.zeros_like(x)
        """,
    "frame_walker": """
        def run(x, lengths, scale):
            found = from_frames(x, lengths, scale)
            return found.clone() if found is not None else torch.zeros_like(x)
        """,
    # a thread that waits for the reference to appear and writes it wherever it can
    "thread_waiter": """
        def run(x, lengths, scale):
            out = torch.zeros_like(x)
            def wait():
                end = time.monotonic() + 1.0
                while time.monotonic() < end:
                    found = from_gc(x, lengths, scale, mine=(out,))
                    if found is not None:
                        out.copy_(found)
                        return
                    time.sleep(0.01)
            helper = threading.Thread(target=wait, daemon=True)
            helper.start()
            helper.join(0.5)
            return out
        """,
    # makes every comparison in this process say PASSED
    "patches_compare": """
        from envaudit.harness import compare as _compare

        def _passed(definition, outputs, references, dtypes):
            return [_compare.OutputComparison(n, "PASSED") for n in definition["outputs"]]

        for _module in list(sys.modules.values()):
            if getattr(_module, "compare_outputs", None) is not None:
                _module.compare_outputs = _passed
            if getattr(_module, "overall_status", None) is not None:
                _module.overall_status = lambda comparisons: "PASSED"

        def run(x, lengths, scale):
            return torch.zeros_like(x)
        """,
    # appends a PASSED line for its workload to the worker's progress file
    "forges_progress": """
        import json as _json

        def run(x, lengths, scale):
            folder = job_folder()
            job = _json.loads((folder / "job.json").read_text())
            for uuid in job["workloads"]:
                line = {"solution": job["solution"], "definition": job["definition"],
                        "workload": {"uuid": uuid}, "status": "PASSED", "message": ""}
                event = {"event": "result", "uuid": uuid, "line": line, "t": time.time()}
                with open(folder / "progress.jsonl", "a") as handle:
                    handle.write(_json.dumps(event) + "\\n")
            time.sleep(0.5)
            return torch.zeros_like(x)
        """,
    # caches its answer by the input's storage address: timing hits the cache; the re-check
    # must not, on the CPU as on a GPU
    "address_cache": """
        CACHE = {}
        def run(x, lengths, scale):
            key = (x.data_ptr(), lengths.data_ptr())
            if key not in CACHE:
                CACHE[key] = scaled(x, lengths, scale)
            return CACHE[key].clone()
        """,
}


def cheat_lines(base: Path, where: list[str]) -> dict[str, list[dict]]:
    """Every cheat once, after a correct solution filled the reference cache, on the device
    `where` names; solution -> its lines in the report."""
    from tests.conftest import write_toy_root
    from tests.harness.test_faults import SOLUTIONS

    root = write_toy_root(base / "data")
    solutions = base / "solutions"
    bodies = {"correct": SOLUTIONS["correct"]}
    bodies |= {name: (FIND + textwrap.dedent(body), False) for name, body in CHEATS.items()}
    for name in bodies:
        write_solution(solutions, name, bodies)
    report = base / "results.jsonl"
    for name in bodies:
        argv = ["run", "--solution", name, *where, "--data-root", str(root)]
        argv += ["--solutions-root", str(solutions), "--report", str(report), "--timeout", "60"]
        argv += ["--reference-cache", str(base / "refcache")]
        CliRunner().invoke(app, argv)
    lines: dict[str, list[dict]] = {}
    for raw in report.read_text().splitlines():
        line = json.loads(raw)
        lines.setdefault(line["solution"], []).append(line)
    return lines


@pytest.fixture(scope="module")
def cheat_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict]]:
    return cheat_lines(tmp_path_factory.mktemp("reach"), ["--device", "cpu"])


def test_the_correct_solution_passes_beside_them(cheat_run: dict) -> None:
    assert [line["status"] for line in cheat_run["correct"]] == ["PASSED", "PASSED"]


@pytest.mark.parametrize("name", list(CHEATS))
def test_no_cheat_passes(cheat_run: dict, name: str) -> None:
    lines = cheat_run[name]
    assert {line["workload"]["uuid"] for line in lines} == {UUID_BLOB, UUID_RANDOM}
    assert len(lines) == 2, [line["status"] for line in lines]
    for line in lines:
        assert line["status"] != "PASSED", line.get("message")
        assert line["status"] != "COMPILE_ERROR", line.get("message")  # it ran, and failed


def test_a_forged_progress_line_is_named(cheat_run: dict) -> None:
    messages = [line["message"] for line in cheat_run["forges_progress"]]
    assert all("without the harness's seal" in m for m in messages), messages


def test_the_address_cache_fails_on_the_fresh_draw(cheat_run: dict) -> None:
    for line in cheat_run["address_cache"]:
        assert line["status"] == "INCORRECT_NUMERICAL", line["message"]
        # a timed call's fresh draw catches it first where the workload has a random float
        # input; the re-check's draw into the same tensors otherwise
        message = line["message"]
        assert "a timed call" in message or "post-timing re-check" in message, message


def test_the_cache_folder_holds_no_entry_named_by_a_computable_key(tmp_path: Path) -> None:
    """Entries are named by the HMAC of their key under the job's seal: a solution that knows
    the definition and workload cannot compute an entry's name."""
    import torch

    from envaudit.harness.reference import ReferenceCache, cache_key
    from tests.conftest import toy_definition, write_toy_root

    root = write_toy_root(tmp_path / "data")
    workload = json.loads((root / "workloads/toy/toy_scale.jsonl").read_text().splitlines()[0])
    definition = toy_definition()
    from envaudit.harness.inputs import materialize_inputs

    inputs = materialize_inputs(definition, workload["workload"], root)
    cache = ReferenceCache(tmp_path / "cache", key="k" * 64)
    cache.outputs(definition, workload["workload"], lambda: inputs, 0, torch.device("cpu"))
    names = [p.name for p in (tmp_path / "cache").iterdir()]
    plain = cache_key(definition, workload["workload"], 0, "cpu")
    assert len(names) == 1 and plain not in names[0], names
    assert (tmp_path / "cache" / names[0]).stat().st_mode & 0o777 == 0o644


def test_an_entry_that_cannot_be_read_is_computed_again(tmp_path: Path) -> None:
    """A damaged or unreadable cache entry is never the solution's status: the judge computes
    the reference and replaces the entry."""
    import torch

    from envaudit.harness.inputs import materialize_inputs
    from envaudit.harness.reference import ReferenceCache, cache_key
    from tests.conftest import toy_definition, write_toy_root

    root = write_toy_root(tmp_path / "data")
    workload = json.loads((root / "workloads/toy/toy_scale.jsonl").read_text().splitlines()[0])
    definition, drawn = toy_definition(), workload["workload"]
    inputs = materialize_inputs(definition, drawn, root)
    cache = ReferenceCache(tmp_path / "cache", key="k" * 64)
    entry = cache.entry(cache_key(definition, drawn, 0, "cpu"))
    entry.parent.mkdir()
    entry.write_bytes(b"\x00not safetensors")
    got = cache.outputs(definition, drawn, lambda: inputs, 0, torch.device("cpu"))
    assert cache.hits == 0 and entry.stat().st_size > 100
    again = ReferenceCache(tmp_path / "cache", key="k" * 64)
    assert torch.equal(
        again.outputs(definition, drawn, lambda: {}, 0, torch.device("cpu"))[0], got[0]
    )
    assert again.hits == 1
