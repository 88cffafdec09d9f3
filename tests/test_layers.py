"""Imports point one way (STYLE §1, the diagram in `loader/__init__.py`).

Every `import` in `loader/` and `cli/` is read with `ast` — module level, inside functions and under
`if TYPE_CHECKING:` alike, since STYLE allows a type-only import to break a cycle within a layer,
never upward. A unit may import itself and units of a strictly lower rank; two units of one rank
never import each other. Reading the source, not `sys.modules`, also catches cycles that a lazy or
type-only import hides at run time (host once reached `Tree` through `headless`, which starts the
host's `ControlServer`).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from source_kit import parse_source

ROOT = Path(__file__).resolve().parent.parent

# The spine, left to right, with the units beside it placed where their imports put them:
# `models/` and `config/` build on `transcripts/`; `tree` assembles agent, subagents and tools;
# the host's runtime half (`methods`, `server`) and `fences` drive a `Tree`; `headless` picks
# providers, config and the host; `testing/` sits on headless; `cli/` on everything.
RANKS: dict[str, float] = {
    # base leaves, then the base modules that build on them (ids on errors, yamlpos on inputfile)
    **dict.fromkeys(("abort", "errors", "texts", "emitter", "boundedjson", "inputfile", "ndjson", "yamlfast", "lean"), 0),
    **dict.fromkeys(("ids", "yamlpos", "homedir", "problems"), 0.5),  # problems: texts; pydantic models passed in
    "shipped": 1,
    "session": 1,
    "transcripts": 2,
    "models": 3,
    "config": 3,
    "agent": 4,
    "subagents": 5,
    "tools": 6,
    "hang_note": 6.5,  # a replay note on an agent's log: models and agent, below the tree that installs it
    "tree": 7,
    "host": 8,
    "fences": 8,
    "scripted_user": 8.5,  # drives the host's methods under the fences' conditions
    "sinks": 8,  # the run's observers and ledgers: on the tree, below headless
    "headless": 9,
    "engines": 9.5,  # beside headless: other engines build a RunResult as run_tree does (issue 12)
    "testing": 10,
    "cli": 11,
}


def unit_of_path(path: Path, root: Path = ROOT) -> str:
    rel = path.relative_to(root).with_suffix("").parts
    if rel[0] == "cli":
        return "cli"
    return rel[1]  # loader/<module>.py or loader/<package>/...


def unit_of_module(name: str) -> str | None:
    parts = name.split(".")
    if parts[0] != "dsh":
        return None  # stdlib or third party (dsh installs no top-level cli or loader)
    parts = parts[1:]
    if parts[:1] == ["cli"]:
        return "cli"
    if parts[:1] == ["loader"] and len(parts) > 1:
        return parts[1]
    return None


def imports_of(path: Path) -> list[tuple[int, str]]:
    """(line, imported module) for every absolute import in `path` (dsh's own are `dsh.loader.*`, `dsh.cli.*`)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(parse_source(path)):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}:{node.lineno}: relative import; write it absolute"
            assert node.module is not None
            found.append((node.lineno, node.module))
    return found


def sources() -> list[Path]:
    files = sorted(p for base in ("loader", "cli") for p in (ROOT / base).rglob("*.py"))
    return [p for p in files if p != ROOT / "loader" / "__init__.py"]


def upward_imports(files: list[Path], root: Path = ROOT) -> list[str]:
    bad: list[str] = []
    for path in files:
        unit = unit_of_path(path, root)
        assert unit in RANKS, f"{path}: unit {unit!r} has no place in the layering; add it to RANKS"
        for line, module in imports_of(path):
            target = unit_of_module(module)
            if target is None or target == unit:
                continue
            assert target in RANKS, f"{path}:{line}: imports unknown unit {target!r}"
            if RANKS[target] >= RANKS[unit]:
                bad.append(f"{path.relative_to(root)}:{line}: {unit} (rank {RANKS[unit]}) imports "
                           f"{module} (rank {RANKS[target]})")
    return bad


def test_every_import_in_loader_and_cli_points_down_the_layers():
    assert upward_imports(sources()) == []


def test_host_reaches_tree_directly_not_through_headless():
    """The circle this file was written for: host → headless → host."""
    host = [p for p in sources() if unit_of_path(p) == "host"]
    assert [m for p in host for _, m in imports_of(p) if m.startswith("dsh.loader.headless")] == []


@pytest.mark.parametrize(
    "source",
    [
        pytest.param("from dsh.loader.headless import Tree\n", id="module-level"),
        pytest.param("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from dsh.loader.headless import Tree\n",
                     id="type-only"),
        pytest.param("def f():\n    import dsh.loader.fences\n", id="lazy-same-rank"),
    ],
)
def test_the_walk_flags_an_upward_import(tmp_path, source):
    """The check can fail: a host module importing headless (or its peer fences) is reported."""
    probe = tmp_path / "loader" / "host" / "probe.py"
    probe.parent.mkdir(parents=True)
    probe.write_text(source)
    [finding] = upward_imports([probe], root=tmp_path)
    assert "host (rank 8) imports" in finding


# Inside `engines/` (issue 12): workflow code sees only the wire types (the sandbox re-imports it,
# and it must stay deterministic); the turn activity is the shared runtime; the worker and client
# sit on both.
ENGINE_RANKS: dict[str, int] = {"__init__": 0, "wire": 0, "pages": 0, "interrupts": 0, "patches": 0, "failed_text": 0,
                                "homes": 0, "refusals": 0, "logs": 1, "queue": 1, "board": 1, "ledger": 1, "calls": 1, "pinning": 1,
                                "residents": 2, "turn_run": 2, "residency": 3, "endings": 4, "mid_turn": 5,
                                "root_handlers": 6, "child_handlers": 7, "workflow": 8, "reader": 1, "projection": 1,
                                "settle": 1, "recording": 1, "backends": 2, "turn": 3, "stream": 3, "tree_logs": 4,
                                "started": 9, "control": 10, "long_polls": 10, "link": 11, "remote_user": 11, "client": 12,
                                "worker": 13}
# Workflow code: the workflow class, its handler base classes and the state it keeps (the state
# and its rules are plain classes).
WORKFLOW_SIDE = ["patches", "queue", "board", "ledger", "calls", "pinning", "residents", "residency", "endings",
                 "turn_run", "mid_turn", "root_handlers", "child_handlers", "workflow"]


def test_engine_modules_import_one_way_and_workflow_code_only_the_wire():
    found = {}
    for path in sorted((ROOT / "loader" / "engines").glob("*.py")):
        assert path.stem in ENGINE_RANKS, f"{path}: give it a place in ENGINE_RANKS"
        found[path.stem] = [m.rsplit(".", 1)[1] for _, m in imports_of(path) if m.startswith("dsh.loader.engines.")]
    bad = [f"{name} imports {target}" for name, targets in found.items() for target in targets
           if ENGINE_RANKS[target] >= ENGINE_RANKS[name]]
    assert bad == []
    # And `RunBudget`: plain counting, no I/O, no clock, so the root workflow keeps the tree's run
    # budget with the local engine's own check-and-count (loader/engines/README.md "Run budgets").
    allowed = {"dsh.loader.engines.wire", "dsh.loader.models.budget", *(f"dsh.loader.engines.{m}" for m in WORKFLOW_SIDE)}
    outside = {name: [m for _, m in imports_of(ROOT / "loader" / "engines" / f"{name}.py")
                      if m.startswith("dsh.") and m not in allowed] for name in WORKFLOW_SIDE}
    assert outside == dict.fromkeys(WORKFLOW_SIDE, [])
    # The stream's reader workflow (reader.py) sees only the page types.
    reader = [m for _, m in imports_of(ROOT / "loader" / "engines" / "reader.py") if m.startswith("dsh.")]
    assert reader == ["dsh.loader.engines.pages"]


# Modules whose first import runs a package's import chain from an unusual end; a fresh interpreter
# each, so a cycle that a warm `sys.modules` would hide fails as an ImportError here.
# The AST walk above covers the rest; these are the ends the agent/loop and host/headless circles had.
FIRST_IMPORTS = ["dsh.loader.agent.loop", "dsh.loader.agent.phase", "dsh.loader.host.server", "dsh.loader.models.function"]


def test_each_module_imports_first_in_a_fresh_interpreter():
    # Started together, awaited together: one interpreter start-up of wall time, not four.
    runs = {m: subprocess.Popen([sys.executable, "-c", f"import {m}"], cwd=ROOT, text=True,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for m in FIRST_IMPORTS}
    failed = {m: p.communicate(timeout=120)[1] for m, p in runs.items()}
    assert {m: err for m, err in failed.items() if runs[m].returncode != 0} == {}
