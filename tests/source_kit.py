"""Source files read as syntax trees, for the tests that check the code's own shape (layers,
texts, one writer per log)."""

from __future__ import annotations

import ast
import gc
from pathlib import Path


def parse_source(path: Path) -> ast.Module:
    """`ast.parse` with the cyclic collector paused. In a process that ran Temporal tests before,
    CPython 3.11's AST conversion raised "SystemError: AST constructor recursion depth mismatch"
    (`pytest -n 0 tests/temporal/test_temporal_engine.py tests/test_layers.py`: 5 runs in 6 without
    the pause, none in 4 with it): a collection in the middle of the conversion runs finalizers
    that move the recursion depth it checks."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return ast.parse(path.read_text(), filename=str(path))
    finally:
        if enabled:
            gc.enable()
