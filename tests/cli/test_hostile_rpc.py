"""Issue 15 item 5 end to end: hostile frames sent to a real `dsh run` process's control socket are
each answered `bad-request` (or the connection is closed), the run goes on to interrupt its child and
finish normally, and its stderr stays empty.
"""

from __future__ import annotations

import json
import socket

from cli_kit import first_child, hold_until_hang, run_dsh, spawn, transcript

from dsh.loader.host import socket_path

HANGING_CHILD = {
    "root": {"replies": [spawn("start-worker"), {"text": "ROOT_DONE"}, {"text": "NOTED"}]},
    "worker": {"spawnedBy": "start-worker", "replies": [{"hang": {"text": "partial"}}]},
}

FRAMES = [
    b"[" * 200_000,
    b'{"a":' * 50_000 + b"1" + b"}" * 50_000,
    b'{"jsonrpc":"2.0","id":"\\ud800","method":"run.status"}',
    b'{"jsonrpc":"2.0","id":1,"method":"run.\xc3\x28"}',
    b'{"jsonrpc":"2.0","id":' + b"9" * 5000 + b',"method":"run.status"}',
    b'{"jsonrpc":"2.0","id":1,"method":"subagent.prompt","params":{"parentSessionId":"a","childSessionId":"b","message":"\\udc80"}}',
    b"\x00\xff" * 100,
]


def _exchange(path: str, frame: bytes) -> bytes:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(10)
        sock.connect(path)
        sock.sendall(frame + b"\n")
        data = b""
        while not data.endswith(b"\n"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
        return data


def test_hostile_frames_reach_neither_the_run_nor_its_stderr(live_run, home, tmp_path):
    script = transcript(tmp_path, "hostile-rpc", HANGING_CHILD, fences=hold_until_hang("worker"))
    run = live_run("--transcript", script, "--home", home)
    root, child = first_child(run)
    run.wait_event(root, "turn/end", turn=1)  # the fence: the child's hang was reached
    path = str(socket_path(home, root))

    answers = [json.loads(_exchange(path, frame)) for frame in FRAMES]

    assert [a["error"]["data"]["code"] for a in answers] == ["bad-request"] * len(FRAMES)
    stopped = run_dsh("interrupt", f"{root}/{child}", "--home", home)
    assert stopped.returncode == 0, stopped.stderr
    code = run.finish()
    assert run.stderr == b""
    assert (code, run.records[-1]["violations"]) == (0, [])
