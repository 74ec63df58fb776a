"""envaudit: validate and time kernel solutions, each in the exact environment it declares."""

__version__ = "0.1.0"
