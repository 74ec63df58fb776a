"""`python -m envaudit ...`, the same as the `envaudit` console script."""

from envaudit.cli import app

app()
