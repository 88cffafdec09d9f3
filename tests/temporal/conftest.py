"""Stops this process's shared Temporal dev server (temporal_kit.SHARED) when the session ends."""

from __future__ import annotations

import sys

import pytest


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    kit = sys.modules.get("temporal_kit")  # imported only where the temporal extra is installed
    if kit is not None:
        kit.SHARED.stop()
