"""Making an env ready for a command (fetch its lock's artifacts, build its image), with the
command line's progress display: the commands that run solutions take a `MakeEnv` made here,
so the display is the CLI's and the work is the runtime's, and neither reaches into the other."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager

from envaudit.runtime.base import Progress, RunOptions, Runtime
from envaudit.runtime.scheduling.steps import ensure_env

OnFetch = Callable[[str, int, int], None]
OnStep = Callable[[int, int, str], None]
OnLine = Callable[[str], None]
EnvDisplay = Callable[[str], AbstractContextManager[tuple[OnFetch, OnStep, OnLine]]]
"""env -> a display for its preparation: the callbacks a download, a build step and a base's
line report to (console.py's bars)."""
MakeEnv = Callable[[Runtime, RunOptions, str], None]
"""(runtime, options, env): make the env ready in the runtime, showing progress, or raise an
EnvauditError (exit 2)."""


def env_maker(display: EnvDisplay, note: Callable[[str], None]) -> MakeEnv:
    """A MakeEnv that shows its progress on `display` and says what it noticed through `note`
    (a stand-in, a reused image)."""

    def make(runtime: Runtime, options: RunOptions, env: str) -> None:
        with display(env) as (on_fetch, on_step, on_line):
            said = ensure_env(runtime, env, options, Progress(on_fetch, on_step, on_line))
        if said:
            note(said)

    return make
