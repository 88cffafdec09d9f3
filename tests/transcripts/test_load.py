"""Loading transcripts: shipped names, paths, and located error messages (SPEC §15.1, §22).

Each bad-input test writes a small file into `tmp_path` and pins the whole location prefix
`<file>:<line>:<col>: <key.path>:`. Expected positions are computed from the text itself with `at`
so the YAML stays readable; `at` is 1-based like the messages.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from dsh.loader.errors import ConfigError, TranscriptError
from dsh.loader.transcripts import Transcript, load_transcript


def write(tmp_path: Path, text: str) -> tuple[Path, str]:
    body = textwrap.dedent(text).lstrip("\n")
    path = tmp_path / "scenario.yaml"
    path.write_text(body, encoding="utf-8")
    return path, body


def at(body: str, needle: str, occurrence: int = 1) -> str:
    """`line:col` of the `occurrence`-th `needle` in `body`."""
    index = -1
    for _ in range(occurrence):
        index = body.index(needle, index + 1)
    line = body.count("\n", 0, index) + 1
    col = index - (body.rfind("\n", 0, index) + 1) + 1
    return f"{line}:{col}"


def load_error(path: Path) -> str:
    with pytest.raises(TranscriptError) as info:
        load_transcript(path)
    assert info.value.code == "TRANSCRIPT_INVALID"
    return info.value.message


VALID = textwrap.dedent("""
    version: 1
    name: demo
    task: Do it.
    agents:
      root:
        replies:
          - toolCalls:
              - {id: start, name: subagent, arguments: {prompt: go}}
          - text: done
      child:
        spawnedBy: start
        replies:
          - text: child done
""")


def test_the_shipped_hello_transcript_loads_by_name() -> None:
    transcript = load_transcript("hello")

    assert isinstance(transcript, Transcript)
    assert transcript.path.name == "hello.yaml"
    assert (transcript.name, transcript.task) == ("hello", "Say hello.")
    assert transcript.spec.agents["root"].replies[0].text == "Hello from dsh."


def test_an_unknown_name_is_a_config_error_listing_the_available_names() -> None:
    with pytest.raises(ConfigError) as info:
        load_transcript("no-such-scenario")

    assert "hello" in info.value.message


def test_a_valid_file_loads_by_path_and_by_path_string(tmp_path: Path) -> None:
    path, _ = write(tmp_path, VALID)

    by_path = load_transcript(path)
    by_string = load_transcript(str(path))

    assert by_path.spec == by_string.spec
    assert by_path.spec.agents["child"].spawned_by == "start"
    calls = by_path.spec.agents["root"].replies[0].tool_calls
    assert calls is not None and calls[0].arguments == {"prompt": "go"}


def test_validated_data_holds_builtin_types_not_ruamel_ones(tmp_path: Path) -> None:
    path, _ = write(tmp_path, VALID)

    calls = load_transcript(path).spec.agents["root"].replies[0].tool_calls

    assert calls is not None
    assert type(calls[0].arguments) is dict and type(calls[0].arguments["prompt"]) is str


def test_an_unknown_key_is_reported_at_the_key_itself(tmp_path: Path) -> None:
    path, body = write(
        tmp_path, VALID.replace("spawnedBy: start", "spawnedBy: start\n    colour: red")
    )

    message = load_error(path)

    assert message == f"{path}:{at(body, 'colour')}: agents.child.colour: unknown key"


def test_a_bad_value_is_reported_at_its_key_with_the_problem(tmp_path: Path) -> None:
    path, body = write(tmp_path, VALID.replace("version: 1", "version: 2"))

    message = load_error(path)

    assert message.startswith(f"{path}:{at(body, 'version')}: version: ")
    assert "1" in message.split("version: ", 1)[1]


def test_a_bad_reply_value_names_the_list_index_in_the_key_path(tmp_path: Path) -> None:
    path, body = write(
        tmp_path, VALID.replace("- text: done", "- text: done\n        finish: later")
    )

    message = load_error(path)

    assert message.startswith(f"{path}:{at(body, 'finish')}: agents.root.replies[1].finish: ")


def test_a_missing_task_is_reported_at_the_document_mapping(tmp_path: Path) -> None:
    path, _ = write(tmp_path, VALID.replace("task: Do it.\n", ""))

    message = load_error(path)

    assert message == f"{path}:1:1: task: required key is missing"


def test_a_missing_nested_key_is_reported_at_its_parent_mapping(tmp_path: Path) -> None:
    path, body = write(tmp_path, VALID.replace("    replies:\n      - text: child done\n", ""))

    message = load_error(path)

    assert message == f"{path}:{at(body, 'child:')}: agents.child.replies: required key is missing"


def test_a_duplicate_tool_call_id_is_reported_at_the_second_id(tmp_path: Path) -> None:
    path, body = write(
        tmp_path,
        VALID.replace(
            "- text: child done", "- toolCalls: [{id: start, name: report, arguments: '{}'}]"
        ),
    )

    message = load_error(path)

    assert message.startswith(
        f"{path}:{at(body, 'id: start', 2)}: agents.child.replies[0].toolCalls[0].id: "
    )
    assert "start" in message and "root" in message


def test_spawned_by_naming_no_subagent_call_is_reported_at_spawned_by(tmp_path: Path) -> None:
    path, body = write(tmp_path, VALID.replace("spawnedBy: start", "spawnedBy: elsewhere"))

    message = load_error(path)

    assert message.startswith(f"{path}:{at(body, 'spawnedBy')}: agents.child.spawnedBy: ")
    assert "elsewhere" in message


def test_spawned_by_naming_a_tool_call_that_is_not_subagent_is_rejected(tmp_path: Path) -> None:
    path, body = write(tmp_path, VALID.replace("name: subagent", "name: report"))

    message = load_error(path)

    assert message.startswith(f"{path}:{at(body, 'spawnedBy')}: agents.child.spawnedBy: ")


def test_an_order_gap_is_reported_at_the_order_out_of_range(tmp_path: Path) -> None:
    path, body = write(
        tmp_path,
        """
        version: 1
        name: demo
        task: Do it.
        agents:
          root: {replies: [{text: r}]}
          first: {order: 1, replies: [{text: a}]}
          third: {order: 3, replies: [{text: c}]}
    """,
    )

    message = load_error(path)

    assert message.startswith(f"{path}:{at(body, 'order: 3')}: agents.third.order: ")
    assert "1..2" in message


def test_a_repeated_order_is_reported_at_the_second_one(tmp_path: Path) -> None:
    path, body = write(
        tmp_path,
        """
        version: 1
        name: demo
        task: Do it.
        agents:
          root: {replies: [{text: r}]}
          a: {order: 1, replies: []}
          b: {order: 1, replies: []}
    """,
    )

    message = load_error(path)

    assert message.startswith(f"{path}:{at(body, 'order: 1', 2)}: agents.b.order: ")


def test_a_child_without_spawned_by_or_order_is_reported_at_its_key(tmp_path: Path) -> None:
    path, body = write(tmp_path, VALID.replace("    spawnedBy: start\n", ""))

    message = load_error(path)

    assert message.startswith(f"{path}:{at(body, 'child:')}: agents.child: ")


def test_root_with_an_order_is_rejected_at_the_order(tmp_path: Path) -> None:
    path, body = write(tmp_path, VALID.replace("  root:\n", "  root:\n    order: 1\n"))

    message = load_error(path)

    assert message.startswith(f"{path}:{at(body, 'order')}: agents.root.order: ")


def test_agents_without_root_are_rejected_at_agents(tmp_path: Path) -> None:
    path, body = write(
        tmp_path,
        """
        version: 1
        name: demo
        task: Do it.
        agents:
          worker: {order: 1, replies: []}
    """,
    )

    message = load_error(path)

    assert message == f"{path}:{at(body, 'agents')}: agents: agents must contain root"


def test_a_badly_named_agent_key_is_reported_at_that_key(tmp_path: Path) -> None:
    path, body = write(tmp_path, VALID.replace("  child:", "  Child_1:"))

    message = load_error(path)

    assert message.startswith(f"{path}:{at(body, 'Child_1')}: agents.Child_1: ")


def test_a_reply_mixing_hang_with_text_is_reported_at_the_reply(tmp_path: Path) -> None:
    path, body = write(tmp_path, VALID.replace("- text: child done", "- {hang: {}, text: no}"))

    message = load_error(path)

    assert message.startswith(f"{path}:{at(body, '{hang')}: agents.child.replies[0]: hang cannot")


def test_arguments_of_the_wrong_type_give_one_line_for_the_key(tmp_path: Path) -> None:
    path, body = write(tmp_path, VALID.replace("arguments: {prompt: go}", "arguments: 5"))

    message = load_error(path)

    assert "\n" not in message
    assert message.startswith(
        f"{path}:{at(body, 'arguments')}: agents.root.replies[0].toolCalls[0].arguments: "
    )


def test_several_bad_keys_give_one_line_each(tmp_path: Path) -> None:
    path, body = write(
        tmp_path, VALID.replace("version: 1", "version: 2").replace("name: demo", "name: Demo")
    )

    lines = load_error(path).splitlines()

    assert [line.split(": ")[0:2] for line in lines] == [
        [f"{path}:{at(body, 'version')}", "version"],
        [f"{path}:{at(body, 'name')}", "name"],
    ]


def test_malformed_yaml_reports_the_parser_position_and_problem(tmp_path: Path) -> None:
    path, _ = write(
        tmp_path,
        """
        version: 1
        name: demo
        task: [unclosed
        agents: {}
    """,
    )

    message = load_error(path)

    assert message.startswith(f"{path}:4:7: ")
    assert "expected ',' or ']'" in message


def test_a_duplicate_yaml_key_is_reported_at_the_second_occurrence(tmp_path: Path) -> None:
    path, body = write(tmp_path, VALID.replace("task: Do it.", "task: Do it.\ntask: Again."))

    message = load_error(path)

    assert message.startswith(f"{path}:{at(body, 'task', 2)}: ")
    assert "duplicate key" in message and "task" in message


def test_a_document_that_is_not_a_mapping_is_rejected(tmp_path: Path) -> None:
    path, _ = write(tmp_path, "- just\n- a list\n")

    assert load_error(path) == f"{path}:1:1: a transcript must be a YAML mapping"


def test_an_empty_file_is_rejected(tmp_path: Path) -> None:
    path, _ = write(tmp_path, "")

    assert load_error(path) == f"{path}:1:1: a transcript must be a YAML mapping"
