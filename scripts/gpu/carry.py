"""What a GPU session carries to the device machine, made here from committed facts, since a new
checkout has none of an earlier session's scratch/ (run with this checkout's venv):

  python scripts/gpu/carry.py wheels OUT
      envaudit's own runtime dependencies that the machine's stack lacks, as CPython 3.12
      manylinux wheels (pip download): what scripts/gpu/harness-env.sh installs there. Only
      what the stack lacks: a wheel of a package the stack holds would shadow it, and a
      package the torch lock pins at another version makes every line "not the declared env".
  python scripts/gpu/carry.py store OUT ENV [ENV ...] [--part-mib N]
      the store entries the envs' images need over the imported stack (gpu-host-stack: what
      envaudit's own overlay planner adds or replaces), fetched into ENVAUDIT_STORE, packed
      as one tar cut into folders OUT/pNN of at most N MiB (default 20: beside the ~43 MB
      working tree in one device call), the first holding wheels.tar.sha256, as
      scripts/gpu/library-session.sh `stash` and `store` take them. OUT/entries.tsv names them.
      A source's recorded wheel that nothing here holds is built again from what the lock
      records (`envaudit fetch ENV --build`: the same sha256 or nothing; git sources through
      ENVAUDIT_GIT_BASES where there is no network).

The stack is the one docs/results/h200/verify-env/verify-torch-2.11-cu130.txt lists (the torch
lock's packages, which it matched, plus its extras), read on an H200 machine on 2026-12-01: a
machine whose stack moved since then shows it at `verify-env` there.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import re
import subprocess
import sys
import tarfile
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from envaudit.errors import EnvauditError
from envaudit.image.overlay import plan_overlay
from envaudit.lock.files import load_lock
from envaudit.lock.verify import InstalledDist, compare, locked_distributions
from envaudit.settings import STORE, value

ROOT = Path(__file__).resolve().parents[2]
STACK_LOCK = "torch-2.11-cu130"
STACK_LISTING = ROOT / "docs/results/h200/verify-env/verify-torch-2.11-cu130.txt"
ON_PATH = {"uv"}
"""Dependencies the machine has as programs, not in its interpreter (uv's binary)."""
PLATFORMS = [f"manylinux_2_{n}_x86_64" for n in (17, 24, 27, 28, 31, 34, 35)] + [
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
]


def stack() -> dict[str, str]:
    """name -> version of what the machine's interpreter holds (the module docstring says
    where that comes from)."""
    held = {d.name: d.version for d in locked_distributions(load_lock(ROOT / "locks" / STACK_LOCK))}
    for line in STACK_LISTING.read_text().splitlines():
        extra = re.match(r"extra \(not in the lock\): (\S+)==(\S+)", line)
        if extra:
            held[extra[1]] = extra[2]
    return {canonicalize_name(name): version for name, version in held.items()}


def runtime_closure(top: str = "envaudit") -> dict[str, str]:
    """name -> installed version of `top`'s runtime requirements, transitively, as this
    interpreter resolves their markers (no extras)."""
    found: dict[str, str] = {}
    pending = [top]
    while pending:
        name = pending.pop()
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        for raw in dist.requires or []:
            req = Requirement(raw)
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
            key = canonicalize_name(req.name)
            if key not in found:
                try:
                    found[key] = importlib.metadata.version(req.name)
                except importlib.metadata.PackageNotFoundError:
                    continue
                pending.append(req.name)
    return found


def wheels(out: Path) -> int:
    held = stack()
    missing = {n: v for n, v in runtime_closure().items() if n not in held and n not in ON_PATH}
    print(f"{len(missing)} of envaudit's runtime dependencies are not in the stack:", missing)
    if not missing:
        return 0
    out.mkdir(parents=True, exist_ok=True)
    # the machine's own pip (this checkout's venv has none); it downloads for another Python
    command = ["python3", "-m", "pip", "download", "--quiet", "--no-deps"]
    command += ["--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp"]
    for platform in PLATFORMS:
        command += ["--platform", platform]
    command += ["-d", str(out), *(f"{n}=={v}" for n, v in sorted(missing.items()))]
    return subprocess.run(command, check=False).returncode


def store(out: Path, envs: list[str], part_mib: int) -> int:
    """Fetch, plan each env's overlay, pack and cut (see the module docstring)."""
    installed = [InstalledDist(n, v, Path("/"), None) for n, v in stack().items()]
    entries: dict[str, tuple[int, str]] = {}
    for env in envs:
        fetched = subprocess.run(
            [sys.executable, "-m", "envaudit", "fetch", env, "--build"], check=False
        )
        if fetched.returncode != 0:
            return fetched.returncode
        lock = load_lock(ROOT / "locks" / env)
        drift = compare(lock, installed, None)
        plan = plan_overlay(lock, "base", "gpu-host-stack", "python3", "0" * 64, drift)
        for layer in (plan.added, plan.toolchain):
            for name, version, artifact in layer.packages if layer is not None else ():
                entries[artifact.sha256] = (artifact.size, f"{name}=={version} ({env})")
    folder = Path(value(STORE)) / "sha256"
    out.mkdir(parents=True, exist_ok=True)
    tar_path = out / "wheels.tar"
    with tarfile.open(tar_path, "w", format=tarfile.GNU_FORMAT) as tar:
        for sha in sorted(entries):  # the same entries make the same tar: no times or owners
            info = tar.gettarinfo(folder / sha, arcname=sha)
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            info.mode = 0o644
            with (folder / sha).open("rb") as entry:
                tar.addfile(info, entry)
    digest = hashlib.sha256()
    with tar_path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    part_bytes = part_mib << 20
    with tar_path.open("rb") as handle:
        for index, part in enumerate(iter(lambda: handle.read(part_bytes), b"")):
            where = out / f"p{index:02d}"
            where.mkdir(exist_ok=True)
            (where / f"part-{index:02d}").write_bytes(part)
    (out / "p00" / "wheels.tar.sha256").write_text(digest.hexdigest())
    size = tar_path.stat().st_size
    tar_path.unlink()
    lines = [f"{sha}\t{bytes_}\t{what}" for sha, (bytes_, what) in sorted(entries.items())]
    (out / "entries.tsv").write_text("\n".join(lines) + "\n")
    parts = -(-size // part_bytes)
    print(f"{len(entries)} entries, {size / 2**20:.1f} MiB, {parts} parts of {part_mib} MiB")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    sub.add_parser("wheels").add_argument("out", type=Path)
    packing = sub.add_parser("store")
    packing.add_argument("out", type=Path)
    packing.add_argument("envs", nargs="+")
    packing.add_argument("--part-mib", type=int, default=20)
    args = parser.parse_args()
    if args.what == "wheels":
        return wheels(args.out)
    try:
        return store(args.out, args.envs, args.part_mib)
    except EnvauditError as error:  # an env no image over the stack can hold: say which, why
        print(f"carry.py store: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
