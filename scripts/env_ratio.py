"""Time ratio of one solution between two result files, with a 95% confidence interval from
repeated runs (e.g. FlashMLA built with nvcc 13.3 vs 13.1: same source, same harness, same GPU).

    python scripts/env_ratio.py BASE.jsonl OTHER.jsonl [--solution S] [--json] [--seed N]

Each file holds result lines of repeated runs (one line per workload per run, appended by
`envaudit run --report`). `envaudit merge` compares every solution run in several envs by the
report's one comparison rule (the newest line of each env, each figure's run-to-run floor); this
script answers a finer question, a Welch t interval over all repeated runs of two files, for a
difference below that floor. The method is in
envaudit.report.env_compare.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from envaudit.report.env_compare import compare, run_medians, table
from envaudit.schema.result_line import ResultLine


def read_lines(path: Path) -> list[ResultLine]:
    """The result lines of a file (a line that is no result line stops the script)."""
    return [
        ResultLine.model_validate(json.loads(raw))
        for raw in path.read_text().splitlines()
        if raw.strip()
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("base", type=Path)
    parser.add_argument("other", type=Path)
    parser.add_argument("--solution")
    parser.add_argument("--names", nargs=2, default=None)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    names: tuple[str, str] = (
        (args.names[0], args.names[1]) if args.names else (args.base.stem, args.other.stem)
    )
    result = compare(
        run_medians(read_lines(args.base), args.solution),
        run_medians(read_lines(args.other), args.solution),
        args.seed,
    )
    print(json.dumps(result, indent=1) if args.json else table(result, names))
    return 0


if __name__ == "__main__":
    sys.exit(main())
