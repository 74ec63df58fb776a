"""Whole use cases, one module each, between the command line and the layers.

`envaudit.cli` parses flags and renders; what a command does (which envs a build names, how a
run's env is made before its job, what an audit hands its executor, how a recorded line is run
again, what `doctor` checks, how a lock is fetched, two locks compared, a result file merged)
lives here, typed and free of Typer, so a test or another front end calls the same code the
command line does. Each takes a request dataclass and returns a result dataclass; the command
line reaches the layers below only through these modules (tests/test_import_graph.py).
"""
