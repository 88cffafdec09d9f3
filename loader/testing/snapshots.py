"""Flow snapshots without pytest (issue 10, `dsh flow FILE... --check DIR [--update]`).

A snapshot directory holds one `<transcript name>.flow.yaml` per transcript, written exactly as
syrupy's `FlowYamlExtension` writes a file (the §20.2 dump, nothing added), so a file can move
between a syrupy `__snapshots__` directory and a `--check` directory unchanged. Comparison is byte
for byte. Like syrupy's defaults, a missing snapshot fails and so does an unused one (a
`*.flow.yaml` in the directory that no given transcript produced); `--update` writes the missing
and changed files and deletes the unused ones.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from dsh.loader.testing.runner import flow_diff

__all__ = ["SUFFIX", "SnapshotReport", "check_snapshots", "ci_is_read_only", "snapshot_path"]

SUFFIX = ".flow.yaml"
_CI_OFF = ("", "0", "false")


def ci_is_read_only(environ: Mapping[str, str]) -> bool:
    """True when `CI` is set to anything but "", "0" or "false" (compared case-insensitively); the
    pytest plugin and `dsh flow --update` both refuse to write snapshots then."""
    value = environ.get("CI")
    return value is not None and value.strip().lower() not in _CI_OFF


def snapshot_path(directory: Path, name: str) -> Path:
    return directory / f"{name}{SUFFIX}"


@dataclass
class SnapshotReport:
    passed: list[str] = field(default_factory=list)
    missing: list[Path] = field(default_factory=list)
    unused: list[Path] = field(default_factory=list)
    diffs: dict[str, str] = field(default_factory=dict)  # name -> unified diff (snapshot -> run)
    written: list[Path] = field(default_factory=list)
    deleted: list[Path] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return bool(self.missing or self.unused or self.diffs)


def check_snapshots(flows: dict[str, str], directory: Path, *, update: bool = False) -> SnapshotReport:
    """Compare (or, with `update`, rewrite) `directory` against `flows` (transcript name -> YAML)."""
    report = SnapshotReport()
    for name, text in flows.items():
        path = snapshot_path(directory, name)
        data = text.encode("utf-8")
        stored = path.read_bytes() if path.is_file() else None
        if stored == data:
            report.passed.append(name)
        elif update:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            report.written.append(path)
        elif stored is None:
            report.missing.append(path)
        else:
            old = stored.decode("utf-8", errors="replace")
            report.diffs[name] = flow_diff(old, text, str(path), f"{name} (this run)")
    expected = {snapshot_path(directory, name).name for name in flows}
    if directory.is_dir():
        for path in sorted(directory.glob(f"*{SUFFIX}")):
            if path.name in expected:
                continue
            if update:
                path.unlink()
                report.deleted.append(path)
            else:
                report.unused.append(path)
    return report
