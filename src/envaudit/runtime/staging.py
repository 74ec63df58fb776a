"""The harness as every environment sees it: its declared files, copied once per harness hash.

Local environments put the copy on PYTHONPATH and containers mount it read-only, so every
runtime runs exactly the files `envaudit.schema.harness.HARNESS_FILES` declares and hashes, and
nothing else of envaudit (the CLI's pydantic models never enter a solution's environment).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from envaudit.schema.harness import HARNESS_FILES, SOURCE_ROOT, harness_hash
from envaudit.settings import cache_root


def staged_harness(cache: Path | None = None) -> Path:
    """The folder holding the declared harness files (made on first use, read-only after)."""
    digest = harness_hash()
    root = (cache or cache_root()) / "harness"
    target = root / digest[:16]
    if (target / HARNESS_FILES[0]).is_file():
        return target
    root.mkdir(parents=True, exist_ok=True)
    draft = Path(tempfile.mkdtemp(prefix=".staging-", dir=root))
    for relative in HARNESS_FILES:
        (draft / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(SOURCE_ROOT / relative, draft / relative)
        (draft / relative).chmod(0o444)
    for folder in [draft, *(p for p in draft.rglob("*") if p.is_dir())]:
        folder.chmod(0o555)
    try:
        draft.rename(target)
    except OSError:  # another run staged the same hash first
        _remove_read_only(draft)
    return target


def _remove_read_only(folder: Path) -> None:
    for path in [folder, *folder.rglob("*")]:
        if path.is_dir():
            path.chmod(0o755)
    shutil.rmtree(folder, ignore_errors=True)
