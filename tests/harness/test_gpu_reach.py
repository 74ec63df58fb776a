"""On a GPU: the cheats of test_reach.py must fail there too, and no process gets memory that
still holds another process's data (the judge's references live in a context of their own).

Skipped where torch sees no CUDA device (CI); run on the GPU machine with `pytest -m gpu`
(scripts/gpu/integrity.sh).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import UUID_BLOB, UUID_RANDOM
from tests.harness.test_gpu_faults import gpu_uuid
from tests.harness.test_reach import CHEATS, cheat_lines

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


@pytest.fixture(scope="module")
def gpu_cheat_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict]]:
    return cheat_lines(tmp_path_factory.mktemp("gpu-reach"), ["--gpu", gpu_uuid()])


def test_the_correct_solution_passes_on_the_gpu(gpu_cheat_run: dict) -> None:
    assert [line["status"] for line in gpu_cheat_run["correct"]] == ["PASSED", "PASSED"]


@pytest.mark.parametrize("name", list(CHEATS))
def test_no_cheat_passes_on_the_gpu(gpu_cheat_run: dict, name: str) -> None:
    lines = gpu_cheat_run[name]
    assert {line["workload"]["uuid"] for line in lines} == {UUID_BLOB, UUID_RANDOM}
    for line in lines:
        assert line["status"] not in ("PASSED", "COMPILE_ERROR"), line.get("message")


FILL = """
import sys, torch
n = int(sys.argv[1])
block = torch.full((n,), 0x5A, dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
print("filled", flush=True)
sys.stdin.readline()
"""

SCAN = """
import sys, torch
n = int(sys.argv[1])
block = torch.empty((n,), dtype=torch.uint8, device="cuda")
found = 0
for chunk in block.split(1 << 30):  # a whole-block comparison would need as much again
    found += int((chunk == 0x5A).sum())
print(found)
"""


def test_memory_another_process_freed_reads_clean(tmp_path: Path) -> None:
    """A process fills most of the free memory with a pattern and exits; another then takes as
    much with torch.empty: none of the pattern may show (what the judge frees, the solution's
    process never reads)."""
    free, _ = torch.cuda.mem_get_info()
    n = int(free * 0.6)
    filler = subprocess.Popen(
        [sys.executable, "-c", FILL, str(n)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert filler.stdout is not None and filler.stdin is not None
    assert filler.stdout.readline().strip() == b"filled"
    filler.stdin.close()
    assert filler.wait(60) == 0
    done = subprocess.run([sys.executable, "-c", SCAN, str(n)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert int(done.stdout.strip()) == 0
