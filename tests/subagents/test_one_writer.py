"""The manager is the one writer of its state (issue 14 item 6): read from the source with `ast`,
like tests/test_layers.py, so a write that slips back into teardown/notice/recovery fails here."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from source_kit import parse_source

SUBAGENTS = Path(__file__).resolve().parents[2] / "loader" / "subagents"

# Fields of ContinuationManager and Activation whose invariants the manager's docstring names.
GUARDED = {
    "activations", "materializations", "closing_scopes", "draining", "counters", "offline_deliveries",
    "disposal", "accepted", "owned_children", "announced", "resident", "watcher",
}
MUTATORS = {"add", "discard", "remove", "pop", "popitem", "setdefault", "update", "clear"}


def _guarded(node: ast.expr) -> str | None:
    """The guarded field `node` writes through (`x.f`, `x.f[k]`, `x.f.g`), if any."""
    while isinstance(node, ast.Subscript | ast.Attribute):
        if isinstance(node, ast.Attribute) and node.attr in GUARDED:
            return node.attr
        node = node.value
    return None


def writes_of(path: Path) -> list[str]:
    found: list[str] = []
    for node in ast.walk(parse_source(path)):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = node.targets
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS:
            targets = [node.func.value]
        for target in targets:
            if (name := _guarded(target)) is not None:
                found.append(f"{path.name}:{node.lineno}: {name}")
    return found


@pytest.mark.parametrize(
    "module", sorted(p.name for p in SUBAGENTS.glob("*.py") if p.name not in {"manager.py", "activation.py"})
)
def test_only_the_manager_writes_its_state(module: str) -> None:
    assert writes_of(SUBAGENTS / module) == []


def imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(parse_source(path)):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


@pytest.mark.parametrize("module", ["teardown.py", "notice.py", "materialize.py", "coldresume.py", "config.py"])
def test_the_manager_s_satellites_do_not_import_it(module: str) -> None:
    # Imports point one way: manager -> teardown -> notice; the satellites see a Protocol.
    assert "dsh.loader.subagents.manager" not in imported(SUBAGENTS / module)


def test_the_write_check_sees_a_write() -> None:
    # The checker itself can fail: the manager's own module writes every kind it looks for.
    writes = writes_of(SUBAGENTS / "manager.py")
    assert {w.rsplit(": ", 1)[1] for w in writes} >= {"activations", "draining", "closing_scopes", "disposal"}
