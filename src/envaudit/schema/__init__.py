"""Typed models of the on-disk formats (models.py).

expressions.py, dtypes.py and findings.py use only the standard library: the harness imports them.
"""
