"""Per-kernel resource usage of CUDA extension wheels, side by side (registers, stack, local
memory, shared memory), from `cuobjdump --dump-resource-usage` on every shared object inside.

    python scripts/kernel_resources.py --cuobjdump BIN A.whl B.whl [--labels 13.1 13.3]
        [--only REGEX] [--json]

Kernels are matched by mangled name across the wheels; the table names them by their
demangled function name (templates elided) and a short hash of the mangled one, so two
instantiations of one template stay apart. cuobjdump comes from the `nvidia-cuda-cuobjdump`
wheel of the toolkit release that built the wheel (or any newer one). STACK and LOCAL are where
register spills land: a kernel whose LOCAL grows between two builds spills more.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

FIELDS = ("REG", "STACK", "SHARED", "LOCAL")
FUNCTION = re.compile(r"^\s*Function (\S+):\s*$")
USAGE = re.compile(r"(REG|STACK|SHARED|LOCAL):(\d+)")


def resource_usage(cuobjdump: str, wheel: Path) -> dict[str, dict[str, int]]:
    """Mangled kernel name -> {REG, STACK, SHARED, LOCAL} over every .so in the wheel."""
    found: dict[str, dict[str, int]] = {}
    with tempfile.TemporaryDirectory() as tmp, zipfile.ZipFile(wheel) as archive:
        for member in archive.namelist():
            if not member.endswith(".so"):
                continue
            path = Path(archive.extract(member, tmp))
            done = subprocess.run(
                [cuobjdump, "--dump-resource-usage", str(path)],
                capture_output=True,
                text=True,
                check=True,
            )
            name = None
            for line in done.stdout.splitlines():
                header = FUNCTION.match(line)
                if header:
                    name = header.group(1)
                elif name is not None and "REG:" in line:
                    found[name] = {k: int(v) for k, v in USAGE.findall(line)}
                    name = None
    return found


def short_name(mangled: str) -> str:
    """`namespace::kernel<...>` with template arguments elided, plus 6 hex of the mangled name."""
    done = subprocess.run(["c++filt", mangled], capture_output=True, text=True, check=False)
    text = done.stdout.strip() or mangled
    depth, kept = 0, []
    for char in text:
        depth += char == "<"
        if depth == 0:
            kept.append(char)
        depth -= char == ">"
    base = "".join(kept).split("(")[0]
    return f"{base} [{hashlib.sha256(mangled.encode()).hexdigest()[:6]}]"


def table(usages: list[dict[str, dict[str, int]]], labels: list[str]) -> str:
    names = sorted(set().union(*usages), key=short_name)
    head = ["kernel", *(f"{f} {label}" for f in ("REG", "LOCAL", "STACK") for label in labels)]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" + "---:|" * (len(head) - 1)]
    for name in names:
        cells = [f"`{short_name(name)}`"]
        for field in ("REG", "LOCAL", "STACK"):
            cells += [str(u[name][field]) if name in u else "–" for u in usages]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("wheels", nargs="+", type=Path)
    parser.add_argument("--cuobjdump", default="cuobjdump")
    parser.add_argument("--labels", nargs="+")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--only", help="keep kernels whose demangled name matches this regex")
    args = parser.parse_args(argv)
    labels = args.labels or [w.name for w in args.wheels]
    if len(labels) != len(args.wheels):
        parser.error("give one label per wheel")
    usages = [resource_usage(args.cuobjdump, w) for w in args.wheels]
    if args.only:
        wanted = re.compile(args.only)
        usages = [{k: v for k, v in u.items() if wanted.search(short_name(k))} for u in usages]
    if args.json:
        print(json.dumps(dict(zip(labels, usages, strict=True)), indent=1, sort_keys=True))
    else:
        print(table(usages, labels))
    return 0


if __name__ == "__main__":
    sys.exit(main())
