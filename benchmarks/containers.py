"""Container costs, measured side by side in one run on this machine: a cold offline base build,
a cold image build of torch-cpu, the no-op rebuild, image sizes and the bytes two environments
share, and a cached re-audit's wall time against the time spent inside the harness.

    .venv/bin/python -m benchmarks.containers [--cold] [--repeats 5]

`--cold` removes the base and the torch-cpu images first (and the benchmark's variant image),
so the first builds start from nothing but the store. The variant environment is torch-cpu
with another numpy, locked into a temporary folder: it shares the base and the torch layer.
Needs a Docker engine, debootstrap, and the torch-cpu artifacts fetchable (find-links).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from envaudit.image.build import plan_build
from envaudit.image.engine import Engine
from envaudit.schema.results import read_lines

ENVAUDIT = [sys.executable, "-m", "envaudit"]
VARIANT_NUMPY = "numpy==2.3.4"


def timed(argv: list[str], cwd: Path | None = None) -> float:
    started = time.monotonic()
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return time.monotonic() - started


METADATA = re.compile(
    r"#\(nop\)\s+(ENV|LABEL|USER|WORKDIR|CMD|ENTRYPOINT|EXPOSE|ARG|ONBUILD|STOPSIGNAL"
    r"|HEALTHCHECK|SHELL|VOLUME|MAINTAINER)\b"
)


def layer_bytes(engine: Engine, tag: str) -> list[tuple[str, int]]:
    """(layer digest, bytes) of an image, oldest first: the history entries that made a layer
    (not metadata instructions, not steps that changed nothing), paired with its digests."""
    image = engine.image(tag)
    assert image is not None
    entries = engine.layer_sizes(tag)
    sizes = [size for created, size in entries if size > 0 or not METADATA.search(created)]
    if len(sizes) != len(image.layers):  # a step that changed nothing made no layer
        sizes = [size for _, size in entries if size > 0]
    if len(sizes) != len(image.layers):
        raise SystemExit(f"{tag}: {len(sizes)} history layers for {len(image.layers)} digests")
    return list(zip(image.layers, sizes, strict=True))


def variant_locks(root: Path) -> Path:
    """locks/<torch-cpu, torch-cpu-variant> in a temporary folder; the variant re-locked."""
    locks = root / "locks"
    shutil.copytree(Path("locks/torch-cpu"), locks / "torch-cpu")
    variant = locks / "torch-cpu-variant"
    shutil.copytree(Path("locks/torch-cpu"), variant)
    spec = (variant / "env.toml").read_text()
    spec = spec.replace('"numpy==2.3.5"', f'"{VARIANT_NUMPY}"')
    (variant / "env.toml").write_text(spec)
    (variant / "lock.json").unlink()
    timed([*ENVAUDIT, "lock", "torch-cpu-variant", "--locks-dir", str(locks)])
    timed([*ENVAUDIT, "fetch", "torch-cpu-variant", "--locks-dir", str(locks)])
    return locks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cold", action="store_true")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    engine = Engine.connect()
    plan = plan_build("torch-cpu").image
    results: dict[str, object] = {}
    with tempfile.TemporaryDirectory(prefix="envaudit-bench-") as tmp:
        locks = variant_locks(Path(tmp))
        variant = plan_build("torch-cpu-variant", locks).image
        if args.cold:
            for tag in (plan.tag, variant.tag, plan.base):
                if engine.image(tag) is not None:
                    engine.remove_image(tag)
            subprocess.run(["docker", "builder", "prune", "-af"], capture_output=True, check=False)
            subprocess.run(["docker", "image", "prune", "-f"], capture_output=True, check=False)
        timed([*ENVAUDIT, "fetch", "torch-cpu"])
        results["base build s"] = timed([*ENVAUDIT, "base", "build", "bookworm-minbase"])
        results["torch-cpu build s"] = timed([*ENVAUDIT, "build", "--env", "torch-cpu"])
        noop = [timed([*ENVAUDIT, "build", "--env", "torch-cpu"]) for _ in range(args.repeats)]
        results["no-op build s (median, min, max)"] = [
            round(statistics.median(noop), 2),
            round(min(noop), 2),
            round(max(noop), 2),
        ]
        argv = [*ENVAUDIT, "build", "--env", "torch-cpu-variant", "--locks-dir", str(locks)]
        results["variant build s (torch layer cached)"] = timed(argv)
        one, two = layer_bytes(engine, plan.tag), layer_bytes(engine, variant.tag)
        shared = {digest for digest, _ in one} & {digest for digest, _ in two}
        base_image = engine.image(plan.base)
        assert base_image is not None
        results["image bytes torch-cpu"] = sum(size for _, size in one)
        results["image bytes variant"] = sum(size for _, size in two)
        results["base bytes"] = base_image.size
        results["shared layer bytes (base included)"] = sum(s for d, s in one if d in shared)
        results["shared layer bytes beyond the base"] = sum(
            s for d, s in one if d in shared and d not in base_image.layers
        )
        results["layers torch-cpu / variant / shared"] = [len(one), len(two), len(shared)]
        out = Path(tmp) / "audit"
        audit = [*ENVAUDIT, "audit", "--runtime", "docker", "--env", "torch-cpu"]
        audit += ["--device", "cpu", "--out", str(out)]
        subprocess.run(audit, capture_output=True, check=False)  # warms the reference cache
        shutil.move(out / "results.jsonl", Path(tmp) / "first.jsonl")
        started = time.monotonic()
        subprocess.run(audit, capture_output=True, check=False)
        wall = time.monotonic() - started
        lines = [line for _, line in read_lines(out / "results.jsonl") if line]
        inside = sum(float(line.get("wall_s") or 0) for line in lines)
        results["cached re-audit wall s"] = round(wall, 1)
        results["cached re-audit lines"] = len(lines)
        results["time inside the harness s (sum of wall_s)"] = round(inside, 1)
        results["share of wall inside the harness"] = round(inside / wall, 3)
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
