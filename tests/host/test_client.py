"""Client side (SPEC §18.4): address grammar, read-only routing, and what a dead socket means."""

from __future__ import annotations

import json
import shutil
import socket
import tempfile
from pathlib import Path

import pytest

from dsh.loader.host import (
    BadAddress,
    NoLiveRun,
    UnknownSession,
    UnroutableSession,
    call_sync,
    parse_address,
    route,
    socket_path,
)
from dsh.loader.host.client import MAX_HOPS
from dsh.loader.session import make_header

ROOT = "session-11111111-1111-4111-8111-111111111111"


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("abc", id="no-slash"),
        pytest.param("a/b/c", id="two-slashes"),
        pytest.param("/b", id="empty-parent"),
        pytest.param("a/", id="empty-child"),
        pytest.param("a/.b", id="child-starts-with-dot"),
        pytest.param("a b/c", id="space"),
        pytest.param("a/b\n", id="trailing-newline"),
        pytest.param(f"a/{'b' * 129}", id="child-too-long"),
    ],
)
def test_parse_address_rejects_anything_but_two_valid_ids(value: str) -> None:
    with pytest.raises(BadAddress) as info:
        parse_address(value)
    assert info.value.code == "BAD_ADDRESS"
    assert info.value.message == f"expected <parentSessionId>/<childSessionId>, got {value!r}"


def test_parse_address_splits_parent_and_child() -> None:
    assert parse_address(f"{ROOT}/abc-1.2_3") == (ROOT, "abc-1.2_3")


def write_session(home: Path, session_id: str, parent: str | None = None, *, raw: bytes | None = None) -> None:
    directory = home / "sessions" / session_id
    directory.mkdir(parents=True)
    header = make_header(session_id, parent_session=parent, origin="subagent" if parent else None)
    data = raw if raw is not None else (json.dumps(header) + "\n").encode()
    (directory / "session.jsonl").write_bytes(data)


def snapshot(home: Path) -> dict[str, tuple[bytes, int]]:
    return {str(p): (p.read_bytes(), p.stat().st_mtime_ns) for p in home.rglob("*") if p.is_file()}


def test_route_walks_parent_links_from_the_child_to_the_root(tmp_path: Path) -> None:
    write_session(tmp_path, ROOT)
    write_session(tmp_path, "c1", ROOT)
    write_session(tmp_path, "c2", "c1")
    write_session(tmp_path, "c3", "c2")
    before = snapshot(tmp_path)
    assert route(tmp_path, "c2", "c3") == ROOT
    assert snapshot(tmp_path) == before  # read-only (§5.6)


def test_route_walks_from_the_parent_when_the_child_has_no_file(tmp_path: Path) -> None:
    write_session(tmp_path, ROOT)
    write_session(tmp_path, "c1", ROOT)
    assert route(tmp_path, "c1", "not-created-yet") == ROOT


def test_route_of_a_root_address_is_the_root(tmp_path: Path) -> None:
    write_session(tmp_path, ROOT)
    assert route(tmp_path, ROOT, "gone") == ROOT


def test_route_reads_only_the_header_line(tmp_path: Path) -> None:
    """A torn or garbage tail never matters to routing: only line 1 is read."""
    header = json.dumps(make_header("c1", parent_session=ROOT, origin="subagent")).encode()
    write_session(tmp_path, ROOT)
    write_session(tmp_path, "c1", raw=header + b"\n\xff\xfe not json, no newline")
    assert route(tmp_path, ROOT, "c1") == ROOT


def test_route_with_neither_file_is_unknown_session(tmp_path: Path) -> None:
    with pytest.raises(UnknownSession) as info:
        route(tmp_path, "p", "c")
    assert info.value.session_id == "c"
    assert info.value.message == f"no session c under {tmp_path}/sessions"


def test_route_with_a_missing_ancestor_is_unknown_session(tmp_path: Path) -> None:
    write_session(tmp_path, "c1", "vanished")
    with pytest.raises(UnknownSession) as info:
        route(tmp_path, "vanished", "c1")
    assert info.value.session_id == "vanished"


def test_route_refuses_a_parent_cycle(tmp_path: Path) -> None:
    write_session(tmp_path, "a", "b")
    write_session(tmp_path, "b", "a")
    with pytest.raises(UnroutableSession):
        route(tmp_path, "b", "a")


def test_route_follows_at_most_64_links(tmp_path: Path) -> None:
    write_session(tmp_path, "s0")
    for i in range(1, MAX_HOPS + 2):
        write_session(tmp_path, f"s{i}", f"s{i - 1}")
    assert route(tmp_path, f"s{MAX_HOPS - 1}", f"s{MAX_HOPS}") == "s0"
    with pytest.raises(UnroutableSession):
        route(tmp_path, f"s{MAX_HOPS}", f"s{MAX_HOPS + 1}")


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(b"not json\n", id="garbage"),
        pytest.param(b'{"type":"session","version":2,"id":"c1","parentSession":"x"}\n', id="newer-format"),
        pytest.param(b'{"type":"session","version":1,"id":"other"}\n', id="foreign-id"),
        pytest.param(b'{"type":"session","version":1,"id":"c1","parentSession":"../x"}\n', id="bad-parent"),
    ],
)
def test_route_refuses_headers_it_cannot_trust(tmp_path: Path, raw: bytes) -> None:
    write_session(tmp_path, "c1", raw=raw)
    with pytest.raises(UnroutableSession):
        route(tmp_path, "p", "c1")


def test_route_rejects_ids_that_could_escape_the_sessions_directory(tmp_path: Path) -> None:
    with pytest.raises(BadAddress):
        route(tmp_path, "..", "x")


def test_call_without_a_socket_is_no_live_run(tmp_path: Path) -> None:
    with pytest.raises(NoLiveRun) as info:
        call_sync(tmp_path, ROOT, "run.status", {})
    assert info.value.code == "NO_LIVE_RUN"


def test_call_to_a_socket_that_refuses_is_no_live_run(tmp_path: Path) -> None:
    home = Path(tempfile.mkdtemp(prefix="dsh-", dir="/tmp"))  # short: keep the primary path
    path = socket_path(home, ROOT)
    path.parent.mkdir(parents=True)
    try:
        with socket.socket(socket.AF_UNIX) as s:
            s.bind(str(path))  # bound, never listening: connect() is refused
        with pytest.raises(NoLiveRun):
            call_sync(home, ROOT, "run.status", {})
    finally:
        shutil.rmtree(home)
