"""`dsh sessions list|show|tree` (SPEC §19, §5.6): read-only views of `$DSH_HOME/sessions`.

The home is the one a replay of scenario (a) leaves: a root and one continuable child, both
`completed`. The views never repair or lock anything, so a torn tail is reported and the file's
bytes stay as they were; liveness comes from the run's socket, checked against a live subprocess.
"""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path

import pytest
from cli_kit import log_events, start_hanging_child

from dsh.loader.texts import render

ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


@pytest.fixture
def tree_home(dsh, home):
    """`(root, child)` of a finished background-settlement run under `home`."""
    result = dsh("run", "--json", "--transcript", "background-settlement", "--home", home)
    assert result.exit_code == 0, result.stderr
    start = next(r for r in map(json.loads, result.stdout.splitlines())
                 if r["type"] == "lifecycle" and r["name"] == "subagent/start")
    return start["parentSessionId"], start["sessionId"]


def log_path(home: Path, sid: str) -> Path:
    return home / "sessions" / sid / "session.jsonl"


def test_list_prints_a_header_then_one_row_per_session_oldest_first(dsh, home, tree_home):
    root, child = tree_home

    result = dsh("sessions", "list", "--home", home)

    assert (result.exit_code, result.stderr) == (0, "")
    header, *rows = [line.split() for line in result.stdout.splitlines()]
    assert header == ["ID", "CREATED", "STATE", "LAST", "STOP", "TURNS", "LABEL", "TASK"]
    assert [r[0] for r in rows] == [root, child]
    assert rows[0][2:6] == ["saved", "completed", "1", "-"] and " ".join(rows[0][6:]).startswith("Start a background")
    assert rows[1][2:7] == ["saved", "completed", "1", "answer", "child"]
    assert " ".join(rows[1][7:]) == "Reply with CHILD_RESULT."
    assert all(ISO.match(r[1]) for r in rows)
    starts = [line.index("STATE") for line in result.stdout.splitlines()[:1]]
    assert all(line[starts[0]:].startswith("saved") for line in result.stdout.splitlines()[1:])  # aligned


def test_list_json_rows_carry_one_vocabulary(dsh, home, tree_home):
    """NDJSON, every row with the same keys, `null` for unknown, a boolean `live`."""
    root, child = tree_home

    result = dsh("sessions", "list", "--json", "--home", home)

    assert (result.exit_code, result.stderr) == (0, "")
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    headers = {sid: json.loads(log_path(home, sid).read_bytes().split(b"\n", 1)[0]) for sid in tree_home}
    last = {sid: log_events(home, sid)[-1]["time"] for sid in tree_home}
    assert rows == [
        {"id": root, "root": root, "parent": None, "address": None, "depth": 0, "origin": None, "mode": "root",
         "label": None, "task": "Start a background child that replies CHILD_RESULT, then te…",
         "createdAt": headers[root]["createdAt"], "lastActivity": last[root], "turns": 1, "lastTurnEnd": "completed",
         "lastStopReason": "completed", "live": False, "state": "saved", "error": None},
        {"id": child, "root": root, "parent": root, "address": f"{root}/{child}", "depth": 1, "origin": "subagent",
         "mode": "continuable", "label": "answer child", "task": "Reply with CHILD_RESULT.",
         "createdAt": headers[child]["createdAt"], "lastActivity": last[child], "turns": 1,
         "lastTurnEnd": "completed", "lastStopReason": "completed", "live": False, "state": "saved", "error": None},
    ]


def test_list_roots_and_limit_filter_the_rows(dsh, home, tree_home):
    root, child = tree_home
    assert dsh("run", "--transcript", "hello", "--home", home).exit_code == 0
    newest = next(p.name for p in (home / "sessions").iterdir() if p.name not in tree_home)

    def ids(*flags: str) -> list[str]:
        result = dsh("sessions", "list", "--json", *flags, "--home", home)
        assert (result.exit_code, result.stderr) == (0, "")
        return [json.loads(line)["id"] for line in result.stdout.splitlines()]

    assert ids() == [root, child, newest]
    assert ids("--roots") == [root, newest]
    assert ids("--limit", "2") == [child, newest]
    assert ids("--roots", "--limit", "1") == [newest]
    assert ids("--live") == []
    assert dsh("sessions", "list", "--limit", "0", "--home", home).exit_code == 2


def test_new_children_share_the_root_id_format_and_old_bare_ids_still_read(dsh, home, tree_home):
    """Issue 11 item 4: one id format, `session-<uuid4>`, for roots and children; a child saved with
    a bare uuid by an older dsh still lists and shows in its tree."""
    root, child = tree_home
    assert root.startswith("session-") and child.startswith("session-")
    old = "0b5e5f0e-5b1c-4c3e-9d2f-7d8a6b4c2e10"
    header = json.loads(log_path(home, child).read_bytes().split(b"\n", 1)[0])
    (home / "sessions" / old).mkdir(mode=0o700)
    log_path(home, old).write_text(json.dumps({**header, "id": old}) + "\n")

    listed = dsh("sessions", "list", "--json", "--home", home)
    tree = dsh("sessions", "tree", root, "--json", "--home", home)

    assert {json.loads(line)["id"]: json.loads(line)["state"] for line in listed.stdout.splitlines()}[old] == "saved"
    # same createdAt as the copied header: ties sort by id
    assert [json.loads(line)["address"] for line in tree.stdout.splitlines()][1:] == [f"{root}/{old}", f"{root}/{child}"]


def test_show_prints_seq_type_summary_per_event_and_json_prints_the_log(dsh, home, tree_home):
    root, _child = tree_home
    events = log_events(home, root)

    text = dsh("sessions", "show", root, "--home", home)
    raw = dsh("sessions", "show", root, "--json", "--home", home)

    assert (text.exit_code, text.stderr, raw.exit_code, raw.stderr) == (0, "", 0, "")
    lines = text.stdout.splitlines()
    assert [line.split()[:2] for line in lines] == [[str(e["seq"]), e["type"]] for e in events]
    assert lines[-1].split()[2:] == ["turn=1", "completed"]
    assert any("PARENT_RECEIVED_CHILD_RESULT" in line for line in lines)
    header, *shown = [json.loads(line) for line in raw.stdout.splitlines()]
    assert header["id"] == root and header["type"] == "session"
    assert shown == events


def test_show_reports_a_torn_tail_without_repairing_it(dsh, home, tree_home):
    """§5.6 / §22: read-only views ignore a torn final line, say so on stderr, and leave the bytes."""
    root, _child = tree_home
    path = log_path(home, root)
    good = path.read_bytes()
    path.write_bytes(good + b'{"type":"turn/start","seq":19,"ti')
    torn = path.read_bytes()

    result = dsh("sessions", "show", root, "--home", home)

    assert result.exit_code == 0
    assert len(result.stdout.splitlines()) == len(log_events(home, root))
    assert result.stderr == f"dsh: {root}: torn tail after byte {len(good)} (ignored; a resume repairs it)\n"
    assert path.read_bytes() == torn


def test_show_reports_a_corrupt_log_without_touching_it(dsh, home, tree_home):
    """Damage before a committed `turn/end` is corruption (§5.6): reported with its code, exit 1."""
    root, _child = tree_home
    path = log_path(home, root)
    lines = path.read_bytes().split(b"\n")
    lines[3] = b"{not json"
    path.write_bytes(b"\n".join(lines))
    damaged = path.read_bytes()

    result = dsh("sessions", "show", root, "--home", home)

    assert (result.exit_code, result.stdout) == (1, "")
    assert result.stderr.startswith(f"dsh: {root}: ") and result.stderr.endswith("[SESSION_CORRUPT]\n")
    assert path.read_bytes() == damaged
    path.write_bytes(b"\n".join(lines[:3]) + b"\n")  # leave a valid log for the home's teardown check


@pytest.mark.parametrize("command", ["show", "tree"])
def test_unknown_session_id_exits_2(dsh, home, tree_home, command):
    result = dsh("sessions", command, "session-nope", "--home", home)

    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == "dsh: " + render("T-CLI-UNKNOWN-SESSION", id="session-nope", home=home) + "\n"


def test_tree_shows_each_child_with_label_mode_stop_reason_and_address(dsh, home, tree_home):
    root, child = tree_home

    text = dsh("sessions", "tree", root, "--home", home)
    raw = dsh("sessions", "tree", root, "--json", "--home", home)
    listed = dsh("sessions", "list", "--json", "--home", home)

    assert (text.exit_code, text.stderr) == (0, "")
    assert text.stdout == (f"{root} root completed\n"
                           f"  {child} [answer child] continuable completed  address {root}/{child}\n")
    rows = [json.loads(line) for line in raw.stdout.splitlines()]
    assert rows == [json.loads(line) for line in listed.stdout.splitlines()]  # one vocabulary
    assert [(r["depth"], r["address"], r["live"]) for r in rows] == [(0, None, False), (1, f"{root}/{child}", False)]


def test_the_printed_address_is_the_one_send_takes(dsh, home, tree_home):
    """The address passes `send`'s header check (exit 2 otherwise); no run is live, so exit 1."""
    root, child = tree_home
    address = dsh("sessions", "tree", root, "--home", home).stdout.splitlines()[1].split("address ")[1]

    sent = dsh("send", address, "more", "--home", home)

    assert (sent.exit_code, sent.stdout) == (1, "")
    assert sent.stderr == "dsh: " + render("T-CLI-SEND-NO-RUN", child=child) + "\n"


def test_list_and_tree_ask_the_live_run_for_liveness(dsh, live_run, home, tmp_path):
    """`live` comes from the owning run's socket answering `run.status`; `tree` adds each agent's
    status. A run whose child hangs stays live until SIGINT."""
    run, root, child = start_hanging_child(live_run, home, tmp_path)

    listed = dsh("sessions", "list", "--json", "--home", home)
    tree = dsh("sessions", "tree", root, "--json", "--home", home)

    live_only = dsh("sessions", "list", "--json", "--live", "--home", home)
    assert {r["id"]: r["live"] for r in map(json.loads, listed.stdout.splitlines())} == {root: True, child: True}
    assert [json.loads(line)["id"] for line in live_only.stdout.splitlines()] == [root, child]
    rows = [json.loads(line) for line in tree.stdout.splitlines()]
    assert [(r["id"], r["mode"]) for r in rows] == [(root, "root"), (child, "continuable")]
    assert [(r["live"], r["state"]) for r in rows] == [(True, "idle"), (True, "running")]
    assert rows[1]["lastStopReason"] is None  # its turn is open: no stop reason yet, null not "-"
    run.signal(signal.SIGINT)
    assert run.finish() == 130


# -- never-materialized directories (issue 9 item 2) -----------------------------------------------
UNMAT = "session-22222222-2222-4222-8222-222222222222"


def leave_unmaterialized(home: Path, sid: str = UNMAT, *, empty_file: bool = False) -> Path:
    """What a kill inside `store.create` leaves (or an older version's empty file)."""
    session_dir = home / "sessions" / sid
    session_dir.mkdir(parents=True)
    if empty_file:
        (session_dir / "session.jsonl").write_bytes(b"")
    else:
        (session_dir / ".session.jsonl.tmp-0123").write_bytes(b'{"type":"sess')
    return session_dir


def test_list_shows_an_unmaterialized_dir_as_one_row(dsh, home, tree_home):
    root, child = tree_home
    leave_unmaterialized(home)

    text = dsh("sessions", "list", "--home", home)
    raw = dsh("sessions", "list", "--json", "--home", home)

    assert (text.exit_code, text.stderr, raw.exit_code, raw.stderr) == (0, "", 0, "")
    assert [line.split("  ")[0] for line in text.stdout.splitlines()[1:]] == [root, child, UNMAT]
    assert text.stdout.splitlines()[-1].split() == [UNMAT, "-", "unmaterialized", "-", "-", "-", "-"]
    rows = [json.loads(line) for line in raw.stdout.splitlines()]
    assert set(rows[-1]) == set(rows[0])  # the same keys as a readable row
    assert {k: v for k, v in rows[-1].items() if v is not None} == {"id": UNMAT, "live": False, "state": "unmaterialized"}


@pytest.mark.parametrize("command", ["show", "tree"])
@pytest.mark.parametrize("empty_file", [False, True], ids=["temp-only", "empty-session-file"])
def test_show_and_tree_of_an_unmaterialized_dir_say_so_and_exit_2(dsh, home, command, empty_file):
    """Not SESSION_CORRUPT: one line naming the cleanup, exit 2 (nothing to show)."""
    session_dir = leave_unmaterialized(home, empty_file=empty_file)

    result = dsh("sessions", command, UNMAT, "--home", home)

    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == "dsh: " + render("T-CLI-UNMATERIALIZED", id=UNMAT, path=session_dir) + "\n"


def test_prune_unmaterialized_removes_only_those_and_prints_each(dsh, home, tree_home):
    root, child = tree_home
    a = leave_unmaterialized(home)
    b = leave_unmaterialized(home, "session-33333333-3333-4333-8333-333333333333", empty_file=True)
    before = {sid: log_path(home, sid).read_bytes() for sid in tree_home}

    dry = dsh("sessions", "prune", "--unmaterialized", "--dry-run", "--home", home)
    assert (dry.exit_code, dry.stderr) == (0, "")
    assert dry.stdout.splitlines() == [render("T-CLI-PRUNE-WOULD-REMOVE", path=p) for p in (a, b)]
    assert a.is_dir() and b.is_dir()

    result = dsh("sessions", "prune", "--unmaterialized", "--home", home)
    assert (result.exit_code, result.stderr) == (0, "")
    assert result.stdout.splitlines() == [render("T-CLI-PRUNE-REMOVED", path=p) for p in (a, b)]
    assert sorted(p.name for p in (home / "sessions").iterdir()) == sorted([root, child])
    assert {sid: log_path(home, sid).read_bytes() for sid in tree_home} == before

    again = dsh("sessions", "prune", "--unmaterialized", "--home", home)
    assert (again.exit_code, again.stdout) == (0, "")
    assert again.stderr == render("T-CLI-PRUNE-NONE", home=home) + "\n"


def test_prune_keeps_a_dir_holding_foreign_files_and_needs_its_kind(dsh, home):
    session_dir = leave_unmaterialized(home)
    (session_dir / "notes.txt").write_text("mine")

    kept = dsh("sessions", "prune", "--unmaterialized", "--home", home)
    bare = dsh("sessions", "prune", "--home", home)

    assert (kept.exit_code, kept.stdout) == (0, "")
    assert kept.stderr == render("T-CLI-PRUNE-KEPT-FOREIGN", path=session_dir, name="notes.txt") + "\n"
    assert (session_dir / "notes.txt").exists()
    assert (bare.exit_code, bare.stdout) == (2, "")
    assert bare.stderr == "dsh: " + render("T-CLI-PRUNE-NEEDS-KIND") + "\n"


def test_merged_rows_over_two_homes_are_the_rows_of_one_home_holding_both(dsh, home, tree_home, tmp_path):
    """`sessions list` on the Temporal engine reads the client's home and the trees gathered from
    the workers' homes (cli/session_homes.listed_homes): one row per session (one in both homes
    counts once), in creation order, `--limit` over both, the client home's unmaterialized last."""
    import shutil

    from dsh.cli.session_listing import list_rows, merged_rows

    root, child = tree_home
    other = tmp_path / "other"
    assert dsh("run", "--json", "--transcript", "background-settlement", "--home", other).exit_code == 0
    shutil.copytree(home / "sessions" / child, other / "sessions" / child)  # a log in both homes
    leave_unmaterialized(home)
    whole = tmp_path / "whole"
    shutil.copytree(other / "sessions", whole / "sessions")
    shutil.copytree(home / "sessions", whole / "sessions", dirs_exist_ok=True)

    assert merged_rows([home, other]) == list_rows(whole)
    assert [r["id"] for r in merged_rows([home, other])][:2] == [root, child]
    assert merged_rows([home, other], limit=2) == list_rows(whole, limit=2)
    assert merged_rows([home, other], roots_only=True) == list_rows(whole, roots_only=True)
    assert len(merged_rows([home, other])) == 5  # two trees of two, and the unmaterialized row


async def test_a_parent_is_listed_before_a_child_made_in_the_same_millisecond(tmp_path):
    """Creation order with a millisecond clock: a tie goes to the shallower session (a child cannot
    be made before its parent), then to the id; here the child's id sorts first."""
    from dsh.cli.session_listing import list_rows, merged_rows
    from dsh.loader.session import SessionStore, make_header

    root, child = "session-ffffffff-ffff-4fff-8fff-ffffffffffff", "session-00000000-0000-4000-8000-000000000000"
    store = SessionStore(tmp_path / "home")
    for header in (make_header(root, created_at=1_000), make_header(child, parent_session=root, delegation_depth=1,
                                                                     origin="subagent", created_at=1_000)):
        await store.close(await store.create(header))

    assert [r["id"] for r in list_rows(tmp_path / "home")] == [root, child]
    assert [r["id"] for r in merged_rows([tmp_path / "home", tmp_path / "none"])] == [root, child]


def test_engine_local_never_asks_the_temporal_server_and_engine_temporal_asks_whatever_is_configured(
    home, tree_home, monkeypatch
):
    """`--engine local` reads the home as the local engine: a root whose socket does not answer is
    saved, with no question to a Temporal server even when `engine: temporal` is configured (that
    question imported temporalio and tried the server: 0.9 s instead of 0.4 s per view). `--engine
    temporal` asks the server whatever the configuration's engine is."""
    from dsh.cli import session_listing, session_rows

    root, child = tree_home
    asked: list[bool] = []

    def configured(forced: bool = False) -> None:
        asked.append(forced)
        return None  # no server to ask: not live

    monkeypatch.setattr(session_rows, "configured_temporal", configured)
    monkeypatch.setenv("DSH_ENGINE", "temporal")
    local = session_listing.list_rows(home, engine="local")
    assert [(r["id"], r["state"]) for r in local] == [(root, "saved"), (child, "saved")]
    assert session_listing.tree_rows(home, root, "local")[0]["state"] == "saved"
    assert asked == []
    session_listing.list_rows(home, engine="temporal")
    session_listing.list_rows(home)
    assert asked == [True, False]  # once per listing: the first root that no socket serves asks
