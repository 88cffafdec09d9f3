"""Transcript lint (issue 10): tool names, arguments and placeholders in replies are checked against
the real tool schemas when a transcript is loaded for a run; each problem is one
`file:line:col: key.path: problem` line and the command exits 2 before anything runs."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from dsh.cli.main import app
from dsh.loader.errors import TranscriptError
from dsh.loader.tools import TOOL_PARAMETERS, lint_transcript
from dsh.loader.transcripts import load_transcript

SHIPPED = Path(__file__).resolve().parents[2] / "transcripts"

HEADER = "version: 1\nname: lint-case\ntask: go\nagents:\n"


def write(tmp_path: Path, agents: str) -> Path:
    path = tmp_path / "lint-case.yaml"
    path.write_text(HEADER + agents)
    return path


def problems(path: Path) -> list[str]:
    with pytest.raises(TranscriptError) as caught:
        lint_transcript(load_transcript(path))
    assert caught.value.code == "TRANSCRIPT_INVALID"
    return caught.value.message.splitlines()


def test_report_with_a_message_argument_is_located_at_the_argument(tmp_path):
    path = write(tmp_path, """\
  root:
    replies:
      - toolCalls: [{id: s, name: subagent, arguments: {label: w, prompt: p}}]
      - text: done
  w:
    spawnedBy: s
    replies:
      - toolCalls: [{id: r, name: report, arguments: {message: hi}}]
      - text: ok
""")
    assert problems(path) == [
        f"{path}:12:43: agents.w.replies[0].toolCalls[0].arguments.output: report: required argument is missing",
        f"{path}:12:55: agents.w.replies[0].toolCalls[0].arguments.message: report: unknown argument",
    ]


def test_a_made_up_tool_name_is_an_error_at_the_name(tmp_path):
    path = write(tmp_path, """\
  root:
    replies:
      - toolCalls: [{id: x, name: frobnicate, arguments: {}}]
""")
    assert problems(path) == [
        f"{path}:7:29: agents.root.replies[0].toolCalls[0].name: unknown tool; root cannot call 'frobnicate' "
        "(it can call: subagent, send_message, list_agents, interrupt_agent)",
    ]


@pytest.mark.parametrize(("who", "spawn_extra", "tool"), [
    pytest.param("root", "", "report", id="root-has-no-report"),
    pytest.param("w", ", run_in_background: false", "list_agents", id="one-shot-has-no-tools"),
])
def test_a_tool_the_agent_cannot_see_is_an_error(tmp_path, who, spawn_extra, tool):
    path = write(tmp_path, f"""\
  root:
    replies:
      - toolCalls: [{{id: s, name: subagent, arguments: {{label: w, prompt: p{spawn_extra}}}}}]
      - {"toolCalls: [{id: t, name: " + tool + ", arguments: {output: x}}]" if who == "root" else "text: done"}
  w:
    spawnedBy: s
    replies:
      - {"toolCalls: [{id: t, name: " + tool + ", arguments: {}}]" if who == "w" else "text: ok"}
""")
    [line] = problems(path)
    assert f"{who} cannot call '{tool}'" in line and ".name: " in line


def test_placeholders_are_resolved_statically(tmp_path):
    path = write(tmp_path, """\
  root:
    replies:
      - toolCalls: [{id: s, name: subagent, arguments: {label: w, prompt: "{{child:nope}}"}}]
      - toolCalls: [{id: m, name: send_message, arguments: {agent_id: "{{session:ghost}}", message: "{{child:s}} {{session:w}}"}}]
      - text: done
  w: {spawnedBy: s, replies: [{text: ok}]}
""")
    assert problems(path) == [
        f"{path}:7:67: agents.root.replies[0].toolCalls[0].arguments.prompt: {{{{child:nope}}}}: no subagent tool call has id 'nope'",
        f"{path}:8:61: agents.root.replies[1].toolCalls[0].arguments.agent_id: {{{{session:ghost}}}}: no agent 'ghost' in this transcript",
    ]


def test_an_invalid_json_argument_string_is_left_to_the_runtime(tmp_path):
    """The recorder writes the model's invalid JSON verbatim (§15.5); the tool answers INVALID_ARGS."""
    path = write(tmp_path, """\
  root:
    replies:
      - toolCalls: [{id: l, name: list_agents, arguments: "{not json"}]
      - text: done
""")
    lint_transcript(load_transcript(path))


def test_a_json_string_argument_is_validated_like_a_mapping(tmp_path):
    path = write(tmp_path, """\
  root:
    replies:
      - toolCalls: [{id: l, name: list_agents, arguments: '{"scope": "everyone"}'}]
""")
    [line] = problems(path)
    assert line.startswith(f"{path}:7:48: agents.root.replies[0].toolCalls[0].arguments: list_agents: ")


@pytest.mark.parametrize("command", [("flow",), ("run", "--transcript")])
def test_the_commands_exit_2_with_the_located_problem_before_running(tmp_path, command):
    path = write(tmp_path, """\
  root:
    replies:
      - toolCalls: [{id: x, name: frobnicate, arguments: {}}]
""")
    result = CliRunner().invoke(app, [*command, str(path), "--home", str(tmp_path / "h")] if command[0] == "run"
                                else [*command, str(path)])
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr.startswith(f"dsh: {path}:7:29: agents.root.replies[0].toolCalls[0].name: unknown tool")
    assert not (tmp_path / "h").exists()


def test_every_shipped_transcript_passes_the_lint():
    for path in sorted(SHIPPED.glob("*.yaml")):
        lint_transcript(load_transcript(path))


def test_every_tool_has_a_parameter_model_and_the_readme_documents_its_arguments():
    readme = (SHIPPED / "README.md").read_text()
    for name, model in TOOL_PARAMETERS.items():
        assert f"`{name}`" in readme
        for field, info in model.model_fields.items():
            assert f"`{field}`" in readme, f"{name}.{field} is not documented in transcripts/README.md"
