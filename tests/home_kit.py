"""Checks over a whole `$DSH_HOME`, shared by every fixture that hands tests a home."""

from __future__ import annotations

from pathlib import Path

from loader.session import read, validate_log


def validate_home(home: Path) -> int:
    """validate_log over every session file under `home`; returns how many were checked."""
    count = 0
    for path in sorted((home / "sessions").glob("*/session.jsonl")):
        validate_log(read(path).events)
        count += 1
    return count
