"""Engines other than the local one (issue 12; the design is in README.md beside this file).

Nothing here is imported by the local engine: `engine: temporal` is the only way in, through
`cli/run.py` and `cli/worker.py`, and every module that needs `temporalio` imports it itself.
This package's own `__init__` imports nothing, so importing `wire` costs no SDK.
"""
