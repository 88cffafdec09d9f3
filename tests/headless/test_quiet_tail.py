"""A big tree's quiet logs, followed on the client's home (`projection.Quiet`, issue 12 item 7).

`dsh run --engine temporal` with the workers' home reads every log of the tree every 50 ms; each
pass stat'ed each log, so a 2,000-child fan-out spent 40 s of the client's CPU on it. A log that
has not grown for QUIET_PASSES passes is now read only every SWEEP_EVERY passes, once the tree has
QUIET_FROM sessions; these tests drive a real `TreeTail` over hand-made logs and count passes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dsh.loader.engines.projection import QUIET_FROM, QUIET_PASSES, SWEEP_EVERY, TreeTail
from dsh.loader.session import make_header
from dsh.loader.session.envelope import encode_line
from dsh.loader.sinks import RunSinks

ROOT = "session-root"


def make_tree(home: Path, children: int) -> list[str]:
    """A root and `children` children, each log a header and one event."""
    ids = [ROOT] + [f"session-child-{i:03d}" for i in range(children)]
    for sid in ids:
        directory = home / "sessions" / sid
        directory.mkdir(parents=True)
        header = make_header(sid, parent_session=None if sid == ROOT else ROOT, created_at=1)
        (directory / "session.jsonl").write_bytes(encode_line(header) + event(0))
    return ids


def event(seq: int) -> bytes:
    return encode_line({"type": "turn/start", "seq": seq, "time": 1, "data": {"turn": seq + 1}})


def append(home: Path, sid: str, seq: int) -> None:
    with open(home / "sessions" / sid / "session.jsonl", "ab") as f:
        f.write(event(seq))


class Seen:
    def __init__(self) -> None:
        self.events: list[tuple[str, int]] = []

    def __call__(self, sid: str, e: dict[str, Any]) -> None:
        self.events.append((sid, e["seq"]))


def tail_of(home: Path) -> tuple[TreeTail, Seen]:
    seen = Seen()
    return TreeTail(home, ROOT, RunSinks(on_event=seen)), seen


def passes_until_seen(tail: TreeTail, seen: Seen, item: tuple[str, int], most: int) -> int:
    for n in range(1, most + 1):
        tail.poll()
        if item in seen.events:
            return n
    return -1


def test_a_quiet_log_of_a_big_tree_is_read_on_the_sweep_pass_and_a_busy_one_every_pass(tmp_path: Path) -> None:
    ids = make_tree(tmp_path, QUIET_FROM)
    tail, seen = tail_of(tmp_path)
    tail.poll()
    assert sorted(seen.events) == sorted((sid, 0) for sid in ids)  # every log joined: read whole
    quiet, busy = ids[5], ids[7]
    for seq in range(1, QUIET_PASSES + 2):  # busy grows every pass; the rest go quiet
        append(tmp_path, busy, seq)
        tail.poll()
        assert seen.events[-1] == (busy, seq)
    append(tmp_path, quiet, 1)
    passes = tail._quiet.passes
    waited = passes_until_seen(tail, seen, (quiet, 1), SWEEP_EVERY)
    assert waited == SWEEP_EVERY - passes % SWEEP_EVERY  # read on the next sweep pass, not before
    assert tail._quiet.passes % SWEEP_EVERY == 0
    append(tmp_path, busy, QUIET_PASSES + 2)  # it last grew fewer than QUIET_PASSES passes ago: read
    tail.poll()
    assert seen.events[-1] == (busy, QUIET_PASSES + 2)


def test_the_drain_reads_every_log_quiet_or_not(tmp_path: Path) -> None:
    ids = make_tree(tmp_path, QUIET_FROM)
    tail, seen = tail_of(tmp_path)
    for _ in range(QUIET_PASSES + 2):
        tail.poll()
    if tail._quiet.passes % SWEEP_EVERY == SWEEP_EVERY - 1:
        tail.poll()  # the next pass must not be a sweep, or the test would prove nothing
    append(tmp_path, ids[3], 1)
    tail.poll()
    assert (ids[3], 1) not in seen.events  # quiet: left for the sweep
    append(tmp_path, ids[4], 1)
    tail.poll(full=True)
    assert {(ids[3], 1), (ids[4], 1)} <= set(seen.events)


def test_a_small_tree_reads_every_log_every_pass(tmp_path: Path) -> None:
    ids = make_tree(tmp_path, QUIET_FROM - 2)  # with the root, one session short of QUIET_FROM
    tail, seen = tail_of(tmp_path)
    for _ in range(QUIET_PASSES + 2):
        tail.poll()
    for seq, sid in enumerate(ids[1:6], start=1):
        if tail._quiet.passes % SWEEP_EVERY == SWEEP_EVERY - 1:
            tail.poll()  # not a sweep pass next
        append(tmp_path, sid, seq)
        tail.poll()
        assert seen.events[-1] == (sid, seq)


def test_a_session_joins_on_the_next_pass_and_an_incomplete_header_is_looked_at_again(tmp_path: Path) -> None:
    """The directory is scanned only when its mtime moved, on a sweep, or while a header was
    incomplete: a child made between passes joins at once, and one whose header line was not
    complete at the scan joins the pass after it is, though completing it moves no mtime of
    `sessions/`."""
    make_tree(tmp_path, QUIET_FROM)
    tail, seen = tail_of(tmp_path)
    for _ in range(3):
        tail.poll()
    new = "session-child-new"
    directory = tmp_path / "sessions" / new
    directory.mkdir()
    header = encode_line(make_header(new, parent_session=ROOT, created_at=1))
    (directory / "session.jsonl").write_bytes(header[:10])  # the header, torn
    if tail._quiet.passes % SWEEP_EVERY == SWEEP_EVERY - 1:
        tail.poll()  # the next passes must not be sweeps
    tail.poll()
    assert new not in tail.tails
    with open(directory / "session.jsonl", "ab") as f:
        f.write(header[10:] + event(0))
    tail.poll()
    assert (new, 0) in seen.events
    other = "session-child-other"
    (tmp_path / "sessions" / other).mkdir()
    (tmp_path / "sessions" / other / "session.jsonl").write_bytes(
        encode_line(make_header(other, parent_session=ROOT, created_at=1)) + event(0))
    tail.poll()
    assert (other, 0) in seen.events
