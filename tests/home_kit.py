"""Checks over a whole `$DSH_HOME`, shared by every fixture that hands tests a home."""

from __future__ import annotations

from pathlib import Path

from dsh.loader.session import is_unmaterialized, read, validate_log


def validate_home(home: Path) -> int:
    """validate_log over every session file under `home`; returns how many were checked. A
    directory a (simulated) crash left before its header was published holds no log to check."""
    count = 0
    for path in sorted((home / "sessions").glob("*/session.jsonl")):
        if is_unmaterialized(path.parent):
            continue
        validate_log(read(path).events)
        count += 1
    return count
