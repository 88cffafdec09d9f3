"""Shipped profiles, overlays and transcripts (SPEC §3, §14.2 item 3).

Wheels carry them under `loader/_shipped/`; editable installs fall back to the repository root,
found by walking up from this file to `pyproject.toml`.
"""

from __future__ import annotations

import os
import re
from importlib import resources
from pathlib import Path
from typing import Literal

from dsh.loader.errors import ConfigError

__all__ = ["ShippedKind", "available_names", "resolve_name", "shipped_dir"]

ShippedKind = Literal["profiles", "overlays", "transcripts"]
_SHIPPED_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def shipped_dir(kind: ShippedKind) -> Path:
    packaged = Path(str(resources.files("dsh.loader"))) / "_shipped" / kind
    if packaged.is_dir():
        return packaged
    here = Path(__file__).resolve().parent
    for parent in [here, *here.parents]:
        if (parent / "pyproject.toml").is_file() and (parent / kind).is_dir():
            return parent / kind
    raise ConfigError(f"shipped {kind} are missing from this installation")


def available_names(kind: ShippedKind) -> list[str]:
    return sorted(p.stem for p in shipped_dir(kind).glob("*.yaml"))


def resolve_name(kind: ShippedKind, value: str, *, relative_to: Path | None = None) -> Path:
    """A value with `/` or a `.yaml`/`.yml` suffix is a path; anything else names a shipped file."""
    if "/" in value or value.endswith((".yaml", ".yml")):
        path = Path(value)
        if not path.is_absolute() and relative_to is not None:
            path = relative_to / path
        if not os.path.lexists(path):
            raise ConfigError(f"{path}: no such file")
        return path  # the reader refuses what is not a regular file, and says what it is
    # A shipped name is one short path component; anything else (a 5,000-character name used to
    # raise "File name too long") names nothing we ship.
    if _SHIPPED_NAME.fullmatch(value):
        candidate = shipped_dir(kind) / f"{value}.yaml"
        if candidate.is_file():
            return candidate
    names = ", ".join(available_names(kind)) or "none"
    singular = kind[:-1]
    shown = value if len(value) <= 60 else value[:57] + "..."
    raise ConfigError(f"unknown {singular} {shown!r}; available: {names}")
