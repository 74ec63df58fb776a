"""Typed models of the on-disk formats (models.py).

expressions.py, dtypes.py, findings.py and results.py use only the standard library: the harness
imports them inside minimal solution environments.
"""
