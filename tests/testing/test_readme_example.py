"""`transcripts/README.md` tells users to snapshot a transcript with two lines of pytest; this runs
exactly the README's worked example and its two-line test, as a user would, in a fresh project."""

from __future__ import annotations

import re
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest

README = Path(__file__).resolve().parents[2] / "transcripts" / "README.md"
PLUGIN = "dsh.loader.testing.plugin"


def block(section: str, language: str) -> str:
    """The first fenced code block of `language` under the `## <section>` heading."""
    text = README.read_text()
    body = text.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    match = re.search(rf"```{language}\n(.*?)```", body, re.DOTALL)
    assert match is not None, f"no {language} block under ## {section}"
    return match.group(1)


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    installed = any(ep.value == PLUGIN for ep in entry_points(group="pytest11"))
    plugin = () if installed else ("-p", PLUGIN)
    return pytester.runpytest_inprocess(*plugin, "-p", "no:cacheprovider", *args)


def test_worked_example_prints_what_the_readme_says(dsh_flow: Any, tmp_path: Path) -> None:
    path = tmp_path / "my.yaml"
    path.write_text(block("Worked example", "yaml"))
    flow = dsh_flow(path)
    assert flow["result"] == {"stopReason": "completed", "exitCode": 0, "output": "HELPER_DONE"}
    [notice] = flow["notices"]
    assert (notice["from"], notice["queue"], notice["claimedAt"]) == ("S2", "next-turn", {"turn": 2, "step": 1})


def test_two_line_snapshot_example_works_in_a_fresh_project(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    snapshot_test = block("Snapshot your own transcript with two lines of pytest", "python")
    assert len(snapshot_test.strip().splitlines()) == 2
    (pytester.path / "path" / "to").mkdir(parents=True)
    (pytester.path / "path" / "to" / "my.yaml").write_text(block("Worked example", "yaml"))
    pytester.makepyfile(test_my=snapshot_test)

    monkeypatch.delenv("CI", raising=False)
    _run(pytester, "--snapshot-update").assert_outcomes(passed=1)
    stored = pytester.path / "__snapshots__" / "test_my" / "test_my_flow.flow.yaml"
    assert stored.read_text().startswith("flow: 1\ntranscript: my-flow\n")

    monkeypatch.setenv("CI", "true")  # read-only, as in CI: the committed snapshot matches
    _run(pytester).assert_outcomes(passed=1)
