"""scripts/env_ratio.py and envaudit.report.env_compare: the OTHER/BASE time ratio with a
bootstrap interval from repeated runs; a real 5% difference with little spread is not within
noise, equal timings are."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from envaudit.report.env_compare import compare, run_medians, table
from scripts.env_ratio import main, read_lines


def write(path: Path, medians: dict[str, list[float]]) -> Path:
    lines = []
    for label, values in medians.items():
        for value in values:
            timing = {"graph": {"median_ms": value}, "eager": {"median_ms": value * 2}}
            line = {
                "schema_version": 2,
                "definition": "d",
                "status": "PASSED",
                "solution": "s",
                "workload": {"uuid": label, "label": label},
            }
            lines.append(json.dumps({**line, "timing": timing}))
    path.write_text("\n".join(lines) + "\n")
    return path


def noisy(center: float, runs: int, spread: float, rng: random.Random) -> list[float]:
    return [center * (1 + rng.uniform(-spread, spread)) for _ in range(runs)]


def test_a_real_difference_and_none(tmp_path: Path) -> None:
    rng = random.Random(1)
    base = write(
        tmp_path / "a.jsonl", {"w1": noisy(1.0, 7, 0.005, rng), "w2": noisy(2.0, 7, 0.005, rng)}
    )
    other = write(
        tmp_path / "b.jsonl", {"w1": noisy(0.95, 7, 0.005, rng), "w2": noisy(2.0, 7, 0.005, rng)}
    )
    result = compare(run_medians(read_lines(base), "s"), run_medians(read_lines(other), "s"))
    rows = {r["workload"]: r for r in result["workloads"]}
    assert rows["w1"]["mode"] == "graph" and rows["w1"]["runs"] == [7, 7]
    assert 0.94 < rows["w1"]["ratio"] < 0.96 and not rows["w1"]["within_noise"]
    assert rows["w1"]["ci95"][0] < rows["w1"]["ratio"] < rows["w1"]["ci95"][1]
    assert rows["w2"]["within_noise"]
    assert 0.96 < result["geomean"]["ratio"] < 0.99
    text = table(result, ("13.1", "13.3"))
    assert "13.3 faster" in text and "within noise" in text and "geometric mean" in text


def test_the_script_prints_the_table_for_two_files(tmp_path: Path, capsys: Any) -> None:
    rng = random.Random(2)
    base = write(tmp_path / "flashmla-13.1.jsonl", {"w1": noisy(1.0, 5, 0.01, rng)})
    other = write(tmp_path / "flashmla-13.3.jsonl", {"w1": noisy(1.0, 5, 0.01, rng)})
    assert main([str(base), str(other), "--solution", "s"]) == 0
    out = capsys.readouterr().out
    assert "flashmla-13.3/flashmla-13.1" in out and "| w1 | graph | 5, 5 |" in out
