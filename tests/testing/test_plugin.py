"""The pytest plugin (SPEC §20.3): `dsh_flow`, `flow_snapshot` and read-only snapshots in CI."""

from __future__ import annotations

import json
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest

from dsh.loader.testing import Flow, TranscriptViolation
from dsh.loader.testing.plugin import ci_is_read_only

PLUGIN = "dsh.loader.testing.plugin"


def test_background_settlement_flow_matches_snapshot(dsh_flow: Any, flow_snapshot: Any) -> None:
    assert dsh_flow("background-settlement") == flow_snapshot


def test_same_transcript_gives_byte_identical_yaml_five_times(dsh_flow: Any) -> None:
    texts = {dsh_flow("background-settlement").yaml for _ in range(5)}
    assert len(texts) == 1


async def test_async_variant_runs_and_sync_form_refuses_a_running_loop(dsh_flow: Any) -> None:
    flow = await dsh_flow.arun("hello")
    assert isinstance(flow, Flow) and flow["result"]["output"] == "Hello from dsh."
    with pytest.raises(RuntimeError, match="dsh_flow.arun"):
        dsh_flow("hello")


def test_violations_raise_with_the_flow_attached(dsh_flow: Any, tmp_path: Path) -> None:
    script = tmp_path / "unconsumed.yaml"
    script.write_text(json.dumps({
        "version": 1, "name": "unconsumed", "task": "hi",
        "agents": {"root": {"replies": [{"text": "one"}, {"text": "never asked for"}]}},
    }))
    with pytest.raises(TranscriptViolation) as caught:
        dsh_flow(script)
    assert [v["code"] for v in caught.value.violations] == ["REPLAY_UNCONSUMED"]
    assert caught.value.flow["violations"] == [{"code": "REPLAY_UNCONSUMED", "agent": "root"}]
    assert caught.value.flow["result"] == {"stopReason": "completed", "exitCode": 1, "output": "one"}


@pytest.mark.parametrize(("value", "read_only"), [
    pytest.param(None, False, id="unset"),
    pytest.param("", False, id="empty"),
    pytest.param("0", False, id="zero"),
    pytest.param("false", False, id="false"),
    pytest.param("False", False, id="false-capitalized"),
    pytest.param("true", True, id="true"),
    pytest.param("1", True, id="one"),
    pytest.param("yes", True, id="anything-else"),
])
def test_ci_variable_decides_read_only(value: str | None, read_only: bool) -> None:
    assert ci_is_read_only({} if value is None else {"CI": value}) is read_only


SNAPSHOT_TEST = """
def test_scenario(dsh_flow, flow_snapshot):
    assert dsh_flow("background-settlement") == flow_snapshot
"""


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    installed = any(ep.value == PLUGIN for ep in entry_points(group="pytest11"))
    plugin = () if installed else ("-p", PLUGIN)  # the entry point loads it under the name `dsh`
    return pytester.runpytest_inprocess(*plugin, "-p", "no:cacheprovider", *args)


def test_m113_snapshot_update_is_a_usage_error_in_ci(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """Matrix 113: `CI=true` with `--snapshot-update` is refused before anything runs."""
    pytester.makepyfile(test_scenario=SNAPSHOT_TEST)
    monkeypatch.setenv("CI", "true")
    result = _run(pytester, "--snapshot-update")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--snapshot-update is refused in CI*"])
    assert not (pytester.path / "__snapshots__").exists()


def test_m113_missing_snapshot_fails_in_ci_and_a_local_update_fixes_it(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Matrix 113: a missing snapshot fails; written locally, the same run passes read-only."""
    pytester.makepyfile(test_scenario=SNAPSHOT_TEST)
    monkeypatch.setenv("CI", "true")
    missing = _run(pytester)
    assert missing.ret == pytest.ExitCode.TESTS_FAILED
    missing.stdout.fnmatch_lines(["*does not exist*"])

    monkeypatch.setenv("CI", "false")
    assert _run(pytester, "--snapshot-update").ret == pytest.ExitCode.OK
    stored = pytester.path / "__snapshots__" / "test_scenario" / "test_scenario.flow.yaml"
    assert stored.read_text().startswith("flow: 1\ntranscript: background-settlement\n")

    monkeypatch.setenv("CI", "true")
    assert _run(pytester).ret == pytest.ExitCode.OK


# -- issue 10: repeat ------------------------------------------------------------------------------

TWO_SIBLINGS = Path(__file__).resolve().parents[1] / "replay" / "two-background-siblings.yaml"


def test_repeat_returns_the_one_flow_all_runs_gave(dsh_flow: Any) -> None:
    assert dsh_flow(TWO_SIBLINGS, repeat=5) == dsh_flow(TWO_SIBLINGS)


async def test_async_repeat_returns_the_one_flow(dsh_flow: Any) -> None:
    flow = await dsh_flow.arun("hello", repeat=3)
    assert flow["result"]["output"] == "Hello from dsh."


def test_repeat_raises_flows_differ_with_the_diff_when_runs_disagree(dsh_flow: Any, threaded_replay: None) -> None:
    from dsh.loader.testing import FlowsDiffer

    with pytest.raises(FlowsDiffer) as caught:
        dsh_flow(TWO_SIBLINGS, repeat=30)
    assert (caught.value.name, caught.value.runs, caught.value.first) == ("two-background-siblings", 30, 1)
    assert caught.value.diff.startswith("--- two-background-siblings (run 1)\n+++ two-background-siblings (run ")


def test_repeat_keeps_violations_failing(dsh_flow: Any, tmp_path: Path) -> None:
    script = tmp_path / "unconsumed.yaml"
    script.write_text(json.dumps({
        "version": 1, "name": "unconsumed", "task": "hi",
        "agents": {"root": {"replies": [{"text": "one"}, {"text": "never asked for"}]}},
    }))
    with pytest.raises(TranscriptViolation):
        dsh_flow(script, repeat=3)


REPEAT_TEST = '''
def test_repeat_option(dsh_flow, tmp_path_factory):
    dsh_flow("hello")
    assert len(list(tmp_path_factory.getbasetemp().glob("dsh-flow[0-9]*"))) == 3
'''


def test_dsh_repeat_option_sets_the_default_repeat(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_repeat=REPEAT_TEST)
    assert _run(pytester, "--dsh-repeat", "3").ret == pytest.ExitCode.OK
    assert _run(pytester).ret == pytest.ExitCode.TESTS_FAILED  # one run, one home
