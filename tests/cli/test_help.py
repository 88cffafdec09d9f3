"""Help pages (issue 11 item 3): an example epilog per command, the exit-code table on `dsh run`,
defaults shown (the profile rule too), booleans as bare flags, one metavar vocabulary, and help text
on every argument. The pages are read through the app (`--help`) and its click command tree."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import typer

from dsh.cli.app import app

COMMANDS = [
    ("run",), ("interrupt",), ("send",), ("flow",), ("sessions", "list"), ("sessions", "show"),
    ("sessions", "tree"), ("sessions", "prune"), ("config", "show"), ("worker",),
]


def leaves(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    if hasattr(command, "commands"):  # a group (typer's own command classes, not click's)
        for name, sub in command.commands.items():
            yield from leaves(sub, (*path, name))
    else:
        yield path, command


def page(dsh, *path: str) -> str:
    result = dsh(*path, "--help", env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return result.stdout


def test_every_command_is_covered_here():
    assert sorted(path for path, _ in leaves(typer.main.get_command(app))) == sorted(COMMANDS)


@pytest.mark.parametrize("path", COMMANDS, ids=" ".join)
def test_every_command_has_an_example_epilog(dsh, path):
    text = page(dsh, *path)

    examples = text.split("Examples:", 1)
    assert len(examples) == 2, text
    assert f"dsh {' '.join(path)}" in examples[1]


@pytest.mark.parametrize("path", COMMANDS, ids=" ".join)
def test_booleans_are_bare_flags_and_every_parameter_has_help(dsh, path):
    text = page(dsh, *path)

    assert "<bool>" not in text
    command = dict(leaves(typer.main.get_command(app)))[path]
    for param in command.params:
        assert getattr(param, "help", None), f"{' '.join(path)}: {param.name} has no help text"


def test_run_help_has_the_exit_code_table_and_the_profile_rule(dsh):
    text = " ".join(page(dsh, "run").split())

    for row in ("0 the root completed", "1 the root ended with an error", "2 usage or configuration error",
                "3 the root hit its output token limit", "4 the root was aborted", "5 the root's turn was refused",
                "130 interrupted by Ctrl-C", "143 stopped by SIGTERM", "Precedence: 130/143 > 2 > violations"):
        assert row in text, row
    assert "--profile NAME Profile name or path. [default: $DSH_PROFILE, else 'test' under --transcript, else 'default']" in text
    assert "[default: $DSH_HOME, else ~/.dsh]" in text


@pytest.mark.parametrize(("path", "usage"), [
    (("run",), "Usage: dsh run [OPTIONS] [TASK]"),
    (("interrupt",), "Usage: dsh interrupt [OPTIONS] {ADDRESS}"),
    (("send",), "Usage: dsh send [OPTIONS] {ADDRESS} {MESSAGE}"),
    (("sessions", "show"), "Usage: dsh sessions show [OPTIONS] {SESSION_ID}"),
    (("sessions", "tree"), "Usage: dsh sessions tree [OPTIONS] {SESSION_ID}"),
], ids=lambda v: " ".join(v) if isinstance(v, tuple) else None)
def test_metavars_are_one_vocabulary(dsh, path, usage):
    """Typer marks a required argument `{X}` and an optional one `[X]`; the names are ours."""
    assert page(dsh, *path).splitlines()[0] == usage


@pytest.mark.parametrize("path", [("sessions", "list"), ("sessions", "show"), ("sessions", "tree")], ids=" ".join)
def test_sessions_json_help_says_ndjson_because_it_prints_ndjson(dsh, home, path):
    assert "--json NDJSON on stdout: one JSON object per line." in " ".join(page(dsh, *path).split())


def test_json_is_a_flag_so_a_value_after_it_is_the_task_and_dsh_says_so(dsh, home):
    result = dsh("run", "--json", "true", "--transcript", "hello", "--home", str(home))

    assert result.exit_code == 2 and result.stdout == ""
    assert "flags such as --json and --quiet take no value, so 'true' was read as the TASK" in result.stderr


def test_json_as_a_bare_flag_runs(dsh, home):
    result = dsh("run", "--json", "--transcript", "hello", "--home", str(home))

    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert result.exit_code == 0 and records[-1]["type"] == "result" and records[-1]["exitCode"] == 0
