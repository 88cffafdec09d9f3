"""Fuzzing (issue 15 item 7): CLI ids and addresses — `dsh sessions show|tree ID` and
`dsh interrupt|send ADDRESS` — against a home holding one finished tree (no live run). Invariants:
a documented exit code, no traceback, the home unchanged (checksummed before and after), each case
within the deadline.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import pytest
from cli_kit import run_dsh
from fuzz_kit import TRACEBACK, any_text, check_cli_result, fast_dsh, tree_digest
from hypothesis import given
from hypothesis import strategies as st

DSH = fast_dsh()
STRANGER = "session-00000000-0000-4000-8000-000000000000"


@pytest.fixture(scope="module")
def finished_home():
    scratch = Path(tempfile.mkdtemp(prefix="dsh-fuzz-", dir="/tmp"))
    home = scratch / "h"
    result = DSH("run", "--json", "--transcript", "background-settlement", "--home", home)
    assert result.exit_code == 0, result.stderr
    start = next(r for r in map(json.loads, result.stdout.splitlines())
                 if r["type"] == "lifecycle" and r["name"] == "subagent/start")
    yield home, start["parentSessionId"], start["sessionId"]
    shutil.rmtree(scratch, ignore_errors=True)


TWEAKS = ["", "/", "..", "/..", "../", ".", "\n", "\x00", " ", "\\", "\ud800", "é", "a" * 200, "/x/y", "%2e%2e"]


def _ids(root: str, child: str) -> st.SearchStrategy[str]:
    real = st.sampled_from([root, child, STRANGER, "session-x", "a", ""])
    tweaked = st.tuples(st.sampled_from(TWEAKS), real, st.sampled_from(TWEAKS)).map("".join)
    return st.one_of(real, tweaked, any_text)


EXIT_CODES = {"show": {0, 2}, "tree": {0, 2}, "interrupt": {0, 1, 2}, "send": {1, 2}}


@given(data=st.data())
def test_fuzz_ids_and_addresses(finished_home, data):
    home, root, child = finished_home
    command = data.draw(st.sampled_from(sorted(EXIT_CODES)))
    ids = _ids(root, child)
    if command in ("show", "tree"):
        argv = ["sessions", command, data.draw(ids)]
    else:
        address = data.draw(st.one_of(st.tuples(ids, ids).map("/".join), ids))
        argv = [command, address, *(["more"] if command == "send" else [])]
    before = tree_digest(home)

    result = DSH(*argv, "--home", home)

    check_cli_result(result, EXIT_CODES[command])
    assert tree_digest(home) == before


def test_ids_smoke_in_a_subprocess(finished_home):
    home, root, child = finished_home
    before = tree_digest(home)
    for argv in (["sessions", "tree", f"../sessions/{root}"], ["sessions", "show", "a" * 300],
                 ["interrupt", f"{child}/{root}"], ["send", f"{root}/{root}", "x"]):
        done = run_dsh(*argv, "--home", home)
        assert done.returncode == 2 and TRACEBACK not in done.stderr, (argv, done.stderr)
        assert done.stderr.startswith("dsh: ") and done.stderr.count("\n") == 1
    assert tree_digest(home) == before
