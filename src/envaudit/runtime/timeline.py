"""Marks on the supervisor's side of an audit, for a profile of the time no worker accounts for.

A result line says how long its worker took to start and how long each phase of its workload
took; it cannot say what the supervisor did before the worker started, how long the worker took
to exit after its last line, or what the command did around its jobs. With ENVAUDIT_TIMELINE
set to a file, the supervisor appends one JSON line per mark there ({"t": wall seconds, "event",
"job"}), and benchmarks/audit_profile.py splits the time outside the workers with them. Unset, a
mark costs one environment lookup.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

from envaudit.schema.paths import open_for_append
from envaudit.settings import TIMELINE, read

TIMELINE_ENV = TIMELINE.name
_lock = threading.Lock()


def mark(event: str, job: str = "") -> None:
    """Append one mark (jobs run on several threads at once; the lock keeps lines whole)."""
    path = read(TIMELINE)
    if path is None:
        return
    record = json.dumps({"t": time.time(), "event": event, "job": job})
    with _lock, os.fdopen(open_for_append(Path(path)), "a", encoding="utf-8") as out:
        out.write(record + "\n")
