"""Fuzzing (issue 15 item 7): control RPC frames against a real `dsh run` process whose child hangs.
Each frame is followed on the same connection by a `run.status` probe; every line before the
probe's answer must be a JSON-RPC response (a result, or an error with a §18.3 `data.code`), or the
connection closed. At the end the child is interrupted through the real CLI, the run finishes with
exit 0 and its stderr is empty: no frame reached it.
"""

from __future__ import annotations

import json
import shutil
import socket
import tempfile
from pathlib import Path

import pytest
from cli_kit import LiveRun, first_child, hold_until_hang, run_dsh, spawn, transcript
from fuzz_kit import any_text
from hypothesis import given
from hypothesis import strategies as st

from dsh.loader.host import socket_path

HANGING_CHILD = {
    "root": {"replies": [spawn("start-worker"), {"text": "ROOT_DONE"}, {"text": "NOTED"}]},
    "worker": {"spawnedBy": "start-worker", "replies": [{"hang": {"text": "partial"}}]},
}
DATA_CODES = {"bad-request", "subagent-unauthorized", "subagent-not-resumable", "subagent-delivery-unavailable", "internal"}


@pytest.fixture(scope="module")
def served():
    scratch = Path(tempfile.mkdtemp(prefix="dsh-fuzz-", dir="/tmp"))
    home = scratch / "h"
    script = transcript(scratch, "fuzz-rpc", HANGING_CHILD, fences=hold_until_hang("worker"))
    run = LiveRun(["--transcript", str(script), "--home", str(home)])
    try:
        root, child = first_child(run)
        run.wait_event(root, "turn/end", turn=1)
        yield str(socket_path(home, root))
        stopped = run_dsh("interrupt", f"{root}/{child}", "--home", home)
        assert stopped.returncode == 0, stopped.stderr
        code = run.finish()
        assert run.stderr == b"", run.stderr[-2000:]
        assert (code, run.records[-1]["violations"]) == (0, [])
    finally:
        run.kill()
        shutil.rmtree(scratch, ignore_errors=True)


ids = st.one_of(st.none(), st.integers(), st.integers(-(10**70), 10**70), st.floats(), any_text, st.booleans(),
                st.lists(st.integers(), max_size=2))
scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), any_text)
json_values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                            st.dictionaries(any_text, inner, max_size=3)), max_leaves=10)
session_ids = st.one_of(any_text, st.sampled_from(["a", "a..b", "session-x", "x" * 200, "00000000-0000-4000-8000-000000000000"]))
params = st.one_of(
    json_values,
    st.fixed_dictionaries({}, optional={"parentSessionId": session_ids, "childSessionId": session_ids,
                                        "message": any_text, "scope": st.sampled_from(["children", "descendants", "x"]),
                                        "mode": any_text}),
)
envelope = st.fixed_dictionaries(
    {},
    optional={"jsonrpc": st.sampled_from(["2.0", "2.0", "1.0", 2]), "id": ids,
              "method": st.one_of(st.sampled_from(["run.status", "subagent.list", "subagent.interrupt", "subagent.prompt"]), any_text),
              "params": params, "extra": json_values},
)


def _encode(body: object, ascii_only: bool) -> bytes:
    return json.dumps(body, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")


frames = st.one_of(
    st.tuples(envelope, st.booleans()).map(lambda t: _encode(*t)),
    st.binary(max_size=400),
    st.integers(1, 20_000).map(lambda n: b"[" * n + b"]" * n),
    st.integers(1, 5_000).map(lambda n: b'{"a":' * n + b"1" + b"}" * n),
    st.tuples(st.sampled_from([b'{"jsonrpc":"2.0","id":', b'{"jsonrpc":"2.0","method":"run.status","id":']),
              st.binary(max_size=50), st.sampled_from([b"}", b""])).map(b"".join),
)


def _exchange(path: str, frame: bytes, probe: int) -> list[dict]:
    answers: list[dict] = []
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(10)
        sock.connect(path)
        sock.sendall(frame + b"\n" + json.dumps({"jsonrpc": "2.0", "id": f"probe-{probe}", "method": "run.status"}).encode() + b"\n")
        buffer = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return answers  # closed: allowed
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                answer = json.loads(line.decode("utf-8"))
                answers.append(answer)
                if answer.get("id") == f"probe-{probe}":
                    return answers


COUNTER = [0]


@given(frame=frames)
def test_fuzz_rpc_frames(served, frame):
    COUNTER[0] += 1
    answers = _exchange(served, frame, COUNTER[0])

    for answer in answers:
        assert answer["jsonrpc"] == "2.0"
        assert ("result" in answer) != ("error" in answer), answer
        if "error" in answer:
            assert answer["error"]["data"]["code"] in DATA_CODES, answer
            assert answer["error"]["data"]["code"] != "internal", answer
    if answers:
        assert answers[-1].get("id") == f"probe-{COUNTER[0]}" and "result" in answers[-1]
