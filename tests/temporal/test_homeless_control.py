"""`dsh interrupt` / `dsh send` from a client that does not share the workers' `--home` (issue 12
item 3): its home has no log of the tree, so the server, which holds the tree, is asked. The
authority rules hold as with the logs at hand: a parent that is not the child's is refused
(T-CLI-UNAUTHORIZED, exit 2), an id no tree holds is unknown (exit 2), the right parent
interrupts and sends; without the Temporal engine the local answer (unknown, exit 2) stands.

The tree is park-and-send under `--parked wait` (tests/temporal/test_temporal_control.py): the
interrupt parks the child with its follow-up queued, the tree stalls, the send wakes it.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from temporal_kit import dev_server
from test_seam import env_without_dsh
from test_temporal_control import PARK_AND_SEND, child_signalled_stalled, dsh, started_run

from dsh.loader.config import compose, flag_layer
from dsh.loader.ids import new_child_id, new_root_id
from dsh.loader.session import SessionStore
from dsh.loader.texts import render
from dsh.loader.transcripts import load_transcript


async def test_a_client_with_another_empty_home_is_checked_against_the_tree_the_server_holds(tmp_path: Path) -> None:
    home, elsewhere = tmp_path / "home", tmp_path / "elsewhere"
    elsewhere.mkdir()
    script_path = tmp_path / "park-and-send.yaml"
    script_path.write_text(PARK_AND_SEND)
    script = load_transcript(str(script_path))
    composed = compose(transcript=script, environ={}, cwd=tmp_path, flags=[flag_layer("--parked", "run.parked", "wait")])
    async with dev_server() as client:
        async with started_run(client, home, script, composed) as (run, root, child, queue):
            plain = env_without_dsh(DSH_TEMPORAL__ADDRESS=client.service_client.config.target_host,
                                    DSH_TEMPORAL__TASK_QUEUE=queue)
            env = {**plain, "DSH_ENGINE": "temporal"}
            away = ["--home", str(elsewhere)]
            stranger, unknown = new_root_id(), new_child_id()
            # What the saved headers would refuse (exit 2, the same lines), refused from the tree;
            # without the Temporal engine an empty home knows no child (the local answer). Each
            # refusal changes nothing, so they run side by side.
            wrong, missing, local = await asyncio.gather(
                dsh(["interrupt", f"{stranger}/{child}", *away], env, tmp_path),
                dsh(["send", f"{root}/{unknown}", "x", *away], env, tmp_path),
                dsh(["interrupt", f"{root}/{child}", *away], plain, tmp_path))
            assert (wrong.returncode, wrong.stdout) == (2, ""), wrong.stderr
            assert wrong.stderr.strip() == "dsh: " + render("T-CLI-UNAUTHORIZED", child=child, parent=stranger)
            assert missing.returncode == 2, missing.stderr
            assert missing.stderr.strip() == "dsh: " + render("T-CLI-UNKNOWN-SESSION", id=unknown, home=elsewhere)
            assert local.returncode == 2
            assert local.stderr.strip() == "dsh: " + render("T-CLI-UNKNOWN-SESSION", id=child, home=elsewhere)
            done = await dsh(["interrupt", f"{root}/{child}", *away], env, tmp_path)
            assert (done.returncode, done.stdout.strip()) == (0, render("T-CLI-INTERRUPTED", child=child)), done.stderr
            await asyncio.wait_for(child_signalled_stalled(client, root), 60)
            sent = await dsh(["send", f"{root}/{child}", "More.", "--engine", "temporal", *away], plain, tmp_path)
            assert sent.returncode == 0, sent.stderr
            result = await asyncio.wait_for(run, 60)
        assert (result.exit_code, result.output, result.violations) == (0, "CHILD_DONE", [])
        events = SessionStore(home).read(child).events
        [more] = [e["data"] for e in events if e["type"] == "user/message" and e["data"]["id"] == sent.stdout.strip()]
        assert (more["content"][0]["text"], more["source"]) == ("More.", {"kind": "user"})
        assert [e["data"]["reason"] for e in events if e["type"] == "turn/end"][0] == {
            "kind": "aborted", "reason": {"kind": "user"}}
        # The run is over: the accepted no-op, found through the server as well.
        late = await dsh(["interrupt", f"{root}/{child}", *away], env, tmp_path)
        assert (late.returncode, late.stdout.strip()) == (0, render("T-CLI-NO-RUN", child=child)), late.stderr
        assert not any(elsewhere.iterdir())  # the client wrote nothing into its own home
